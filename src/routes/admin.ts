import { and, desc, eq, gte, lt, or } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import { Hono } from "hono";
import { z } from "zod";
import type { AppEnv } from "../app-env";
import { keyCache } from "../auth/key-cache";
import { generateSecret, hashSecret, randomId } from "../auth/key-secret";
import { requireAdmin } from "../auth/require-admin";
import { AllowedModels, AllowedOrigins, assertCatalogModels, KeyName, TokenCap } from "../auth/scope-fields";
import { zodToGatewayError } from "../chat/validate";
import { loadConfig } from "../config";
import { decodePageCursor, encodePageCursor, keyStore, type PageCursor } from "../db/keys";
import { type ApiKeyRow, apiKeys, usageRecords } from "../db/schema";
import { GatewayError } from "../errors";
import { readJsonBody } from "../http/read-json";
import { ledgerFor } from "../ledger/ledger-client";
import { BalanceUsd, CreditUsd, SpendLimitUsd } from "../ledger/money";
import { nanosToUsd, usdToNanos } from "../ledger/pricing";

/** ISO 8601 string or unix seconds → unix seconds. */
const Timestamp = z.union([
	z.number().int().positive(),
	z.iso.datetime({ offset: true }).transform((s) => Math.floor(Date.parse(s) / 1000)),
]);

const ScopeFields = {
	name: KeyName,
	allowed_origins: AllowedOrigins.nullable().optional(),
	allowed_models: AllowedModels.nullable().optional(),
	rpm: TokenCap.nullable().optional(),
	tpm: TokenCap.nullable().optional(),
	spend_limit_usd: SpendLimitUsd.nullable().optional(),
	spend_limit_period: z.enum(["daily", "weekly", "monthly"]).nullable().optional(),
	max_tokens: TokenCap.nullable().optional(),
	expires_at: Timestamp.nullable().optional(),
	metadata: z.record(z.string(), z.string()).nullable().optional(),
};

const CreateKey = z.strictObject({ ...ScopeFields, balance_usd: BalanceUsd.default(0) });
const PatchKey = z.strictObject({ ...ScopeFields, name: ScopeFields.name.optional() });
const Credit = z.strictObject({
	amount_usd: CreditUsd,
	note: z.string().max(500).optional(),
});

type PatchInput = z.infer<typeof PatchKey>;

function parseValue<T extends z.ZodType>(schema: T, value: unknown): z.infer<T> {
	const result = schema.safeParse(value, { reportInput: true });
	if (!result.success) throw zodToGatewayError(result.error);
	return result.data;
}

async function parseBody<T extends z.ZodType>(req: Request, schema: T): Promise<z.infer<T>> {
	return parseValue(schema, await readJsonBody(req, 64 * 1024));
}

/** Scope fields that need the catalog: every allowed model must exist. */
function checkScopes(env: Env, input: { allowed_models?: string[] | null }): void {
	if (input.allowed_models) assertCatalogModels(loadConfig(env.GATEWAY_CONFIG), input.allowed_models, "allowed_models");
}

/**
 * Drops the cached lookups of a key and of the tokens it minted (their cached records embed it).
 * A lookup that read D1 just before the change can write the old record back: a second delete a
 * moment later closes that window.
 */
async function invalidateKey(env: Env, key: ApiKeyRow, waitUntil: (p: Promise<unknown>) => void): Promise<void> {
	const children = await drizzle(env.DB)
		.select({ hash: apiKeys.hash })
		.from(apiKeys)
		.where(eq(apiKeys.parentKeyId, key.id))
		.all();
	const hashes = [key.hash, ...children.map((r) => r.hash)];
	const cache = keyCache(env);
	try {
		await cache.invalidate(hashes);
	} catch (err) {
		console.error("key cache invalidation failed", err);
		throw new GatewayError(
			"upstream_unavailable",
			"The key was changed but its cached copy could not be cleared: retry the request.",
			{
				status: 503,
			},
		);
	}
	waitUntil(
		new Promise((r) => setTimeout(r, 1000))
			.then(() => cache.invalidate(hashes))
			.catch((err) => console.error("key cache invalidation (second pass) failed", err)),
	);
}

function scopeColumns(input: PatchInput) {
	const cols: Partial<ApiKeyRow> = {};
	if (input.name !== undefined) cols.name = input.name;
	if (input.allowed_origins !== undefined) cols.allowedOrigins = input.allowed_origins;
	if (input.allowed_models !== undefined) cols.allowedModels = input.allowed_models;
	if (input.rpm !== undefined) cols.rpm = input.rpm;
	if (input.tpm !== undefined) cols.tpm = input.tpm;
	if (input.spend_limit_usd !== undefined)
		cols.spendLimitNanos = input.spend_limit_usd === null ? null : usdToNanos(input.spend_limit_usd);
	if (input.spend_limit_period !== undefined) cols.spendLimitPeriod = input.spend_limit_period;
	if (input.max_tokens !== undefined) cols.maxTokens = input.max_tokens;
	if (input.expires_at !== undefined) cols.expiresAt = input.expires_at;
	if (input.metadata !== undefined) cols.metadata = input.metadata;
	return cols;
}

