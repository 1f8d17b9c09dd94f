import type { Context } from "hono";
import { balanceView, keyView } from "../api/views";
import type { AppEnv } from "../app-env";
import { payerKeyId } from "../auth/scopes";
import { ledgerFor } from "../ledger/ledger-client";

/** GET /v1/key: the caller's own key, its balance and limits. Never the secret, nor the operator's metadata. */
export async function ownKey(c: Context<AppEnv>): Promise<Response> {
	const principal = c.get("principal");
	// Metadata is the operator's note about the key holder, not the holder's to read.
	// The alerts name the operator's webhooks: the operator's, as the metadata.
	const { metadata: _operatorOnly, alerts: _operatorsAlerts, ...view } = keyView(principal.key);
	return c.json({
		...view,
		// A vk-tmp- token draws on its parent's balance, so that is the balance it shows.
		...balanceView(await ledgerFor(c.env, payerKeyId(principal)).info()),
		// The same limits, grouped, for clients that only want to know what they may do.
		limits: {
			rpm: view.rpm,
			tpm: view.tpm,
			max_concurrent: view.max_concurrent,
			per_user_rpm: view.per_user_rpm,
			per_user_daily_usd: view.per_user_daily_usd,
			spend_limit_usd: view.spend_limit_usd,
			spend_limit_period: view.spend_limit_period,
			max_tokens: view.max_tokens,
			allowed_models: view.allowed_models,
			allowed_origins: view.allowed_origins,
			expires_at: view.expires_at,
		},
	});
}
