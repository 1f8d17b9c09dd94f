/**
 * POST /v1/tokens: short-lived `vk-tmp-` browser tokens minted by a server-side key. They are
 * bound to origins, expire within an hour and never after their key, cannot widen its scopes
 * or mint tokens themselves, and draw on the key's balance.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { expect400 } from "../../support/admin-input";
import { admin, chat, createKey, gw, waitFor } from "../../support/gateway";

type Json = Record<string, unknown>;
type ErrorBody = { error: { message: string; type: string; param: string | null; code: string | null } };

const APP = "https://app.example";
const CHAT = { model: "test/ok", messages: [{ role: "user", content: "hi" }], max_tokens: 5 };

function mint(key: string, fields: Json, headers: Record<string, string> = {}): Promise<Response> {
	return gw("/v1/tokens", {
		method: "POST",
		headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
		body: JSON.stringify(fields),
	});
}

async function minted(key: string, fields: Json = {}): Promise<Json & { token: string; id: string; expires_at: number }> {
	const res = await mint(key, { allowed_origins: [APP], ...fields });
	const json = (await res.json()) as Json & { token: string; id: string; expires_at: number };
	expect(res.status, JSON.stringify(json)).toBe(201);
	return json;
}

async function expectError(res: Response, status: number, param?: string | null): Promise<ErrorBody> {
	const json = (await res.json()) as ErrorBody;
	expect(res.status, JSON.stringify(json)).toBe(status);
	if (param !== undefined) expect(json.error.param).toBe(param);
	return json;
}

const fromApp = { headers: { origin: APP } };

describe("minting", () => {
	it("mints a vk-tmp- token bound to its origins that works from them only", async () => {
		const parent = await createKey({ name: "server" });
		const now = Math.floor(Date.now() / 1000);
		const t = await minted(parent.key, { ttl_seconds: 600 });
		expect(t.token).toMatch(/^vk-tmp-[A-Za-z0-9_-]{38}$/);
		expect(t).toMatchObject({ object: "token", parent_key_id: parent.id, allowed_origins: [APP] });
		expect(t.expires_at).toBeGreaterThanOrEqual(now + 599);
		expect(t.expires_at).toBeLessThanOrEqual(now + 601);

		expect((await chat(t.token, CHAT, fromApp)).status).toBe(200);
		await expectError(await chat(t.token, CHAT), 403);
		await expectError(await chat(t.token, CHAT, { headers: { origin: "https://evil.example" } }), 403);
	});

	it.each([
		["ttl_seconds over an hour", { allowed_origins: [APP], ttl_seconds: 3601 }, "ttl_seconds"],
		["ttl_seconds zero", { allowed_origins: [APP], ttl_seconds: 0 }, "ttl_seconds"],
		["no allowed_origins", { ttl_seconds: 60 }, "allowed_origins"],
		["an empty allowed_origins", { allowed_origins: [] }, "allowed_origins"],
		["an origin with a path", { allowed_origins: ["https://app.example/x"] }, "allowed_origins[0]"],
		["an unknown model", { allowed_origins: [APP], allowed_models: ["test/nope"] }, "allowed_models[0]"],
		["an unknown field", { allowed_origins: [APP], balance_usd: 5 }, "balance_usd"],
	])("refuses %s with 400", async (_label, fields, param) => {
		const parent = await createKey();
		await expectError(await mint(parent.key, fields), 400, param);
	});

	it.each([
		["ttl_seconds", 1.5],
		["ttl_seconds", "600"],
		["ttl_seconds", null],
		["allowed_origins", "https://a.com"],
		["allowed_models", "test/ok"],
		["spend_limit_usd", "1"],
		["rpm", 2.5],
		["tpm", true],
		["max_tokens", [5]],
		["name", 5],
	])("refuses %s of the wrong type (%j) as an invalid value, not a missing one", async (param, value) => {
		const parent = await createKey();
		const json = await expectError(await mint(parent.key, { allowed_origins: ["https://a.com"], [param]: value }), 400, param);
		expect(json.error.message).toMatch(new RegExp(`^Invalid value for '${param}'`));
		expect(json.error.message).not.toMatch(/Missing/);
	});

	it.each([
		["a NUL", "tok\u0000en"],
		["a newline", "tok\nen"],
		["a C1 control", "tok\u0085en"],
		["a lone high surrogate", "tok\ud800en"],
		["a lone low surrogate", "tok\udc00"],
	])("refuses a token name with %s", async (_label, name) => {
		const parent = await createKey();
		await expectError(await mint(parent.key, { allowed_origins: [APP], name }), 400, "name");
	});

	it("keeps a token name with emoji and accents", async () => {
		const parent = await createKey();
		const t = await minted(parent.key, { name: "café 🚀" });
		expect(((await (await admin(`/keys/${t.id}`)).json()) as Json).name).toBe("café 🚀");
	});

	it("names an unnamed token neutrally: never after its parent, which the browser must not see", async () => {
		const parentName = `acme-prod-billing ${"x".repeat(182)}`;
		expect(parentName).toHaveLength(200);
		const parent = await createKey({ name: parentName });
		const t = await minted(parent.key);
		const row = (await (await admin(`/keys/${t.id}`)).json()) as Json;
		expect(row.name).toBe("temporary token");
		const own = (await (await gw("/v1/key", { headers: { authorization: `Bearer ${t.token}`, origin: APP } })).json()) as Json;
		expect(JSON.stringify(own)).not.toContain("acme-prod-billing");
		// The row is within the 200-character limit, so renaming it back to its own name works.
		const renamed = await admin(`/keys/${t.id}`, { method: "PATCH", body: JSON.stringify({ name: row.name }) });
		expect(renamed.status).toBe(200);
	});

	it("accepts a ttl of exactly an hour", async () => {
		const parent = await createKey();
		const t = await minted(parent.key, { ttl_seconds: 3600 });
		expect(t.expires_at - Math.floor(Date.now() / 1000)).toBeGreaterThan(3590);
	});
});

describe("no widening", () => {
	it("refuses models, rpm, tpm, spend and max_tokens beyond the key's own with 403", async () => {
		const parent = await createKey({
			allowed_models: ["test/ok", "test/slow"],
			rpm: 10,
			tpm: 10_000,
			spend_limit_usd: 1,
			max_tokens: 100,
		});
		await expectError(
			await mint(parent.key, { allowed_origins: [APP], allowed_models: ["test/ok", "test/failover"] }),
			403,
			"allowed_models",
		);
		await expectError(await mint(parent.key, { allowed_origins: [APP], rpm: 11 }), 403, "rpm");
		await expectError(await mint(parent.key, { allowed_origins: [APP], tpm: 10_001 }), 403, "tpm");
		await expectError(await mint(parent.key, { allowed_origins: [APP], spend_limit_usd: 2 }), 403, "spend_limit_usd");
		await expectError(await mint(parent.key, { allowed_origins: [APP], max_tokens: 101 }), 403, "max_tokens");
		const narrower = await minted(parent.key, { allowed_models: ["test/ok"], rpm: 5, spend_limit_usd: 0.5, max_tokens: 50 });
		expect(narrower).toMatchObject({ allowed_models: ["test/ok"], rpm: 5, spend_limit_usd: 0.5, max_tokens: 50 });
	});

	it("names limits in USD, not nano-dollars, when refusing a wider spend limit", async () => {
		const parent = await createKey({ spend_limit_usd: 0.05 });
		const json = await expectError(
			await mint(parent.key, { allowed_origins: [APP], spend_limit_usd: 0.06 }),
			403,
			"spend_limit_usd",
		);
		expect(json.error.message).toContain("$0.06");
		expect(json.error.message).toContain("$0.05");
		expect(json.error.message).not.toMatch(/\d{5}/);
	});

	it("inherits the key's models, and the key's later narrowing applies to its tokens", async () => {
		const parent = await createKey({ allowed_models: ["test/ok", "test/slow"] });
		const t = await minted(parent.key);
		expect(t.allowed_models).toEqual(["test/ok", "test/slow"]);
		await expectError(await chat(t.token, { ...CHAT, model: "test/failover" }, fromApp), 403, "model");
		const listed = (await (await gw("/v1/models", { headers: { authorization: `Bearer ${t.token}`, origin: APP } })).json()) as {
			data: Array<{ id: string }>;
		};
		expect(listed.data.map((m) => m.id).sort()).toEqual(["test/ok", "test/slow"]);

		expect((await chat(t.token, { ...CHAT, model: "test/slow" }, fromApp)).status).toBe(200);
		expect(
			(await admin(`/keys/${parent.id}`, { method: "PATCH", body: JSON.stringify({ allowed_models: ["test/ok"] }) })).status,
		).toBe(200);
		await expectError(await chat(t.token, { ...CHAT, model: "test/slow" }, fromApp), 403, "model");
	});

	it("does not let a token mint tokens, nor a browser key", async () => {
		const parent = await createKey();
		const t = await minted(parent.key);
		const json = await expectError(await mint(t.token, { allowed_origins: [APP] }, { origin: APP }), 403);
		expect(json.error.message).toMatch(/cannot mint/);
		const browser = await createKey({ allowed_origins: [APP] });
		await expectError(await mint(browser.key, { allowed_origins: [APP] }, { origin: APP }), 403);
	});
});

describe("lifetime", () => {
	it("never outlives its key", async () => {
		const parentExpiry = Math.floor(Date.now() / 1000) + 120;
		const parent = await createKey({ expires_at: parentExpiry });
		const t = await minted(parent.key, { ttl_seconds: 3600 });
		expect(t.expires_at).toBe(parentExpiry);
	});

	it("expires after its ttl with 401", async () => {
		const parent = await createKey();
		const t = await minted(parent.key, { ttl_seconds: 1 });
		expect(t.expires_at).toBe((t.created_at as number) + 1);
		// Let the second pass in the record instead of on the clock: expires_at one second ago.
		// The token has not been used, so no cache holds the old expiry.
		const past = Math.floor(Date.now() / 1000) - 1;
		await env.DB.prepare("UPDATE api_keys SET expires_at = ? WHERE id = ?").bind(past, t.id).run();
		const json = await expectError(await chat(t.token, CHAT, fromApp), 401);
		expect(json.error.message).toMatch(/expired/);
	});

	it("stops working when its key is revoked, even while warm", async () => {
		const parent = await createKey();
		const t = await minted(parent.key);
		expect((await chat(t.token, CHAT, fromApp)).status).toBe(200);
		expect((await admin(`/keys/${parent.id}`, { method: "DELETE" })).status).toBe(200);
		const json = await expectError(await chat(t.token, CHAT, fromApp), 401);
		expect(json.error.message).toMatch(/revoked/);
	});

	it("stops working when its key expires by PATCH", async () => {
		const parent = await createKey();
		const t = await minted(parent.key);
		expect((await chat(t.token, CHAT, fromApp)).status).toBe(200);
		const past = Math.floor(Date.now() / 1000) - 1;
		expect((await admin(`/keys/${parent.id}`, { method: "PATCH", body: JSON.stringify({ expires_at: past }) })).status).toBe(200);
		await expectError(await chat(t.token, CHAT, fromApp), 401);
	});
});

describe("billing and limits", () => {
	it("draws on the key's balance and records usage under the key", async () => {
		const parent = await createKey({ balance_usd: 2 });
		const t = await minted(parent.key);
		const res = await chat(t.token, CHAT, fromApp);
		expect(res.status).toBe(200);
		const cost = Number(res.headers.get("x-venym-cost-usd"));
		expect(cost).toBeGreaterThan(0);
		expect(Number(res.headers.get("x-venym-balance-usd"))).toBeCloseTo(2 - cost, 9);
		const after = (await (await admin(`/keys/${parent.id}`)).json()) as { balance_usd: number };
		expect(after.balance_usd).toBeCloseTo(2 - cost, 9);
		const requestId = res.headers.get("x-request-id");
		const row = await waitFor(async () => {
			const usage = (await (await admin(`/usage?key_id=${parent.id}`)).json()) as { data: Array<{ request_id: string }> };
			return usage.data.find((r) => r.request_id === requestId);
		});
		expect(row).toMatchObject({ key_id: parent.id });
	});

	it("is refused with 402 when the key's balance is spent", async () => {
		const parent = await createKey({ balance_usd: 0 });
		const t = await minted(parent.key);
		await expectError(await chat(t.token, CHAT, fromApp), 402);
	});

	it("has its own rpm and spend cap, and the key's still apply", async () => {
		const parent = await createKey({ rpm: 3 });
		const a = await minted(parent.key, { rpm: 1 });
		const b = await minted(parent.key);
		expect((await chat(a.token, CHAT, fromApp)).status).toBe(200);
		const limited = await chat(a.token, CHAT, fromApp);
		expect(limited.status).toBe(429);
		expect(limited.headers.get("x-ratelimit-limit-requests")).toBe("1");
		// b has no rpm of its own, but the key's 3 a minute cover a's request too.
		expect((await chat(b.token, CHAT, fromApp)).status).toBe(200);
		expect((await chat(b.token, CHAT, fromApp)).status).toBe(200);
		expect((await chat(b.token, CHAT, fromApp)).status).toBe(429);
		expect((await chat(parent.key, CHAT)).status).toBe(429);

		const capped = await createKey();
		const c = await minted(capped.key, { spend_limit_usd: 0.000001 });
		expect((await chat(c.token, CHAT, fromApp)).status).toBe(200);
		const json = await expectError(await chat(c.token, CHAT, fromApp), 403);
		expect(json.error.message).toMatch(/spend limit/);
		expect((await chat(capped.key, CHAT)).status).toBe(200);
	});
});

describe("PATCH /admin/keys/{id} on a temporary token", () => {
	async function tokenOf(parentFields: Json = {}): Promise<{ parentId: string; id: string; expires_at: number }> {
		const parent = await createKey({ spend_limit_usd: 50, rpm: 10, ...parentFields });
		const res = await mint(parent.key, { allowed_origins: [APP], ttl_seconds: 600, spend_limit_usd: 1 });
		const t = (await res.json()) as { id: string; expires_at: number };
		expect(res.status).toBe(201);
		return { parentId: parent.id, ...t };
	}

	it.each<[string, Json, string]>([
		["widens the spend limit and drops the origins", { spend_limit_usd: 1000, allowed_origins: null }, "spend_limit_usd"],
		["drops the origins", { allowed_origins: null }, "allowed_origins"],
		["changes the origins", { allowed_origins: ["https://evil.example"] }, "allowed_origins"],
		["drops the spend limit", { spend_limit_usd: null }, "spend_limit_usd"],
		["narrows the spend limit", { spend_limit_usd: 0.5 }, "spend_limit_usd"],
		["sets a spend period", { spend_limit_period: "daily" }, "spend_limit_period"],
		["widens rpm", { rpm: 1000 }, "rpm"],
		["sets tpm", { tpm: 5 }, "tpm"],
		["sets max_tokens", { max_tokens: 5 }, "max_tokens"],
		["widens the models", { allowed_models: ["test/ok", "test/slow"] }, "allowed_models"],
		["moves expires_at past an hour", { expires_at: Math.floor(Date.now() / 1000) + 86_400 }, "expires_at"],
		["removes expires_at", { expires_at: null }, "expires_at"],
		["sets metadata", { metadata: { a: "b" } }, "metadata"],
		["renames it and changes a scope", { name: "ok", rpm: 1 }, "rpm"],
	])("refuses a PATCH that %s with 400 and changes nothing", async (_label, body, param) => {
		const t = await tokenOf();
		const before = await (await admin(`/keys/${t.id}`)).json();
		const json = await expect400(await admin(`/keys/${t.id}`, { method: "PATCH", body: JSON.stringify(body) }), param);
		expect(json.error.message).toMatch(/temporary token/);
		expect(await (await admin(`/keys/${t.id}`)).json()).toEqual(before);
	});

	it("still allows renaming it, restating its own scopes, and revoking it", async () => {
		const t = await tokenOf();
		const renamed = await admin(`/keys/${t.id}`, {
			method: "PATCH",
			body: JSON.stringify({ name: "renamed", allowed_origins: [APP], spend_limit_usd: 1, expires_at: t.expires_at }),
		});
		expect(renamed.status).toBe(200);
		expect(await renamed.json()).toMatchObject({ name: "renamed", allowed_origins: [APP], spend_limit_usd: 1 });
		const revoked = await admin(`/keys/${t.id}`, { method: "DELETE" });
		expect(revoked.status).toBe(200);
		expect(await revoked.json()).toMatchObject({ revoked: true });
	});

	it("still lets the parent key be changed", async () => {
		const t = await tokenOf();
		const res = await admin(`/keys/${t.parentId}`, { method: "PATCH", body: JSON.stringify({ spend_limit_usd: 100, rpm: 20 }) });
		expect(res.status).toBe(200);
	});
});
