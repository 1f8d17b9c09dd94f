import type { MiddlewareHandler } from "hono";
import type { AppEnv, Principal } from "../app-env";
import { keyStore } from "../db/keys";
import { GatewayError } from "../errors";
import { throttledError as throttled } from "./fail-throttle";
import { type KeyCache, type KeyRecord, keyCache } from "./key-cache";
import { hashSecret, isWellFormedSecret } from "./key-secret";
import { assertOriginAllowed, assertUsable } from "./scopes";

function unauthorized(message: string): GatewayError {
	return new GatewayError("invalid_api_key", message);
}

export function bearerToken(header: string | undefined | null): string | null {
	if (!header) return null;
	const m = /^Bearer\s+(.+)$/i.exec(header.trim());
	return m ? (m[1] as string).trim() : null;
}

export interface AuthContext {
	/** The client IP (cf-connecting-ip), for the failed-authentication throttle; null when unknown. */
	ip: string | null;
	/** Keeps the cache fill alive after the response (ctx.waitUntil). */
	waitUntil: (p: Promise<unknown>) => void;
}

/** Counts the failure for the client IP, then refuses: 401, or 429 once the IP is over its allowance. */
async function refuse(cache: KeyCache, ctx: AuthContext, err: GatewayError): Promise<never> {
	const ms = await cache.fail(ctx.ip);
	throw ms > 0 ? throttled(ms) : err;
}

async function loadRecord(d1: D1Database, hash: string): Promise<KeyRecord | undefined> {
	const store = keyStore(d1);
	const key = await store.byHash(hash);
	if (!key) return undefined;
	const parent = key.parentKeyId ? ((await store.byId(key.parentKeyId)) ?? null) : null;
	// A token whose parent is gone is unusable: record it as revoked rather than as an unscoped key.
	if (key.parentKeyId && !parent) return { key: { ...key, revokedAt: key.revokedAt ?? 0 }, parent: null };
	return { key, parent };
}

/**
 * Resolves a `vk-…` secret to its principal, refusing unknown, revoked and expired keys (and
 * tokens whose parent is). The warm path is one cache read, no D1.
 */
export async function authenticate(env: Env, secret: string | null, now: number, ctx: AuthContext): Promise<Principal> {
	if (!secret) {
		throw unauthorized(
			"You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
		);
	}
	const cache = keyCache(env);
	if (!isWellFormedSecret(secret)) return refuse(cache, ctx, unauthorized("Incorrect API key provided."));
	const hash = await hashSecret(secret);
	const read = await cache.read(hash, ctx.ip);
	if (read.throttledMs > 0) throw throttled(read.throttledMs);
	let record = read.record;
	if (!record) {
		record = await loadRecord(env.DB, hash);
		if (!record) return refuse(cache, ctx, unauthorized("Incorrect API key provided."));
		ctx.waitUntil(cache.write(hash, record));
	}
	const principal: Principal = record.parent ? { key: record.key, parent: record.parent } : { key: record.key };
	try {
		assertUsable(principal, now);
	} catch (err) {
		return refuse(cache, ctx, err as GatewayError);
	}
	return principal;
}

/**
 * The key a request carries: `Authorization: Bearer`, else Anthropic's `x-api-key` (its SDKs and
 * Claude Code send that), else Google's `x-goog-api-key` or, on the Gemini API's paths only, its
 * `?key=` query (Google's SDKs and Gemini CLI). The query is never logged: the request log keeps
 * no URL (observability/request-log.ts).
 */
export function requestKey(
	authorization: string | undefined,
	xApiKey: string | undefined,
	googKey?: string | undefined,
	queryKey?: string | undefined,
): string | null {
	return bearerToken(authorization) ?? (xApiKey?.trim() || googKey?.trim() || queryKey?.trim() || null);
}

/** Authenticates the bearer (or x-api-key) key and, for a browser key, its Origin. */
export const requireKey: MiddlewareHandler<AppEnv> = async (c, next) => {
	const secret = requestKey(
		c.req.header("authorization"),
		c.req.header("x-api-key"),
		c.req.header("x-goog-api-key"),
		c.req.path.startsWith("/v1beta/") ? c.req.query("key") : undefined,
	);
	const principal = await authenticate(c.env, secret, Date.now(), {
		ip: c.req.header("cf-connecting-ip") ?? null,
		waitUntil: (p) => c.executionCtx.waitUntil(p.catch((err) => console.error("key cache write failed", err))),
	});
	assertOriginAllowed(principal, c.req.header("origin"));
	c.set("principal", principal);
	await next();
};
