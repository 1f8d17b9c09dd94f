/**
 * Per-client-IP throttles for failed authentications: a fixed window opened by an IP's first
 * failure; once the IP has `limit` failures in it, every attempt from the IP gets 429 until the
 * window ends (whatever it presents, so a brute force cannot tell a right guess from a wrong one).
 * Counters live in Redis when it is configured (shared by every isolate), each use in its own
 * namespace (`venym:<namespace>:<ip>`), or in an isolate-local bounded Map otherwise.
 */
import type { Redis } from "@upstash/redis/cloudflare";
import { GatewayError } from "../errors";
import { retryAfterHeaders } from "../http/retry-after";
import { redisFrom } from "../redis/client";

export interface FailThrottle {
	/** How long `ip` stays throttled, in ms (0: not throttled). */
	check(ip: string | null): Promise<number>;
	/** Counts a failure from `ip`; returns how long it is now throttled, in ms (0: not throttled). */
	fail(ip: string | null): Promise<number>;
}

/** Failed admin-token attempts one IP may make per window before it gets 429s. */
export const ADMIN_FAIL_LIMIT = 10;
export const ADMIN_FAIL_WINDOW_S = 60;
/** How many IPs the isolate-local throttle remembers; the oldest is forgotten first. */
export const MEMORY_THROTTLE_MAX_IPS = 10_000;

export const failKey = (namespace: string, ip: string) => `venym:${namespace}:${ip}`;

export function throttledError(ms: number): GatewayError {
	const seconds = Math.max(1, Math.ceil(ms / 1000));
	return new GatewayError("rate_limited", `Too many failed authentication attempts. Please try again in ${seconds}s.`, {
		headers: retryAfterHeaders(ms),
	});
}

/** Counts one failure under `key` in Redis: returns the count in the window and the ms left in it. */
export async function countFailure(redis: Redis, key: string, windowS: number): Promise<{ count: number; leftMs: number }> {
	const [count, , ttl] = await redis.pipeline().incr(key).expire(key, windowS, "NX").pttl(key).exec<[number, number, number]>();
	return { count, leftMs: ttl > 0 ? ttl : windowS * 1000 };
}

/** The Redis counter of `namespace`; when Redis fails, `fallback` counts instead (never fails open). */
function redisThrottle(redis: Redis, namespace: string, limit: number, windowS: number, fallback: FailThrottle): FailThrottle {
	return {
		async check(ip) {
			if (!ip) return 0;
			try {
				const k = failKey(namespace, ip);
				const [count, ttl] = await redis.pipeline().get(k).pttl(k).exec<[number | null, number]>();
				if (Number(count ?? 0) < limit) return 0;
				return ttl > 0 ? ttl : windowS * 1000;
			} catch (err) {
				console.error(`${namespace} throttle: redis read failed, counting in this isolate`, err);
				return fallback.check(ip);
			}
		},
		async fail(ip) {
			if (!ip) return 0;
			try {
				const { count, leftMs } = await countFailure(redis, failKey(namespace, ip), windowS);
				return count > limit ? leftMs : 0;
			} catch (err) {
				console.error(`${namespace} throttle: redis write failed, counting in this isolate`, err);
				return fallback.fail(ip);
			}
		},
	};
}

interface Window {
	count: number;
	endsAt: number;
}

/**
 * The isolate-local throttle: it slows a brute force that lands on one isolate; one that is
 * spread over many isolates or data centres needs the Redis counter. Bounded: past `maxIps` the
 * oldest window is dropped.
 */
export function memoryThrottle(
	windows: Map<string, Window>,
	limit: number,
	windowS: number,
	maxIps = MEMORY_THROTTLE_MAX_IPS,
): FailThrottle {
	const open = (ip: string, t: number): Window | undefined => {
		const w = windows.get(ip);
		if (w && w.endsAt <= t) {
			windows.delete(ip);
			return undefined;
		}
		return w;
	};
	return {
		async check(ip) {
			if (!ip) return 0;
			const t = Date.now();
			const w = open(ip, t);
			return w && w.count >= limit ? w.endsAt - t : 0;
		},
		async fail(ip) {
			if (!ip) return 0;
			const t = Date.now();
			let w = open(ip, t);
			if (!w) {
				if (windows.size >= maxIps) {
					// Maps iterate in insertion order: drop the oldest window.
					const oldest = windows.keys().next().value;
					if (oldest !== undefined) windows.delete(oldest);
				}
				w = { count: 0, endsAt: t + windowS * 1000 };
				windows.set(ip, w);
			}
			w.count++;
			return w.count > limit ? w.endsAt - t : 0;
		},
	};
}

const adminWindows = new Map<string, Window>();

/** The throttle of failed admin-token attempts (namespace `adminfail`, apart from key authentications). */
export function adminThrottle(env: Env): FailThrottle {
	const local = memoryThrottle(adminWindows, ADMIN_FAIL_LIMIT, ADMIN_FAIL_WINDOW_S);
	const redis = redisFrom(env);
	return redis ? redisThrottle(redis, "adminfail", ADMIN_FAIL_LIMIT, ADMIN_FAIL_WINDOW_S, local) : local;
}
