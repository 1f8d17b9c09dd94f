/**
 * The Redis path (project "redis"): a real redis-server behind dev/redis-bridge.mjs, reached
 * through @upstash/redis. Key lookups are cached in Redis and invalidated by the admin API;
 * failed authentications are throttled per client IP.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ADMIN_FAIL_LIMIT } from "../../../src/auth/fail-throttle";
import { AUTH_FAIL_LIMIT, forgetMemoisedKeys } from "../../../src/auth/key-cache";
import { generateSecret, hashSecret } from "../../../src/auth/key-secret";
import { admin, chat, createKey, expectAuthThrottled, gw, waitFor } from "../../support/gateway";
import { TEST_ADMIN_TOKEN } from "../../support/test-config";

const CHAT = { model: "test/ok", messages: [{ role: "user", content: "hi" }], max_tokens: 5 };

/** One command straight to Redis through the bridge (Upstash REST, no base64). */
async function redis(...command: Array<string | number>): Promise<unknown> {
	const res = await fetch(env.UPSTASH_REDIS_REST_URL, {
		method: "POST",
		headers: { authorization: `Bearer ${env.UPSTASH_REDIS_REST_TOKEN}` },
		body: JSON.stringify(command),
	});
	const json = (await res.json()) as { result?: unknown; error?: string };
	if (json.error) throw new Error(json.error);
	return json.result;
}

async function cached(secret: string): Promise<Record<string, { id: string; name: string }> | null> {
	const raw = await redis("GET", `venym:key:${await hashSecret(secret)}`);
	return typeof raw === "string" ? JSON.parse(raw) : null;
}

let ipSeq = 0;
function freshIp(): string {
	ipSeq += 1;
	return `198.51.100.${ipSeq}`;
}

function fromIp(ip: string, key: string): Promise<Response> {
	return gw("/v1/models", { headers: { authorization: `Bearer ${key}`, "cf-connecting-ip": ip } });
}

/** Well-formed (right checksum) but never issued: looked up, then refused. */
const UNKNOWN_KEY = generateSecret();
/** Malformed: refused without a lookup. */
const BAD_KEY = "vk-not-a-key";

