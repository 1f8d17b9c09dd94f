/**
 * Key lookups without D1 on the warm path: hash → key record (with the parent of a `vk-tmp-`
 * token), in Redis when it is configured (global; also counts failed authentications per client
 * IP), otherwise in the Workers Cache API (per data centre, a short TTL bounds staleness).
 * Admin updates and revocations invalidate the entries.
 */
import type { Redis } from "@upstash/redis/cloudflare";
import type { ApiKeyRow } from "../db/schema";
import { redisFrom } from "../redis/client";
import { countFailure, failKey as throttleKey } from "./fail-throttle";

export interface KeyRecord {
	key: ApiKeyRow;
	parent: ApiKeyRow | null;
}

export interface CacheRead {
	/** undefined on a miss. */
	record: KeyRecord | undefined;
	/** How long the client IP stays throttled for failed authentications (0: not throttled). */
	throttledMs: number;
}

export interface KeyCache {
	read(hash: string, ip: string | null): Promise<CacheRead>;
	write(hash: string, record: KeyRecord): Promise<void>;
	/** Counts a failed authentication from `ip`; returns how long it is now throttled (0: not throttled). */
	fail(ip: string | null): Promise<number>;
	invalidate(hashes: readonly string[]): Promise<void>;
}

/** Failed authentications one IP may make per window before it gets 429s (Redis only). */
export const AUTH_FAIL_LIMIT = 10;
export const AUTH_FAIL_WINDOW_S = 60;
const REDIS_TTL_S = 300;
const EDGE_TTL_S = 60;
const EDGE_ORIGIN = "https://key-cache.venym.internal/";

const recordKey = (hash: string) => `venym:key:${hash}`;
/** Key authentications count failures apart from admin-token attempts (`adminfail`). */
const failKey = (ip: string) => throttleKey("authfail", ip);

/**
 * How long an isolate trusts a lookup it already made without asking Redis or the Cache API.
 * It bounds how late a revocation or scope change reaches other isolates; the isolate that
 * handles the admin call forgets the key at once.
 */
export const MEMO_TTL_MS = 10_000;
const MEMO_MAX = 10_000;
const memo = new Map<string, { record: KeyRecord; until: number }>();

function remember(hash: string, record: KeyRecord, now: number): void {
	if (memo.size >= MEMO_MAX) {
		// Maps iterate in insertion order: drop the oldest entry.
		const oldest = memo.keys().next().value;
		if (oldest !== undefined) memo.delete(oldest);
	}
	memo.set(hash, { record, until: now + MEMO_TTL_MS });
}

/** A warm key in this isolate costs one Map lookup: no Redis, Cache API or D1 round trip. */
function memoised(inner: KeyCache): KeyCache {
	return {
		async read(hash, ip) {
			const hit = memo.get(hash);
			if (hit && hit.until > Date.now()) return { record: hit.record, throttledMs: 0 };
			const read = await inner.read(hash, ip);
			if (read.record) remember(hash, read.record, Date.now());
			return read;
		},
		async write(hash, record) {
			remember(hash, record, Date.now());
			await inner.write(hash, record);
		},
		fail: (ip) => inner.fail(ip),
		async invalidate(hashes) {
			for (const h of hashes) memo.delete(h);
			await inner.invalidate(hashes);
		},
	};
}

/** Only for tests that change D1 behind the cache's back (through test/support/reset-isolate.ts). */
export function forgetMemoisedKeys(): void {
	memo.clear();
}

export function keyCache(env: Env): KeyCache {
	const redis = redisFrom(env);
	return memoised(redis ? redisCache(redis) : edgeCache());
}

function redisCache(redis: Redis): KeyCache {
	return {
		async read(hash, ip) {
			try {
				if (!ip) return { record: (await redis.get<KeyRecord>(recordKey(hash))) ?? undefined, throttledMs: 0 };
				// One round trip for both: the IP's failure count and the key.
				const [fails, record] = await redis.mget<[number | null, KeyRecord | null]>(failKey(ip), recordKey(hash));
				const throttledMs = Number(fails ?? 0) >= AUTH_FAIL_LIMIT ? await throttleLeft(redis, ip) : 0;
				return { record: record ?? undefined, throttledMs };
			} catch (err) {
				console.error("key cache: redis read failed, using D1", err);
				return { record: undefined, throttledMs: 0 };
			}
		},
		async write(hash, record) {
			try {
				await redis.set(recordKey(hash), JSON.stringify(record), { ex: REDIS_TTL_S });
			} catch (err) {
				console.error("key cache: redis write failed", err);
			}
		},
		async fail(ip) {
			if (!ip) return 0;
			try {
				const { count, leftMs } = await countFailure(redis, failKey(ip), AUTH_FAIL_WINDOW_S);
				return count > AUTH_FAIL_LIMIT ? leftMs : 0;
			} catch (err) {
				console.error("auth throttle: redis failed", err);
				return 0;
			}
		},
		async invalidate(hashes) {
			if (hashes.length) await redis.del(...hashes.map(recordKey));
		},
	};
}

async function throttleLeft(redis: Redis, ip: string): Promise<number> {
	const ttl = await redis.pttl(failKey(ip));
	return ttl > 0 ? ttl : AUTH_FAIL_WINDOW_S * 1000;
}

function edgeCache(): KeyCache {
	const url = (hash: string) => `${EDGE_ORIGIN}${hash}`;
	return {
		async read(hash) {
			try {
				const hit = await caches.default.match(url(hash));
				return { record: hit ? ((await hit.json()) as KeyRecord) : undefined, throttledMs: 0 };
			} catch (err) {
				console.error("key cache: Cache API read failed, using D1", err);
				return { record: undefined, throttledMs: 0 };
			}
		},
		async write(hash, record) {
			await caches.default.put(
				url(hash),
				new Response(JSON.stringify(record), {
					headers: { "content-type": "application/json", "cache-control": `max-age=${EDGE_TTL_S}` },
				}),
			);
		},
		async fail() {
			return 0;
		},
		async invalidate(hashes) {
			await Promise.all(hashes.map((h) => caches.default.delete(url(h))));
		},
	};
}
