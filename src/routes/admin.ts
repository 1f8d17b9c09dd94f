import { Hono } from "hono";
import { createMiddleware } from "hono/factory";
import type { AlertRule } from "../alerts/rules";
import { assertTokenPatch, CreateKey, Credit, PatchKey, scopeColumns } from "../api/key-input";
import { cursorParam, intParam } from "../api/list-params";
import { balanceView, creditView, keyView } from "../api/views";
import type { AppEnv } from "../app-env";
import { invalidateKey, tellLedger } from "../auth/invalidate-key";
import { generateSecret, hashSecret } from "../auth/key-secret";
import { requireAdmin } from "../auth/require-admin";
import { assertCatalogModels, KeyName } from "../auth/scope-fields";
import { loadConfig } from "../config";
import { type KeyActivity, keyActivity } from "../db/key-activity";
import { keyStore } from "../db/keys";
import { encodePageCursor, pageOf } from "../db/page-cursor";
import type { ApiKeyRow } from "../db/schema";
import { GatewayError } from "../errors";
import { jsonBody } from "../http/json-body";
import { randomId } from "../ids";
import { ledgerFor } from "../ledger/ledger-client";
import { nanosToUsd, usdToNanos } from "../money/pricing";
import { adminAlertDeliveries, checkAlerts, keyAlertDeliveries, pushAlerts } from "./admin-alerts";
import { adminBatches } from "./admin-batches";
import { adminMaintenance } from "./admin-maintenance";
import { adminNodes } from "./admin-nodes";
import { adminRefusals } from "./admin-refusals";
import { listUsage, usageSummary } from "./usage";

/** Routes under `/keys/:id` see the key they name. */
type KeyEnv = AppEnv & { Variables: { target: ApiKeyRow } };

/** Scope fields that need the catalog: every allowed model must exist. */
function checkScopes(env: Env, input: { allowed_models?: string[] | null; alerts?: AlertRule[] | null }): void {
	if (input.allowed_models) assertCatalogModels(loadConfig(env.GATEWAY_CONFIG), input.allowed_models, "allowed_models");
	checkAlerts(env, input.alerts);
}

async function mustFind(env: Env, id: string): Promise<ApiKeyRow> {
	const key = await keyStore(env.DB).byId(id);
	if (!key) throw new GatewayError("not_found", `No API key with id '${id}'.`, { param: "id" });
	return key;
}

/** The key named by `:id`, looked up before any body is read: an unknown id is a 404 whatever the body says. */
const targetKey = createMiddleware<KeyEnv>(async (c, next) => {
	c.set("target", await mustFind(c.env, c.req.param("id") ?? ""));
	await next();
});

/** Nothing draws on a token's own ledger: credit there would be money nobody can spend. */
const creditable = createMiddleware<KeyEnv>(async (c, next) => {
	const key = c.get("target");
	if (key.parentKeyId) {
		throw new GatewayError(
			"invalid_request",
			`'${key.id}' is a temporary token: tokens draw on their parent key's balance. Add credits to its parent key '${key.parentKeyId}' instead.`,
			{ param: "id" },
		);
	}
	await next();
});

/** The money of a key that has no parent: its own ledger's. */
async function ledgerBalance(env: Env, keyId: string) {
	return balanceView(await ledgerFor(env, keyId).info());
}

/** How many ledgers a listing asks at once: a page of 1,000 keys must not open 1,000 calls together. */
const BALANCE_CONCURRENCY = 25;

/**
 * The money of each listed key, from its ledger (as `GET /admin/keys/{id}`), a bounded number at
 * a time. One ledger that fails to answer leaves its row's money null instead of failing the list.
 */
async function listedBalances(env: Env, keys: ApiKeyRow[]) {
	const out: (ReturnType<typeof balanceView> | null)[] = new Array(keys.length).fill(null);
	let next = 0;
	const worker = async () => {
		for (let i = next++; i < keys.length; i = next++) {
			const key = keys[i] as ApiKeyRow;
			try {
				out[i] = await ledgerBalance(env, key.id);
			} catch (err) {
				console.warn(`reading the ledger of ${key.id} for the key list failed`, err);
			}
		}
	};
	await Promise.all(Array.from({ length: Math.min(BALANCE_CONCURRENCY, keys.length) }, worker));
	return out;
}