describe.skipIf(!env.UPSTASH_REDIS_REST_URL)("Redis", () => {
	it("the bridge speaks Upstash REST to a real redis-server", async () => {
		expect(await redis("SET", "venym:test:ping", "pong", "EX", 60)).toBe("OK");
		expect(await redis("GET", "venym:test:ping")).toBe("pong");
		const info = String(await redis("INFO", "server"));
		expect(info).toMatch(/redis_version:/);
	});

	describe("key cache", () => {
		it("caches the key record in Redis after the first lookup", async () => {
			const { id, key } = await createKey({ name: "redis-cached" });
			expect(await cached(key)).toBeNull();
			expect((await chat(key, CHAT)).status).toBe(200);
			const entry = await waitFor(() => cached(key));
			expect(entry.key).toMatchObject({ id, name: "redis-cached" });
			const ttl = Number(await redis("TTL", `venym:key:${await hashSecret(key)}`));
			expect(ttl).toBeGreaterThan(0);
		});

		it("serves a warm key with no D1 read: it works even with its row gone", async () => {
			const { id, key } = await createKey();
			expect((await chat(key, CHAT)).status).toBe(200);
			await waitFor(() => cached(key));
			await env.DB.prepare("DELETE FROM api_keys WHERE id = ?").bind(id).run();
			expect((await chat(key, CHAT)).status).toBe(200);
			// Once the cached copies are gone (Redis, and this isolate's memo), D1 is asked again and the key is unknown.
			await redis("DEL", `venym:key:${await hashSecret(key)}`);
			forgetMemoisedKeys();
			expect((await chat(key, CHAT)).status).toBe(401);
		});

		it("invalidates on PATCH: the next request sees the new scopes", async () => {
			const { id, key } = await createKey();
			expect((await chat(key, CHAT)).status).toBe(200);
			await waitFor(() => cached(key));
			const res = await admin(`/keys/${id}`, { method: "PATCH", body: JSON.stringify({ allowed_models: ["test/slow"] }) });
			expect(res.status).toBe(200);
			expect(await cached(key)).toBeNull();
			expect((await chat(key, CHAT)).status).toBe(403);
		});

		it("invalidates on revoke: a warm key gets 401 at once", async () => {
			const { id, key } = await createKey();
			expect((await chat(key, CHAT)).status).toBe(200);
			await waitFor(() => cached(key));
			expect((await admin(`/keys/${id}`, { method: "DELETE" })).status).toBe(200);
			expect(await cached(key)).toBeNull();
			expect((await chat(key, CHAT)).status).toBe(401);
		});

		it("invalidates a key's tokens too when the key is revoked", async () => {
			const parent = await createKey();
			const res = await gw("/v1/tokens", {
				method: "POST",
				headers: { authorization: `Bearer ${parent.key}`, "content-type": "application/json" },
				body: JSON.stringify({ allowed_origins: ["https://app.example"] }),
			});
			const { token } = (await res.json()) as { token: string };
			const fromApp = { headers: { origin: "https://app.example" } };
			expect((await chat(token, CHAT, fromApp)).status).toBe(200);
			await waitFor(() => cached(token));
			expect((await admin(`/keys/${parent.id}`, { method: "DELETE" })).status).toBe(200);
			expect(await cached(token)).toBeNull();
			expect((await chat(token, CHAT, fromApp)).status).toBe(401);
		});
	});

	describe("failed-authentication throttle", () => {
		it(`answers 429 with Retry-After after ${AUTH_FAIL_LIMIT} bad keys from one IP, for every key from it`, async () => {
			const ip = freshIp();
			const { key } = await createKey();
			for (let i = 0; i < AUTH_FAIL_LIMIT; i++) {
				const res = await fromIp(ip, i % 2 ? BAD_KEY : UNKNOWN_KEY);
				expect(res.status, `attempt ${i + 1}`).toBe(401);
			}
			await expectAuthThrottled(await fromIp(ip, BAD_KEY));
			// The IP is throttled whatever it presents; other IPs are not.
			expect((await fromIp(ip, key)).status).toBe(429);
			expect((await fromIp(freshIp(), key)).status).toBe(200);
			expect(Number(await redis("GET", `venym:authfail:${ip}`))).toBeGreaterThan(AUTH_FAIL_LIMIT);
		});

		it("counts revoked and expired keys as failures, not good ones", async () => {
			const ip = freshIp();
			const good = await createKey();
			const revoked = await createKey();
			await admin(`/keys/${revoked.id}`, { method: "DELETE" });
			const expired = await createKey({ expires_at: Math.floor(Date.now() / 1000) - 5 });
			for (let i = 0; i < 20; i++) expect((await fromIp(ip, good.key)).status).toBe(200);
			expect((await fromIp(ip, revoked.key)).status).toBe(401);
			expect((await fromIp(ip, expired.key)).status).toBe(401);
			expect(Number(await redis("GET", `venym:authfail:${ip}`))).toBe(2);
		});

		it("does not throttle requests that carry no client IP", async () => {
			for (let i = 0; i < AUTH_FAIL_LIMIT + 2; i++) {
				expect((await gw("/v1/models", { headers: { authorization: `Bearer ${BAD_KEY}` } })).status).toBe(401);
			}
		});
	});

	describe("failed admin-token throttle", () => {
		const adminFrom = (ip: string, token: string) =>
			gw("/admin/keys?limit=1", { headers: { authorization: `Bearer ${token}`, "cf-connecting-ip": ip } });

		it(`answers 429 with Retry-After after ${ADMIN_FAIL_LIMIT} wrong admin tokens from one IP, counted in its own namespace`, async () => {
			const ip = freshIp();
			for (let i = 0; i < ADMIN_FAIL_LIMIT; i++) {
				const res = await adminFrom(ip, `wrong-${i}`);
				expect(res.status, `attempt ${i + 1}`).toBe(401);
			}
			await expectAuthThrottled(await adminFrom(ip, "wrong-again"));
			expect(Number(await redis("GET", `venym:adminfail:${ip}`))).toBe(ADMIN_FAIL_LIMIT);
			const ttl = Number(await redis("TTL", `venym:adminfail:${ip}`));
			expect(ttl).toBeGreaterThan(0);
			expect(ttl).toBeLessThanOrEqual(60);
			// Admin failures are not key-authentication failures: a client key from the IP still works.
			expect(await redis("GET", `venym:authfail:${ip}`)).toBeNull();
			const { key } = await createKey();
			expect((await fromIp(ip, key)).status).toBe(200);
			// The right admin token is refused from the throttled IP, accepted from any other.
			expect((await adminFrom(ip, TEST_ADMIN_TOKEN)).status).toBe(429);
			expect((await adminFrom(freshIp(), TEST_ADMIN_TOKEN)).status).toBe(200);
		});

		it("is shared across isolates through Redis: a counter already at the limit throttles at once", async () => {
			const ip = freshIp();
			await redis("SET", `venym:adminfail:${ip}`, ADMIN_FAIL_LIMIT, "EX", 30);
			const res = await adminFrom(ip, TEST_ADMIN_TOKEN);
			expect(res.status).toBe(429);
			expect(Number(res.headers.get("retry-after"))).toBeLessThanOrEqual(30);
		});

		it("does not let failed key authentications throttle the admin API", async () => {
			const ip = freshIp();
			for (let i = 0; i < AUTH_FAIL_LIMIT + 1; i++) await fromIp(ip, BAD_KEY);
			expect((await fromIp(ip, BAD_KEY)).status).toBe(429);
			expect(await redis("GET", `venym:adminfail:${ip}`)).toBeNull();
			expect((await adminFrom(ip, TEST_ADMIN_TOKEN)).status).toBe(200);
		});
	});
});
