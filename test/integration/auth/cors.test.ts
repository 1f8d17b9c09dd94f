/**
 * CORS on /v1: preflights answered before authentication with what the OpenAI SDK's browser
 * mode sends, CORS headers on every answer (errors included, so a page can read them), and
 * none at all on /admin.
 */
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { admin, chat, createKey, gw } from "../../support/gateway";

const ORIGIN = "https://app.example";
const CHAT = { model: "test/ok", messages: [{ role: "user", content: "hi" }] };

/** The header names the official SDK sends on a chat completion (captured from its own fetch). */
async function sdkHeaderNames(): Promise<string[]> {
	let names: string[] = [];
	const client = new OpenAI({
		apiKey: "vk-test",
		baseURL: "http://gateway.test/v1",
		organization: "org-1",
		project: "proj-1",
		maxRetries: 0,
		fetch: async (_url, init) => {
			names = [...new Headers(init?.headers).keys()];
			return new Response(JSON.stringify({ id: "x", object: "chat.completion", choices: [] }), {
				headers: { "content-type": "application/json" },
			});
		},
	});
	await client.chat.completions.create({ model: "test/ok", messages: [{ role: "user", content: "hi" }] });
	return names;
}

function preflight(path: string, requestHeaders: string, origin = ORIGIN): Promise<Response> {
	return gw(path, {
		method: "OPTIONS",
		headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": requestHeaders },
	});
}

function expectCors(res: Response, origin = ORIGIN): void {
	expect(res.headers.get("access-control-allow-origin")).toBe(origin);
	expect(res.headers.get("vary")?.toLowerCase()).toContain("origin");
	const exposed = (res.headers.get("access-control-expose-headers") ?? "").toLowerCase();
	const names = ["x-request-id", "retry-after", "retry-after-ms", "x-should-retry", "x-ratelimit-remaining-requests"];
	for (const h of [...names, "x-venym-cost-usd", "x-venym-balance-usd", "x-venym-overhead-ms"]) {
		expect(exposed).toContain(h);
	}
}

describe("CORS preflight", () => {
	it("allows every header the OpenAI SDK sends, without a key", async () => {
		const names = await sdkHeaderNames();
		expect(names).toEqual(expect.arrayContaining(["authorization", "content-type", "x-stainless-lang", "openai-organization"]));
		// A browser sets accept and user-agent itself: they never appear in a preflight.
		const custom = names.filter((n) => n !== "accept" && n !== "user-agent");
		const requested = [...new Set([...custom, "idempotency-key", "openai-project"])].join(",");
		const res = await preflight("/v1/chat/completions", requested);
		expect(res.status).toBe(204);
		expect(res.headers.get("access-control-allow-origin")).toBe(ORIGIN);
		expect(res.headers.get("access-control-allow-methods")).toContain("POST");
		const allowed = (res.headers.get("access-control-allow-headers") ?? "").split(/\s*,\s*/);
		for (const n of requested.split(",")) expect(allowed).toContain(n);
		expect(res.headers.get("vary")?.toLowerCase()).toContain("origin");
		expect(Number(res.headers.get("access-control-max-age"))).toBeGreaterThan(0);
	});

	it("answers for every /v1 route, unknown ones included", async () => {
		for (const path of ["/v1/models", "/v1/responses", "/v1/tokens", "/v1/key", "/v1/nope"]) {
			const res = await preflight(path, "authorization");
			expect(res.status, path).toBe(204);
			expect(res.headers.get("access-control-allow-origin"), path).toBe(ORIGIN);
		}
	});

	it("does not allow headers outside the list", async () => {
		const res = await preflight("/v1/chat/completions", "authorization, x-evil, cookie, x-stainless-os");
		const allowed = (res.headers.get("access-control-allow-headers") ?? "").split(/\s*,\s*/);
		expect(allowed).toEqual(["authorization", "x-stainless-os"]);
	});

	it("gives /admin no CORS at all", async () => {
		const pre = await preflight("/admin/keys", "authorization");
		expect(pre.headers.get("access-control-allow-origin")).toBeNull();
		expect(pre.status).toBe(401);
		const res = await admin("/keys", { headers: { origin: ORIGIN } });
		expect(res.status).toBe(200);
		expect(res.headers.get("access-control-allow-origin")).toBeNull();
		expect(res.headers.get("access-control-expose-headers")).toBeNull();
	});
});

describe("CORS on answers", () => {
	it("puts CORS headers on a completion", async () => {
		const { key } = await createKey();
		const res = await chat(key, CHAT, { headers: { origin: ORIGIN } });
		expect(res.status).toBe(200);
		expectCors(res);
	});

	it("puts CORS headers on a stream", async () => {
		const { key } = await createKey();
		const res = await chat(key, { ...CHAT, stream: true }, { headers: { origin: ORIGIN } });
		expect(res.status).toBe(200);
		expectCors(res);
		await res.text();
	});

	it("puts CORS headers on 401, 402, 403, 404 and 429 so a page can read the error", async () => {
		const headers = { origin: ORIGIN };
		const noKey = await gw("/v1/chat/completions", { method: "POST", headers, body: JSON.stringify(CHAT) });
		expect(noKey.status).toBe(401);
		expectCors(noKey);
		expect(((await noKey.json()) as { error: { code: string } }).error.code).toBe("invalid_api_key");

		const broke = await createKey({ balance_usd: 0 });
		const poor = await chat(broke.key, CHAT, { headers });
		expect(poor.status).toBe(402);
		expectCors(poor);

		const browser = await createKey({ allowed_origins: ["https://other.example"] });
		const refused = await chat(browser.key, CHAT, { headers });
		expect(refused.status).toBe(403);
		expectCors(refused);
		expect(((await refused.json()) as { error: { message: string } }).error.message).toContain(ORIGIN);

		const { key } = await createKey({ rpm: 1 });
		const missing = await chat(key, { ...CHAT, model: "test/nope" }, { headers });
		expect(missing.status).toBe(404);
		expectCors(missing);
		expect((await chat(key, CHAT, { headers })).status).toBe(200);
		const limited = await chat(key, CHAT, { headers });
		expect(limited.status).toBe(429);
		expectCors(limited);
		expect(limited.headers.get("retry-after")).toMatch(/^\d+$/);
	});

	it("answers a request without Origin without CORS headers, but still varies on Origin", async () => {
		const { key } = await createKey();
		const res = await gw("/v1/models", { headers: { authorization: `Bearer ${key}` } });
		expect(res.status).toBe(200);
		expect(res.headers.get("access-control-allow-origin")).toBeNull();
		expect(res.headers.get("vary")?.toLowerCase()).toContain("origin");
	});
});