const NO_BALANCE = { balance_usd: null, spent_usd: null, held_usd: null, reserved_usd: null, open_holds: null };

/** `GET /admin/keys?name=`: a part of a key name (same rules as a name), or absent/empty for every key. */
function nameFilter(raw: string | undefined): string | undefined {
	if (raw === undefined || raw === "") return undefined;
	if (!KeyName.safeParse(raw).success) {
		throw new GatewayError(
			"invalid_request",
			"Invalid 'name': a part of a key name, at most 200 characters on one line (no control characters).",
			{ param: "name" },
		);
	}
	return raw;
}

/**
 * A key's money with its use (the console's keys view): `last_used_at` (unix seconds, from the
 * usage records: it trails a request by the ledger's flush), `requests_today` (UTC) and
 * `overdrawn` (settlement took the balance below zero: an answer cost more than its hold).
 */
function withUse<T extends { balance_usd: number | null }>(money: T, use: KeyActivity | undefined) {
	return {
		...money,
		overdrawn: money.balance_usd !== null && money.balance_usd < 0,
		last_used_at: use?.lastUsedAt == null ? null : Math.floor(use.lastUsedAt / 1000),
		requests_today: use?.requestsToday ?? 0,
	};
}

/** The Idempotency-Key header of a credit: absent or blank is none; at most 255 characters. */
function idempotencyKey(raw: string | undefined): string | undefined {
	const key = raw?.trim();
	if (!key) return undefined;
	if (key.length > 255) {
		throw new GatewayError("invalid_request", "The Idempotency-Key header must be at most 255 characters.", {
			param: "Idempotency-Key",
		});
	}
	return key;
}

/** Adds (or takes back) credit through the key's ledger, which refuses to leave the balance range. */
async function applyCredit(env: Env, keyId: string, amountUsd: number, idempotencyKey: string, note?: string) {
	const result = await ledgerFor(env, keyId).credit({ keyId, amountNanos: usdToNanos(amountUsd), idempotencyKey, note });
	if (result.refused === "below_zero") {
		throw new GatewayError(
			"invalid_request",
			`Invalid value for 'amount_usd': the debit would take the balance below zero (it is $${nanosToUsd(result.balanceNanos)}).`,
			{ param: "amount_usd", code: "balance_below_zero" },
		);
	}
	if (result.refused === "held") {
		throw new GatewayError(
			"conflict",
			`The debit would leave less than the $${nanosToUsd(result.heldNanos ?? 0)} held for requests in flight (balance $${nanosToUsd(result.balanceNanos)}); retry once they settle, within seconds.`,
			{ param: "amount_usd", code: "balance_held" },
		);
	}
	if (result.refused === "idempotency_mismatch") {
		throw new GatewayError(
			"conflict",
			"This Idempotency-Key header was already used for a credit of another amount: send a new key for a new credit, or the same amount to replay it.",
			{ param: null, code: "idempotency_key_reused" },
		);
	}
	if (result.refused === "too_large") {
		throw new GatewayError(
			"invalid_request",
			`Invalid value for 'amount_usd': the credit would take the balance past the largest a key may hold ($${nanosToUsd(Number.MAX_SAFE_INTEGER)}).`,
			{ param: "amount_usd", code: "balance_too_large" },
		);
	}
	return result;
}

