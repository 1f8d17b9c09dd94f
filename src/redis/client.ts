import { Redis } from "@upstash/redis/cloudflare";

let memo: { url: string; token: string; redis: Redis } | undefined;

/**
 * The Upstash Redis client when UPSTASH_REDIS_REST_URL and UPSTASH_REDIS_REST_TOKEN are set,
 * else null. One client per isolate: it holds no connection, only the URL and token.
 */
export function redisFrom(env: Env): Redis | null {
	const url = env.UPSTASH_REDIS_REST_URL;
	const token = env.UPSTASH_REDIS_REST_TOKEN;
	if (!url || !token) return null;
	if (memo?.url !== url || memo.token !== token) {
		memo = {
			url,
			token,
			redis: new Redis({
				url,
				token,
				// Redis is a cache and a throttle here: a slow answer costs more than a miss.
				retry: { retries: 1, backoff: () => 50 },
				enableTelemetry: false,
				readYourWrites: false,
				keepAlive: false,
			}),
		};
	}
	return memo.redis;
}