/** The column each PATCH field writes (spend_limit_usd as nano-dollars). */
const COLUMN_OF: { [P in keyof PatchInput]-?: keyof ApiKeyRow } = {
	name: "name",
	allowed_origins: "allowedOrigins",
	allowed_models: "allowedModels",
	rpm: "rpm",
	tpm: "tpm",
	spend_limit_usd: "spendLimitNanos",
	spend_limit_period: "spendLimitPeriod",
	max_tokens: "maxTokens",
	expires_at: "expiresAt",
	metadata: "metadata",
};

/**
 * A token's scopes are checked against its parent's, and its lifetime capped at an hour, only
 * when it is minted: a PATCH could lift its spend limit, drop its origins (making it a
 * server-side key) or push its expiry out. So PATCH may rename a token and nothing else; a
 * field that restates the current value is not a change. `fields` are the body's keys, in order.
 */
function assertTokenPatch(token: ApiKeyRow, fields: readonly string[], cols: Partial<ApiKeyRow>): void {
	for (const param of fields) {
		if (param === "name" || !Object.hasOwn(COLUMN_OF, param)) continue;
		const col = COLUMN_OF[param as keyof PatchInput];
		if (JSON.stringify(cols[col]) === JSON.stringify(token[col])) continue;
		throw new GatewayError(
			"invalid_request",
			`Invalid value for '${param}': '${token.id}' is a temporary token and its scopes are fixed when it is minted. Only its 'name' can be changed: mint a new token (POST /v1/tokens) for other scopes, or revoke this one.`,
			{ param },
		);
	}
}

/** The public view of a key (never the secret or its hash). */
export function keyView(k: ApiKeyRow) {
	return {
		id: k.id,
		object: "api_key" as const,
		name: k.name,
		prefix: k.prefix,
		created_at: Math.floor(k.createdAt / 1000),
		revoked: k.revokedAt !== null,
		revoked_at: k.revokedAt === null ? null : Math.floor(k.revokedAt / 1000),
		expires_at: k.expiresAt,
		allowed_origins: k.allowedOrigins ?? null,
		allowed_models: k.allowedModels ?? null,
		rpm: k.rpm,
		tpm: k.tpm,
		spend_limit_usd: k.spendLimitNanos === null ? null : nanosToUsd(k.spendLimitNanos),
		spend_limit_period: k.spendLimitPeriod,
		max_tokens: k.maxTokens,
		metadata: k.metadata ?? null,
		parent_key_id: k.parentKeyId ?? null,
	};
}

export async function balanceView(env: Env, keyId: string) {
	const info = await ledgerFor(env, keyId).info();
	return {
		balance_usd: nanosToUsd(info.balanceNanos),
		spent_usd: nanosToUsd(info.spentNanos),
		held_usd: nanosToUsd(info.heldNanos),
		open_holds: info.openHolds,
	};
}

