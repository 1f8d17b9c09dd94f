/**
 * Scoped keys: origins (a key with allowed_origins is a browser key), models, the output
 * ceiling, expiry and spend caps with their reset; each refusal with its status. Also the
 * admin validation of the scope fields and the key cache seeing admin changes at once.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { periodEnd, periodStart } from "../../../src/ledger/durable/spend-periods";
import { at } from "../../support/clock";
import { admin, chat, createKey, engineRequests, gw, waitFor } from "../../support/gateway";
import { ledger } from "../../support/ledger";

type ErrorBody = { error: { message: string; type: string; param: string | null; code: string | null } };

function marker(): string {
	return `m${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
}

function body(text = "hi", extra: Record<string, unknown> = {}) {
	return { model: "test/ok", messages: [{ role: "user", content: text }], ...extra };
}

async function expectError(res: Response, status: number, code: string | null): Promise<ErrorBody> {
	const json = (await res.json()) as ErrorBody;
	expect(res.status, JSON.stringify(json)).toBe(status);
	expect(json.error.code).toBe(code);
	return json;
}

describe("browser keys: allowed_origins", () => {
	it("refuses a request without Origin with 403", async () => {
		const { key } = await createKey({ allowed_origins: ["https://app.example"] });
		const json = await expectError(await chat(key, body()), 403, "forbidden");
		expect(json.error.type).toBe("permission_error");
		expect(json.error.message).toMatch(/Origin/);
	});

	it("refuses an origin that is not listed and accepts one that is", async () => {
		const { key } = await createKey({ allowed_origins: ["https://app.example", "http://localhost:5173"] });
		await expectError(await chat(key, body(), { headers: { origin: "https://evil.example" } }), 403, "forbidden");
		await expectError(await chat(key, body(), { headers: { origin: "https://app.example:8443" } }), 403, "forbidden");
		expect((await chat(key, body(), { headers: { origin: "https://app.example" } })).status).toBe(200);
		expect((await chat(key, body(), { headers: { origin: "http://localhost:5173" } })).status).toBe(200);
	});

	it("matches https://*.example.com wildcards on subdomains only, with the same scheme", async () => {
		const { key } = await createKey({ allowed_origins: ["https://*.example.com"] });
		const status = async (origin: string) =>
			(await gw("/v1/models", { headers: { authorization: `Bearer ${key}`, origin } })).status;
		expect(await status("https://a.example.com")).toBe(200);
		expect(await status("https://a.b.example.com")).toBe(200);
		expect(await status("https://example.com")).toBe(403);
		expect(await status("http://a.example.com")).toBe(403);
		expect(await status("https://a.example.com.evil.net")).toBe(403);
		expect(await status("https://aexample.com")).toBe(403);
		expect(await status("null")).toBe(403);
	});

	it("lets a server key (no allowed_origins) be used with or without Origin", async () => {
		const { key } = await createKey();
		expect((await chat(key, body())).status).toBe(200);
		expect((await chat(key, body(), { headers: { origin: "https://anything.example" } })).status).toBe(200);
	});
});

describe("allowed_models", () => {
	it("refuses a model outside the list with 403 and param model, and serves the listed one", async () => {
		const { key } = await createKey({ allowed_models: ["test/ok"] });
		const json = await expectError(await chat(key, body("hi", { model: "test/slow" })), 403, "forbidden");
		expect(json.error.param).toBe("model");
		expect(json.error.message).toContain("test/slow");
		expect((await chat(key, body())).status).toBe(200);
		// An unknown model is still a 404, not a 403.
		await expectError(await chat(key, body("hi", { model: "test/unknown" })), 404, "model_not_found");
	});

	it("lists only the allowed models on /v1/models, and hides the others from /v1/models/{id}", async () => {
		const { key } = await createKey({ allowed_models: ["test/ok", "test/slow"] });
		const auth = { headers: { authorization: `Bearer ${key}` } };
		const list = (await (await gw("/v1/models", auth)).json()) as { data: Array<{ id: string }> };
		expect(list.data.map((m) => m.id).sort()).toEqual(["test/ok", "test/slow"]);
		expect((await gw("/v1/models/test/ok", auth)).status).toBe(200);
		await expectError(await gw("/v1/models/test/failover", auth), 404, "model_not_found");

		const all = (await createKey()).key;
		const full = (await (await gw("/v1/models", { headers: { authorization: `Bearer ${all}` } })).json()) as { data: unknown[] };
		expect(full.data.length).toBeGreaterThan(2);
	});
});

describe("max_tokens ceiling", () => {
	it("caps the output the engine is asked for at the key's max_tokens, and holds only that", async () => {
		const { key } = await createKey({ max_tokens: 7 });
		const a = marker();
		expect((await chat(key, body(a, { max_tokens: 500 }))).status).toBe(200);
		const b = marker();
		expect((await chat(key, body(b))).status).toBe(200);
		const c = marker();
		expect((await chat(key, body(c, { max_completion_tokens: 3 }))).status).toBe(200);
		const sent = async (m: string) =>
			waitFor(async () => (await engineRequests({ contains: m })).find((r) => JSON.stringify(r.body).includes(m))?.body ?? null);
		expect((await sent(a)).max_tokens).toBe(7);
		expect((await sent(b)).max_tokens).toBe(7);
		expect((await sent(c)).max_completion_tokens).toBe(3);
	});
});

describe("expires_at", () => {
	it("refuses an expired key with 401, including one expired by PATCH after it was used", async () => {
		const past = Math.floor(Date.now() / 1000) - 10;
		const expired = await createKey({ expires_at: past });
		const json = await expectError(await chat(expired.key, body()), 401, "invalid_api_key");
		expect(json.error.message).toMatch(/expired/);

		const { id, key } = await createKey({ expires_at: Math.floor(Date.now() / 1000) + 3600 });
		expect((await chat(key, body())).status).toBe(200);
		expect((await admin(`/keys/${id}`, { method: "PATCH", body: JSON.stringify({ expires_at: past }) })).status).toBe(200);
		await expectError(await chat(key, body()), 401, "invalid_api_key");
	});
});

describe("spend caps", () => {
	it("refuses with 403 and a clear message once the cap is spent", async () => {
		// test/ok: $1/Mtok in, $2/Mtok out. A cap of $0.000001 (1000 nano) is spent by the first request.
		const { id, key } = await createKey({ spend_limit_usd: 0.000001, spend_limit_period: "daily" });
		expect((await chat(key, body("hello there", { max_tokens: 5 }))).status).toBe(200);
		const json = await expectError(await chat(key, body()), 403, "forbidden");
		expect(json.error.message).toMatch(/spend limit of \$0\.000001 per day/);
		expect(json.error.message).toMatch(/resets at \d{4}-\d{2}-\d{2}T00:00:00/);
		expect(json.error).toMatchObject({ spend_limit_usd: 0.000001, period: "daily" });
		// Raising the cap through the admin API applies at once.
		expect((await admin(`/keys/${id}`, { method: "PATCH", body: JSON.stringify({ spend_limit_usd: 1 }) })).status).toBe(200);
		expect((await chat(key, body())).status).toBe(200);
	});

	it("resets the spend at the start of the next period (ledger, clock set)", async () => {
		const keyId = `key_spend_${crypto.randomUUID().slice(0, 8)}`;
		const stub = ledger(keyId);
		await stub.credit({ keyId, amountNanos: 1_000_000_000, idempotencyKey: "initial" });
		const scopes = [{ scope: keyId, spendLimitNanos: 10_000, spendPeriod: "daily" as const }];
		const t0 = Date.UTC(2030, 0, 15, 23, 59, 0);
		const record = {
			key_id: keyId,
			model: "test/ok",
			node: null,
			prompt_tokens: 1,
			completion_tokens: 1,
			status: "completed" as const,
			estimated: false,
		};

		expect(await at(t0, () => stub.authorize({ payerKeyId: keyId, requestId: "a", holdNanos: 4_000, scopes }))).toMatchObject({
			ok: true,
		});
		// While "a" is held, its hold counts against the cap too.
		expect(await at(t0, () => stub.authorize({ payerKeyId: keyId, requestId: "b", holdNanos: 7_000, scopes }))).toMatchObject({
			ok: true,
		});
		expect(await at(t0, () => stub.authorize({ payerKeyId: keyId, requestId: "c", holdNanos: 1, scopes }))).toMatchObject({
			ok: false,
			refused: "spend_limit",
			limitNanos: 10_000,
		});
		await at(t0, () => stub.settle({ requestId: "a", costNanos: 6_000, record }));
		await at(t0, () => stub.settle({ requestId: "b", costNanos: 5_000, record }));
		expect(await at(t0, () => stub.spend({ scope: keyId, period: "daily" }))).toEqual({ spentNanos: 11_000 });
		const refused = await at(t0 + 30_000, () => stub.authorize({ payerKeyId: keyId, requestId: "d", holdNanos: 1, scopes }));
		expect(refused).toMatchObject({
			ok: false,
			refused: "spend_limit",
			spentNanos: 11_000,
			period: "daily",
			resetsAt: Date.UTC(2030, 0, 16),
		});

		// One minute later it is the next day (UTC): the cap is fresh.
		const t1 = t0 + 60_000;
		expect(await at(t1, () => stub.spend({ scope: keyId, period: "daily" }))).toEqual({ spentNanos: 0 });
		expect(await at(t1, () => stub.authorize({ payerKeyId: keyId, requestId: "e", holdNanos: 1, scopes }))).toMatchObject({
			ok: true,
		});
		// Lifetime and monthly spend keep counting across the day boundary.
		expect(await at(t1, () => stub.spend({ scope: keyId, period: null }))).toEqual({ spentNanos: 11_000 });
		expect(await at(t1, () => stub.spend({ scope: keyId, period: "monthly" }))).toEqual({ spentNanos: 11_000 });
	});

	it("computes UTC periods: days, ISO weeks from Monday, calendar months", () => {
		const wed = Date.UTC(2030, 0, 16, 13, 5); // Wednesday 16 January 2030
		expect(periodStart("daily", wed)).toBe(Date.UTC(2030, 0, 16));
		expect(periodEnd("daily", wed)).toBe(Date.UTC(2030, 0, 17));
		expect(periodStart("weekly", wed)).toBe(Date.UTC(2030, 0, 14));
		expect(periodEnd("weekly", wed)).toBe(Date.UTC(2030, 0, 21));
		const sunday = Date.UTC(2030, 0, 20, 23, 59);
		expect(periodStart("weekly", sunday)).toBe(Date.UTC(2030, 0, 14));
		expect(periodStart("monthly", wed)).toBe(Date.UTC(2030, 0, 1));
		expect(periodEnd("monthly", Date.UTC(2030, 11, 31, 23))).toBe(Date.UTC(2031, 0, 1));
	});
});

describe("admin validation of scope fields", () => {
	it.each([
		["an origin with a path", { allowed_origins: ["https://app.example/path"] }, "allowed_origins[0]"],
		["an origin without a scheme", { allowed_origins: ["app.example"] }, "allowed_origins[0]"],
		["a bare wildcard", { allowed_origins: ["*"] }, "allowed_origins[0]"],
		["a wildcard in the middle", { allowed_origins: ["https://app.*.example"] }, "allowed_origins[0]"],
		["an empty origin list", { allowed_origins: [] }, "allowed_origins"],
		["an unknown model", { allowed_models: ["test/ok", "test/nope"] }, "allowed_models[1]"],
		["an empty model list", { allowed_models: [] }, "allowed_models"],
		["a bad reset period", { spend_limit_usd: 1, spend_limit_period: "hourly" }, "spend_limit_period"],
		["a zero max_tokens", { max_tokens: 0 }, "max_tokens"],
	])("refuses %s with 400 and its param", async (_label, fields, param) => {
		const res = await admin("/keys", { method: "POST", body: JSON.stringify({ name: "x", ...fields }) });
		const json = await expectError(res, 400, null);
		expect(json.error.param).toBe(param);
	});

	it("lowercases origins and accepts ports, localhost and wildcards", async () => {
		const res = await admin("/keys", {
			method: "POST",
			body: JSON.stringify({
				name: "o",
				allowed_origins: ["HTTPS://App.Example", "http://localhost:5173", "https://*.example.com"],
			}),
		});
		expect(res.status).toBe(201);
		expect(((await res.json()) as { allowed_origins: string[] }).allowed_origins).toEqual([
			"https://app.example",
			"http://localhost:5173",
			"https://*.example.com",
		]);
	});
});

describe("key cache (Cache API without Redis)", () => {
	it("serves a warm key without D1, and sees an admin change at once", async () => {
		const { id, key } = await createKey({ name: "warm" });
		expect((await chat(key, body())).status).toBe(200);
		// Changed behind the gateway's back: the warm key is still served from the cache...
		await env.DB.prepare("UPDATE api_keys SET allowed_models = ? WHERE id = ?")
			.bind(JSON.stringify(["test/slow"]), id)
			.run();
		expect((await chat(key, body())).status).toBe(200);
		// ...until the admin API changes the key, which invalidates the cached copy.
		expect((await admin(`/keys/${id}`, { method: "PATCH", body: JSON.stringify({ name: "warm2" }) })).status).toBe(200);
		await expectError(await chat(key, body()), 403, "forbidden");
	});

	it("refuses a revoked key at once, even when it was warm", async () => {
		const { id, key } = await createKey();
		expect((await chat(key, body())).status).toBe(200);
		expect((await admin(`/keys/${id}`, { method: "DELETE" })).status).toBe(200);
		const json = await expectError(await chat(key, body()), 401, "invalid_api_key");
		expect(json.error.message).toMatch(/revoked/);
	});
});