export const adminRoutes = new Hono<AppEnv>()
	.use("*", requireAdmin)
	.post("/keys", jsonBody(CreateKey), async (c) => {
		const input = c.req.valid("json");
		checkScopes(c.env, input);
		const secret = generateSecret();
		const id = randomId("key_");
		await keyStore(c.env.DB).insert({
			id,
			hash: await hashSecret(secret),
			prefix: secret.slice(0, 10),
			createdAt: Date.now(),
			...scopeColumns(input),
			name: input.name,
		});
		const created = await mustFind(c.env, id);
		// Before the initial credit: a rule the first balance already clears starts armed. The name
		// and spend limit go too, for the config's operator-wide rules.
		await pushAlerts(c.env, created);
		if (input.balance_usd > 0) await applyCredit(c.env, id, input.balance_usd, "initial", "initial balance");
		return c.json({ ...keyView(created), key: secret, ...(await ledgerBalance(c.env, id)) }, 201);
	})
	.get("/keys", async (c) => {
		const limit = intParam(c.req.query("limit"), "limit", 100, 1000);
		const before = cursorParam(c.req.query("cursor"));
		const name = nameFilter(c.req.query("name"));
		const rows = await keyStore(c.env.DB).list(limit + 1, before, name);
		const { page, nextCursor } = pageOf(rows, limit, (k) => encodePageCursor(k.createdAt, k.id));
		const [money, activity] = await Promise.all([
			listedBalances(c.env, page),
			keyActivity(
				c.env.DB,
				page.map((k) => k.id),
				Date.now(),
			),
		]);
		const data = page.map((k, i) => ({ ...keyView(k), ...withUse(money[i] ?? NO_BALANCE, activity.get(k.id)) }));
		return c.json({ object: "list", data, next_cursor: nextCursor });
	})
	.get("/keys/:id", targetKey, async (c) => {
		const key = c.get("target");
		const [money, activity] = await Promise.all([ledgerBalance(c.env, key.id), keyActivity(c.env.DB, [key.id], Date.now())]);
		return c.json({ ...keyView(key), ...withUse(money, activity.get(key.id)) });
	})
	.patch("/keys/:id", targetKey, jsonBody(PatchKey), async (c) => {
		const current = c.get("target");
		const input = c.req.valid("json");
		const cols = scopeColumns(input);
		// The body's own keys, in the order sent: the first field that would change a token is named.
		if (current.parentKeyId) assertTokenPatch(current, Object.keys(await c.req.json()), cols);
		checkScopes(c.env, input);
		const key = (await keyStore(c.env.DB).update(current.id, cols)) ?? (await mustFind(c.env, current.id));
		await tellLedger(c.env, key, "changed");
		await pushAlerts(c.env, key);
		await invalidateKey(c.env, key, (p) => c.executionCtx.waitUntil(p));
		return c.json({ ...keyView(key), ...(await ledgerBalance(c.env, key.id)) });
	})
	.delete("/keys/:id", targetKey, async (c) => {
		const key = c.get("target");
		const revoked = key.revokedAt === null ? await keyStore(c.env.DB).revoke(key.id, Date.now()) : key;
		await tellLedger(c.env, key, "revoked");
		await invalidateKey(c.env, key, (p) => c.executionCtx.waitUntil(p));
		return c.json({ ...keyView(revoked ?? key), deleted: true });
	})
	.post("/keys/:id/credits", targetKey, creditable, jsonBody(Credit), async (c) => {
		const key = c.get("target");
		const input = c.req.valid("json");
		// An empty header is no key: it would make every later credit sent with it a replay of the first.
		const idem = idempotencyKey(c.req.header("idempotency-key")) ?? randomId("credit_");
		const result = await applyCredit(c.env, key.id, input.amount_usd, `api:${idem}`, input.note);
		return c.json({ id: key.id, balance_usd: nanosToUsd(result.balanceNanos), applied: result.applied });
	})
	.get("/keys/:id/credits", targetKey, async (c) => {
		const limit = intParam(c.req.query("limit"), "limit", 100, 1000);
		const rows = await ledgerFor(c.env, c.get("target").id).creditHistory(limit);
		return c.json({ object: "list", data: rows.map(creditView) });
	})
	.get("/keys/:id/alert-deliveries", targetKey, async (c) =>
		c.json(await keyAlertDeliveries(c.env, c.get("target").id, c.req.query("limit"))),
	)
	.route("/alert-deliveries", adminAlertDeliveries)
	.get("/usage/summary", usageSummary)
	.get("/usage", listUsage)
	.route("/nodes", adminNodes)
	.route("/refusals", adminRefusals)
	.route("/maintenance", adminMaintenance)
	.route("/batches", adminBatches);
