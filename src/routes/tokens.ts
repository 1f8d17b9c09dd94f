import { Hono } from "hono";
import { createMiddleware } from "hono/factory";
import { DEFAULT_TOKEN_NAME, MintToken } from "../api/token-input";
import type { AppEnv } from "../app-env";
import { generateSecret, hashSecret } from "../auth/key-secret";
import { assertCatalogModels } from "../auth/scope-fields";
import { loadConfig } from "../config";
import { keyStore } from "../db/keys";
import type { ApiKeyRow } from "../db/schema";
import { GatewayError } from "../errors";
import { jsonBody } from "../http/json-body";
import { randomId } from "../ids";
import { nanosToUsd, usdToNanos } from "../money/pricing";

function widening(param: string, message: string): GatewayError {
	return new GatewayError("forbidden", `A token cannot widen its key's scopes: ${message}`, { param });
}

/** A nano-dollar amount as the API writes money: USD. */
const usd = (nanos: number): string => `$${nanosToUsd(nanos)}`;

/**
 * A numeric limit of the token: at most the parent's, when the parent has one. `show` writes a
 * limit as the caller sent it (money is compared in nano-dollars but named in USD).
 */
function narrowed(
	param: string,
	asked: number | undefined,
	parentLimit: number | null,
	show: (n: number) => string = String,
): number | null {
	if (asked === undefined) return null;
	if (parentLimit !== null && asked > parentLimit) {
		throw widening(param, `'${param}' ${show(asked)} is above the key's ${show(parentLimit)}.`);
	}
	return asked;
}

/** Only a server-side key mints tokens: checked before the body is read, so a refusal does not depend on it. */
const mayMint = createMiddleware<AppEnv>(async (c, next) => {
	const principal = c.get("principal");
	if (principal.parent) throw new GatewayError("forbidden", "A temporary token cannot mint tokens.");
	if (principal.key.allowedOrigins) {
		throw new GatewayError("forbidden", "Only server-side keys (without allowed_origins) can mint tokens.");
	}
	await next();
});

/**
 * POST /v1/tokens: a server-side key mints a short-lived `vk-tmp-` browser token that draws on
 * its balance, is bound to origins, expires within an hour and never after the key, and has at
 * most the key's scopes. Tokens cannot mint tokens.
 */
export const tokensRoutes = new Hono<AppEnv>().post("/", mayMint, jsonBody(MintToken), async (c) => {
	const parent = c.get("principal").key;
	const input = c.req.valid("json");
	assertCatalogModels(loadConfig(c.env.GATEWAY_CONFIG), input.allowed_models, "allowed_models");
	if (input.allowed_models && parent.allowedModels) {
		const outside = input.allowed_models.find((m) => !parent.allowedModels?.includes(m));
		if (outside) throw widening("allowed_models", `the key may not use the model '${outside}'.`);
	}
	const spendLimitNanos = narrowed(
		"spend_limit_usd",
		input.spend_limit_usd === undefined ? undefined : usdToNanos(input.spend_limit_usd),
		parent.spendLimitNanos,
		usd,
	);
	const now = Date.now();
	const nowS = Math.floor(now / 1000);
	const expiresAt = Math.min(nowS + input.ttl_seconds, parent.expiresAt ?? Number.POSITIVE_INFINITY);

	const secret = generateSecret("tmp");
	const row: ApiKeyRow = {
		id: randomId("key_"),
		name: input.name ?? DEFAULT_TOKEN_NAME,
		hash: await hashSecret(secret),
		prefix: secret.slice(0, 14),
		createdAt: now,
		revokedAt: null,
		expiresAt,
		allowedOrigins: input.allowed_origins,
		allowedModels: input.allowed_models ?? parent.allowedModels,
		rpm: narrowed("rpm", input.rpm, parent.rpm),
		tpm: narrowed("tpm", input.tpm, parent.tpm),
		spendLimitNanos,
		spendLimitPeriod: null,
		maxTokens: narrowed("max_tokens", input.max_tokens, parent.maxTokens),
		// Counted inside the parent's own cap too (both scopes are checked with each hold).
		maxConcurrent: narrowed("max_concurrent", input.max_concurrent, parent.maxConcurrent),
		// The parent's per-user caps apply to its tokens' requests through the parent's scope.
		perUserRpm: null,
		perUserDailyNanos: null,
		metadata: null,
		parentKeyId: parent.id,
		alerts: null,
	};
	await keyStore(c.env.DB).insert(row);
	return c.json(
		{
			id: row.id,
			object: "token" as const,
			token: secret,
			parent_key_id: parent.id,
			created_at: nowS,
			expires_at: expiresAt,
			allowed_origins: row.allowedOrigins,
			allowed_models: row.allowedModels,
			rpm: row.rpm,
			tpm: row.tpm,
			spend_limit_usd: row.spendLimitNanos === null ? null : nanosToUsd(row.spendLimitNanos),
			max_tokens: row.maxTokens,
			max_concurrent: row.maxConcurrent,
		},
		201,
	);
});
