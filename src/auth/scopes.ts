/**
 * What a key may do: pure policy over the key record (and, for a `vk-tmp-` token, its parent's),
 * with `now` passed in. A token's own scopes never widen its parent's, and both are checked,
 * so narrowing the parent later narrows its tokens too.
 */
import type { Principal } from "../app-env";
import type { ApiKeyRow } from "../db/schema";
import { GatewayError } from "../errors";
import type { ScopeLimits, SpendPeriod } from "../ledger/durable/limits";

/** Exact origins (`https://app.example.com`, `http://localhost:5173`) or a leftmost wildcard label (`https://*.example.com`). */
export const ORIGIN_PATTERN = /^https?:\/\/(\*\.)?[a-z0-9-]+(\.[a-z0-9-]+)*(:\d{1,5})?$/i;

function chain(p: Principal): ApiKeyRow[] {
	return p.parent ? [p.parent, p.key] : [p.key];
}

/** The key that called: a `vk-tmp-` token's own id. Its responses are stored under it. */
export function callerKeyId(p: Principal): string {
	return p.key.id;
}

/**
 * The key whose ledger pays: a token's parent, otherwise the caller. Read from the key rows
 * alone, so a principal stored with a queued background response resolves the same way.
 */
export function payerKeyId(p: Principal): string {
	return p.parent?.id ?? p.key.id;
}

/** True when `origin` (as a browser sends it) matches one of the patterns. */
export function originMatches(patterns: readonly string[], origin: string): boolean {
	const o = origin.toLowerCase();
	for (const raw of patterns) {
		const pattern = raw.toLowerCase();
		if (pattern === o) return true;
		const star = pattern.indexOf("://*.");
		if (star < 0) continue;
		const scheme = pattern.slice(0, star + 3);
		const suffix = pattern.slice(star + 4); // ".example.com[:port]"
		if (!o.startsWith(scheme)) continue;
		const host = o.slice(scheme.length);
		if (host.endsWith(suffix) && /^[a-z0-9.-]+$/.test(host.slice(0, -suffix.length)) && host.length > suffix.length) return true;
	}
	return false;
}

/** A key with allowed origins is a browser key: it needs an Origin header that matches. */
export function assertOriginAllowed(p: Principal, origin: string | undefined): void {
	for (const k of chain(p)) {
		const allowed = k.allowedOrigins;
		if (!allowed) continue;
		if (!origin) {
			throw new GatewayError("forbidden", "This key is restricted to browser origins and the request has no Origin header.");
		}
		if (!originMatches(allowed, origin)) {
			throw new GatewayError("forbidden", `This key may not be used from the origin '${origin}'.`);
		}
	}
}

/** Whether the key (and its parent) may use a catalog model id. */
export function modelAllowed(p: Principal, modelId: string): boolean {
	return chain(p).every((k) => !k.allowedModels || k.allowedModels.includes(modelId));
}

export function assertModelAllowed(p: Principal, modelId: string): void {
	if (!modelAllowed(p, modelId)) {
		throw new GatewayError("forbidden", `This key is not allowed to use the model '${modelId}'.`, { param: "model" });
	}
}

/** The key's own output ceiling (its `max_tokens`), or null when it has none. */
export function outputCeiling(p: Principal): number | null {
	let ceiling: number | null = null;
	for (const k of chain(p)) if (k.maxTokens !== null && (ceiling === null || k.maxTokens < ceiling)) ceiling = k.maxTokens;
	return ceiling;
}

function spendPeriod(v: string | null): SpendPeriod | null {
	return v === "daily" || v === "weekly" || v === "monthly" ? v : null;
}

/**
 * The limits the ledger checks with the hold: one entry per key in the chain (a token's and its
 * parent's, so a token's requests count inside its parent's caps), and, for a request that names
 * its end user, one more per key with per-user caps: that user's share of the key.
 */
export function ledgerScopes(p: Principal, endUser?: string): ScopeLimits[] {
	const scopes: ScopeLimits[] = chain(p).map((k) => ({
		scope: k.id,
		rpm: k.rpm,
		tpm: k.tpm,
		spendLimitNanos: k.spendLimitNanos,
		spendPeriod: spendPeriod(k.spendLimitPeriod),
		...(k.maxConcurrent ? { maxConcurrent: k.maxConcurrent } : {}),
	}));
	if (endUser === undefined) return scopes;
	for (const k of chain(p)) {
		if (!k.perUserRpm && !k.perUserDailyNanos) continue;
		scopes.push({
			scope: `${k.id}/user:${endUser}`,
			rpm: k.perUserRpm ?? null,
			spendLimitNanos: k.perUserDailyNanos ?? null,
			spendPeriod: "daily",
			user: { keyId: k.id, endUser },
		});
	}
	return scopes;
}

/** The longest end-user id kept (UTF-16 units): longer ones are cut, never inside a surrogate pair. */
export const MAX_END_USER = 256;

/**
 * The end user a request names: OpenAI's `safety_identifier`, else its `user` (Messages'
 * `metadata.user_id` arrives as `user`, messages/to-chat.ts); bounded, undefined when none. A
 * non-string one (an object, a number) is refused: it would pass every per-user cap uncounted.
 */
export function endUserOf(body: object): string | undefined {
	const { user, safety_identifier } = body as { user?: unknown; safety_identifier?: unknown };
	// As OpenAI: a non-string end user is a 400, not a request no per-user cap counts.
	for (const [param, v] of [
		["safety_identifier", safety_identifier],
		["user", user],
	] as const) {
		if (v !== undefined && v !== null && typeof v !== "string") {
			throw new GatewayError("invalid_request", `Invalid type for '${param}': expected a string.`, { param });
		}
	}
	const raw = [safety_identifier, user].find((v): v is string => typeof v === "string" && v.length > 0);
	if (raw === undefined) return undefined;
	if (raw.length <= MAX_END_USER) return raw;
	const code = raw.charCodeAt(MAX_END_USER - 1);
	return raw.slice(0, code >= 0xd800 && code <= 0xdbff ? MAX_END_USER - 1 : MAX_END_USER);
}

/** Refuses revoked and expired keys (a token also when its parent is revoked or expired). */
export function assertUsable(p: Principal, now: number): void {
	for (const k of chain(p)) {
		if (k.revokedAt !== null) throw new GatewayError("invalid_api_key", "This API key has been revoked.");
		if (k.expiresAt !== null && k.expiresAt * 1000 <= now) throw new GatewayError("invalid_api_key", "This API key has expired.");
	}
}
