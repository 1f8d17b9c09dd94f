/**
 * Spend and node alerts in the admin API (docs/operations.md, "Alerts"): a key's rules are
 * checked against the deployment's alert settings and handed to its ledger, which detects the
 * crossings; `GET /admin/keys/{id}/alert-deliveries` (from the key's ledger, as it stands) and
 * `GET /admin/alert-deliveries` (every key's and the nodes', from D1) list the deliveries.
 */
import { Hono } from "hono";
import { ALERT_WHENS, type AlertRule, webhookUrlProblem } from "../alerts/rules";
import { alertDeliveryView } from "../api/alert-views";
import { cursorParam, intParam } from "../api/list-params";
import type { AppEnv } from "../app-env";
import { listAlertDeliveries } from "../db/alert-deliveries";
import { encodePageCursor, pageOf } from "../db/page-cursor";
import type { ApiKeyRow } from "../db/schema";
import { GatewayError } from "../errors";
import { ledgerFor } from "../ledger/ledger-client";

const invalid = (message: string) => new GatewayError("invalid_request", message, { param: "alerts" });

/** A key's rules need somewhere to post and a secret to sign with; refused here rather than failing later. */
export function checkAlerts(env: Env, rules: AlertRule[] | null | undefined): void {
	if (!rules?.length) return;
	if (!env.ALERT_WEBHOOK_SECRET) {
		throw invalid("Invalid value for 'alerts': set the ALERT_WEBHOOK_SECRET secret first (every delivery is signed with it).");
	}
	const fallback = env.ALERT_WEBHOOK_URL;
	if (rules.some((r) => !r.webhook_url) && (!fallback || webhookUrlProblem(fallback) !== null)) {
		throw invalid("Invalid value for 'alerts': a rule without webhook_url needs a valid ALERT_WEBHOOK_URL.");
	}
}

/** Hands a key's rules, name and spend limit to its ledger (a token has no ledger of its own, nor alerts). */
export async function pushAlerts(env: Env, key: ApiKeyRow): Promise<void> {
	if (key.parentKeyId) return;
	try {
		await ledgerFor(env, key.id).setAlerts({
			keyId: key.id,
			name: key.name,
			rules: key.alerts ?? [],
			spendLimitNanos: key.spendLimitNanos,
			spendPeriod: (key.spendLimitPeriod as "daily" | "weekly" | "monthly" | null) ?? null,
		});
	} catch (err) {
		console.error("telling the ledger about a key's alerts failed", err);
		throw new GatewayError(
			"upstream_unavailable",
			"The key was saved but its ledger could not be told its alerts: retry the request.",
			{
				status: 503,
			},
		);
	}
}

const STATUSES = ["pending", "delivered", "failed"] as const;
const EVENTS = [...ALERT_WHENS, "node_down", "node_back"] as const;

function oneOf<T extends string>(v: string | undefined, allowed: readonly T[], name: string): T | undefined {
	if (v === undefined || v === "") return undefined;
	if ((allowed as readonly string[]).includes(v)) return v as T;
	throw new GatewayError("invalid_request", `'${name}' must be one of ${allowed.join(", ")}.`, { param: name });
}

/** `GET /admin/keys/{id}/alert-deliveries`: from the key's ledger, newest first. */
export async function keyAlertDeliveries(env: Env, keyId: string, limitRaw: string | undefined) {
	const limit = intParam(limitRaw, "limit", 50, 200);
	const rows = await ledgerFor(env, keyId).alertDeliveries(limit);
	return { object: "list" as const, data: rows.map(alertDeliveryView) };
}

/** `GET /admin/alert-deliveries?key_id=&status=&event=&limit=&cursor=`: every delivery D1 has a copy of, newest first. */
export const adminAlertDeliveries = new Hono<AppEnv>().get("/", async (c) => {
	const limit = intParam(c.req.query("limit"), "limit", 50, 500);
	const rows = await listAlertDeliveries(c.env.DB, {
		keyId: c.req.query("key_id") || undefined,
		status: oneOf(c.req.query("status"), STATUSES, "status"),
		event: oneOf(c.req.query("event"), EVENTS, "event"),
		before: cursorParam(c.req.query("cursor")),
		limit: limit + 1,
	});
	const { page, nextCursor } = pageOf(rows, limit, (r) => encodePageCursor(r.createdAt, r.id));
	return c.json({ object: "list", data: page.map(alertDeliveryView), next_cursor: nextCursor });
});