async function mustFind(env: Env, id: string): Promise<ApiKeyRow> {
	const key = await keyStore(env.DB).byId(id);
	if (!key) throw new GatewayError("not_found", `No API key with id '${id}'.`, { param: "id" });
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

/** A listing's `cursor` query parameter: absent, or exactly a `next_cursor` this API made. */
function cursorParam(raw: string | undefined): PageCursor | undefined {
	if (raw === undefined || raw === "") return undefined;
	const cursor = decodePageCursor(raw);
	if (!cursor) {
		throw new GatewayError("invalid_request", "Invalid 'cursor': pass the next_cursor of the previous page unchanged.", {
			param: "cursor",
		});
	}
	return cursor;
}

function intParam(v: string | undefined, name: string, fallback: number, max: number): number {
	if (v === undefined) return fallback;
	const n = Number(v);
	if (!Number.isInteger(n) || n < 1)
		throw new GatewayError("invalid_request", `'${name}' must be a positive integer.`, { param: name });
	return Math.min(n, max);
}

export const adminRoutes = new Hono<AppEnv>()
	.use("*", requireAdmin)
	.post("/keys", async (c) => {
		const input = await parseBody(c.req.raw, CreateKey);
		checkScopes(c.env, input);
		const secret = generateSecret();
		const now = Date.now();
		const id = randomId("key_");
		await keyStore(c.env.DB).insert({
			id,
			hash: await hashSecret(secret),
			prefix: secret.slice(0, 10),
			createdAt: now,
			...scopeColumns(input),
			name: input.name,
		});
		if (input.balance_usd > 0) await applyCredit(c.env, id, input.balance_usd, "initial", "initial balance");
		const key = await mustFind(c.env, id);
		return c.json({ ...keyView(key), key: secret, ...(await balanceView(c.env, id)) }, 201);
	})
	.get("/keys", async (c) => {
		const limit = intParam(c.req.query("limit"), "limit", 100, 1000);
		const cursor = cursorParam(c.req.query("cursor"));
		const rows = await keyStore(c.env.DB).list(limit + 1, cursor);
		const page = rows.slice(0, limit);
		const last = page[page.length - 1];
		return c.json({
			object: "list",
			data: page.map(keyView),
			next_cursor: rows.length > limit && last ? encodePageCursor(last.createdAt, last.id) : null,
		});
	})
	.get("/keys/:id", async (c) => {
		const key = await mustFind(c.env, c.req.param("id"));
		return c.json({ ...keyView(key), ...(await balanceView(c.env, key.id)) });
	})
	.patch("/keys/:id", async (c) => {
		const id = c.req.param("id");
		const current = await mustFind(c.env, id);
		const body = await readJsonBody(c.req.raw, 64 * 1024);
		const input = parseValue(PatchKey, body);
		const cols = scopeColumns(input);
		if (current.parentKeyId) assertTokenPatch(current, Object.keys(body as object), cols);
		checkScopes(c.env, input);
		const key = (await keyStore(c.env.DB).update(id, cols)) ?? (await mustFind(c.env, id));
		await invalidateKey(c.env, key, (p) => c.executionCtx.waitUntil(p));
		return c.json({ ...keyView(key), ...(await balanceView(c.env, id)) });
	})
	.delete("/keys/:id", async (c) => {
		const key = await mustFind(c.env, c.req.param("id"));
		const revoked = key.revokedAt === null ? await keyStore(c.env.DB).revoke(key.id, Date.now()) : key;
		await invalidateKey(c.env, key, (p) => c.executionCtx.waitUntil(p));
		return c.json({ ...keyView(revoked ?? key), deleted: true });
	})
	.post("/keys/:id/credits", async (c) => {
		const key = await mustFind(c.env, c.req.param("id"));
		if (key.parentKeyId) {
			// Nothing draws on a token's own ledger: credit there would be money nobody can spend.
			throw new GatewayError(
				"invalid_request",
				`'${key.id}' is a temporary token: tokens draw on their parent key's balance. Add credits to its parent key '${key.parentKeyId}' instead.`,
				{ param: "id" },
			);
		}
		const input = await parseBody(c.req.raw, Credit);
		const idem = c.req.header("idempotency-key") ?? randomId("credit_");
		const result = await applyCredit(c.env, key.id, input.amount_usd, `api:${idem}`, input.note);
		return c.json({ id: key.id, balance_usd: nanosToUsd(result.balanceNanos), applied: result.applied });
	})
	.get("/usage", async (c) => {
		const limit = intParam(c.req.query("limit"), "limit", 100, 1000);
		const keyId = c.req.query("key_id");
		const sinceRaw = c.req.query("since");
		let since: number | undefined;
		if (sinceRaw !== undefined) {
			since = /^\d+$/.test(sinceRaw) ? Number(sinceRaw) * 1000 : Date.parse(sinceRaw);
			if (!Number.isSafeInteger(since))
				throw new GatewayError("invalid_request", "'since' must be unix seconds or an ISO 8601 date.", { param: "since" });
		}
		// Cursor: "<created_at>:<request_id>" of the last row, newest first.
		const cursor = cursorParam(c.req.query("cursor"));
		const cursorCond = cursor
			? or(
					lt(usageRecords.createdAt, cursor.createdAt),
					and(eq(usageRecords.createdAt, cursor.createdAt), lt(usageRecords.requestId, cursor.id)),
				)
			: undefined;
		const rows = await drizzle(c.env.DB)
			.select()
			.from(usageRecords)
			.where(
				and(
					keyId ? eq(usageRecords.keyId, keyId) : undefined,
					since !== undefined ? gte(usageRecords.createdAt, since) : undefined,
					cursorCond,
				),
			)
			.orderBy(desc(usageRecords.createdAt), desc(usageRecords.requestId))
			.limit(limit + 1)
			.all();
		const page = rows.slice(0, limit);
		const last = page[page.length - 1];
		return c.json({
			object: "list",
			data: page.map((r) => ({
				request_id: r.requestId,
				key_id: r.keyId,
				model: r.model,
				node: r.node,
				prompt_tokens: r.promptTokens,
				completion_tokens: r.completionTokens,
				total_tokens: r.promptTokens + r.completionTokens,
				cost_usd: nanosToUsd(r.costNanos),
				cost_nanos: r.costNanos,
				status: r.status,
				estimated: r.estimated,
				search_count: r.searchCount,
				created_at: Math.floor(r.createdAt / 1000),
			})),
			next_cursor: rows.length > limit && last ? encodePageCursor(last.createdAt, last.requestId) : null,
		});
	});
