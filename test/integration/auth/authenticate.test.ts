/**
 * Client key authentication on /v1/* and the admin API on /admin/*.
 */
import { describe, expect, it } from "vitest";
import { ADMIN_FAIL_LIMIT } from "../../../src/auth/fail-throttle";
import { generateSecret } from "../../../src/auth/key-secret";
import { admin, chat, createKey, expectAuthThrottled, gw } from "../../support/gateway";
import { TEST_ADMIN_TOKEN } from "../../support/test-config";

type Json = Record<string, unknown>;
type ErrorBody = { error: { message: string; type: string; param: string | null; code: string | null } };

const CHAT = { model: "test/ok", messages: [{ role: "user", content: "hi" }] };

function withAuth(authorization: string | undefined): RequestInit {
	return { headers: authorization === undefined ? {} : { authorization } };
}

/** Asserts the OpenAI-shaped 401 for a refused client key. */
async function expectInvalidKey(res: Response): Promise<ErrorBody> {
	const body = (await res.json()) as ErrorBody;
	expect(res.status, JSON.stringify(body)).toBe(401);
	expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
	expect(body.error.code).toBe("invalid_api_key");
	expect(typeof body.error.type).toBe("string");
	expect(body.error.message.length).toBeGreaterThan(0);
	expect(body.error.param).toBeNull();
	return body;
}

describe("client key authentication", () => {
	it("accepts a fresh key", async () => {
		const { key } = await createKey();
		expect((await gw("/v1/models", withAuth(`Bearer ${key}`))).status).toBe(200);
		expect((await chat(key, CHAT)).status).toBe(200);
	});

	it.each([
		["no Authorization header", undefined],
		["an empty Authorization header", ""],
		["a non-Bearer scheme", "Basic dXNlcjpwYXNz"],
		["Bearer with no token", "Bearer "],
		["a token that is not a vk- key", "Bearer sk-proj-abcdef0123456789"],
		["a vk- key with a bad checksum", "Bearer vk-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAaaaaaa"],
		["the admin token", `Bearer ${TEST_ADMIN_TOKEN}`],
	])("refuses %s with 401 invalid_api_key", async (_label, authorization) => {
		await expectInvalidKey(await gw("/v1/models", withAuth(authorization)));
		await expectInvalidKey(
			await gw("/v1/chat/completions", {
				method: "POST",
				headers: { "content-type": "application/json", ...(authorization === undefined ? {} : { authorization }) },
				body: JSON.stringify(CHAT),
			}),
		);
	});

	it("refuses a well-formed key that was never issued", async () => {
		const unknown = generateSecret();
		await expectInvalidKey(await gw("/v1/models", withAuth(`Bearer ${unknown}`)));
		await expectInvalidKey(await chat(unknown, CHAT));
	});

	it("refuses a revoked key", async () => {
		const { id, key } = await createKey();
		expect((await chat(key, CHAT)).status).toBe(200);
		expect((await admin(`/keys/${id}`, { method: "DELETE" })).status).toBe(200);
		await expectInvalidKey(await chat(key, CHAT));
		await expectInvalidKey(await gw("/v1/key", withAuth(`Bearer ${key}`)));
	});

	it("refuses an expired key, given as unix seconds or as an ISO date", async () => {
		const past = Math.floor(Date.now() / 1000) - 60;
		const a = await createKey({ expires_at: past });
		await expectInvalidKey(await chat(a.key, CHAT));
		const b = await createKey({ expires_at: "2020-01-01T00:00:00Z" });
		await expectInvalidKey(await gw("/v1/models", withAuth(`Bearer ${b.key}`)));
	});

	it("accepts a key that expires in the future", async () => {
		const { key } = await createKey({ expires_at: Math.floor(Date.now() / 1000) + 3600 });
		expect((await chat(key, CHAT)).status).toBe(200);
	});

	it("accepts the bearer scheme case-insensitively", async () => {
		const { key } = await createKey();
		expect((await gw("/v1/models", withAuth(`bearer ${key}`))).status).toBe(200);
	});

	it("shows the caller its own key without the secret", async () => {
		const { id, key } = await createKey({ name: "mine", balance_usd: 3 });
		const res = await gw("/v1/key", withAuth(`Bearer ${key}`));
		expect(res.status).toBe(200);
		const text = await res.text();
		const body = JSON.parse(text) as Json;
		expect(body.id).toBe(id);
		expect(body.name).toBe("mine");
		expect(body.balance_usd).toBe(3);
		expect(text).not.toContain(key);
		expect(body).not.toHaveProperty("key");
		expect(body).not.toHaveProperty("hash");
	});
});

describe("admin authentication", () => {
	it.each([
		["no token", undefined],
		["a wrong token", "Bearer not-the-admin-token"],
		["a near miss", `Bearer ${TEST_ADMIN_TOKEN}x`],
		["a non-Bearer scheme", `Basic ${TEST_ADMIN_TOKEN}`],
	])("refuses %s with 401", async (_label, authorization) => {
		const headers: Record<string, string> = { "content-type": "application/json" };
		if (authorization !== undefined) headers.authorization = authorization;
		for (const [method, path, body] of [
			["GET", "/admin/keys", undefined],
			["POST", "/admin/keys", JSON.stringify({ name: "x" })],
			["GET", "/admin/usage", undefined],
		] as const) {
			const res = await gw(path, { method, headers, body });
			const json = (await res.json()) as ErrorBody;
			expect(res.status, `${method} ${path}`).toBe(401);
			expect(json.error.code).toBe("invalid_api_key");
			expect(Object.keys(json.error).sort()).toEqual(["code", "message", "param", "type"]);
		}
	});

	it("does not accept a client key as the admin token", async () => {
		const { key } = await createKey();
		const res = await gw("/admin/keys", { headers: { authorization: `Bearer ${key}` } });
		expect(res.status).toBe(401);
	});
});

describe("admin keys", () => {
	it("creates a key and shows its vk- secret once", async () => {
		const res = await admin("/keys", { method: "POST", body: JSON.stringify({ name: "created", balance_usd: 2.5 }) });
		expect(res.status).toBe(201);
		const created = (await res.json()) as Json;
		expect(typeof created.id).toBe("string");
		expect(created.key).toMatch(/^vk-[A-Za-z0-9_-]{20,}$/);
		expect(created.name).toBe("created");
		expect(created.balance_usd).toBe(2.5);
		expect(created).not.toHaveProperty("hash");

		const getText = await (await admin(`/keys/${created.id}`)).text();
		const got = JSON.parse(getText) as Json;
		expect(got.id).toBe(created.id);
		expect(got.balance_usd).toBe(2.5);
		expect(got).not.toHaveProperty("key");
		expect(got).not.toHaveProperty("hash");
		expect(getText).not.toContain(created.key as string);

		const listText = await (await admin("/keys")).text();
		expect(listText).not.toContain(created.key as string);
		const list = JSON.parse(listText) as { data: Json[] };
		const listed = list.data.find((k) => k.id === created.id);
		expect(listed).toBeDefined();
		expect(listed).not.toHaveProperty("key");
		expect(listed).not.toHaveProperty("hash");
	});

	it("issues a different secret for every key", async () => {
		const a = await createKey();
		const b = await createKey();
		expect(a.key).not.toBe(b.key);
		expect(a.id).not.toBe(b.id);
	});

	it("lists keys", async () => {
		const a = await createKey({ name: "list-a" });
		const b = await createKey({ name: "list-b" });
		const res = await admin("/keys");
		expect(res.status).toBe(200);
		const body = (await res.json()) as { data: Json[] };
		const ids = body.data.map((k) => k.id);
		expect(ids).toContain(a.id);
		expect(ids).toContain(b.id);
		expect(body.data.find((k) => k.id === a.id)?.name).toBe("list-a");
	});

	it("stores and returns the scope fields", async () => {
		const scope = {
			name: "scoped",
			balance_usd: 1,
			allowed_origins: ["https://app.example"],
			allowed_models: ["test/ok"],
			rpm: 60,
			tpm: 100_000,
			spend_limit_usd: 5,
			expires_at: "2099-01-01T00:00:00Z",
		};
		const res = await admin("/keys", { method: "POST", body: JSON.stringify(scope) });
		expect(res.status).toBe(201);
		const created = (await res.json()) as Json;
		const expected = {
			name: "scoped",
			allowed_origins: ["https://app.example"],
			allowed_models: ["test/ok"],
			rpm: 60,
			tpm: 100_000,
			spend_limit_usd: 5,
			expires_at: Math.floor(Date.parse("2099-01-01T00:00:00Z") / 1000),
		};
		expect(created).toMatchObject(expected);
		expect(await (await admin(`/keys/${created.id}`)).json()).toMatchObject(expected);
	});

	it("updates a key with PATCH and keeps what was not sent", async () => {
		const { id } = await createKey({ name: "before", rpm: 10, allowed_models: ["test/ok"] });
		const res = await admin(`/keys/${id}`, { method: "PATCH", body: JSON.stringify({ name: "after", tpm: 500 }) });
		expect(res.status).toBe(200);
		const patched = (await res.json()) as Json;
		expect(patched).toMatchObject({ id, name: "after", rpm: 10, tpm: 500, allowed_models: ["test/ok"] });
		expect(await (await admin(`/keys/${id}`)).json()).toMatchObject({ name: "after", rpm: 10, tpm: 500 });

		const cleared = (await (await admin(`/keys/${id}`, { method: "PATCH", body: JSON.stringify({ rpm: null }) })).json()) as Json;
		expect(cleared.rpm).toBeNull();
		expect(cleared).not.toHaveProperty("key");
	});

	it("revokes a key with DELETE", async () => {
		const { id } = await createKey();
		const res = await admin(`/keys/${id}`, { method: "DELETE" });
		expect(res.status).toBe(200);
		expect(await res.json()).toMatchObject({ id, revoked: true });
		expect(await (await admin(`/keys/${id}`)).json()).toMatchObject({ id, revoked: true });
		// Revoking twice is harmless.
		expect((await admin(`/keys/${id}`, { method: "DELETE" })).status).toBe(200);
	});

	it("answers 404 for an unknown key id", async () => {
		for (const method of ["GET", "PATCH", "DELETE"]) {
			const res = await admin("/keys/key_doesnotexist", {
				method,
				body: method === "PATCH" ? JSON.stringify({ name: "x" }) : undefined,
			});
			expect(res.status, method).toBe(404);
			expect(((await res.json()) as ErrorBody).error.type).toBeDefined();
		}
	});

	it("adds credits to a key's balance", async () => {
		const { id } = await createKey({ balance_usd: 1 });
		const res = await admin(`/keys/${id}/credits`, {
			method: "POST",
			body: JSON.stringify({ amount_usd: 2.25, note: "top-up" }),
		});
		expect(res.status).toBe(200);
		expect(await res.json()).toMatchObject({ balance_usd: 3.25 });
		expect(await (await admin(`/keys/${id}`)).json()).toMatchObject({ balance_usd: 3.25 });
	});

	it.each([
		["name is missing", { balance_usd: 1 }, "name"],
		["name is empty", { name: "" }, "name"],
		["balance_usd is a string", { name: "x", balance_usd: "10" }, "balance_usd"],
		["balance_usd is negative", { name: "x", balance_usd: -1 }, "balance_usd"],
		["rpm is not positive", { name: "x", rpm: 0 }, "rpm"],
		["tpm is fractional", { name: "x", tpm: 1.5 }, "tpm"],
		["spend_limit_usd is negative", { name: "x", spend_limit_usd: -5 }, "spend_limit_usd"],
		["allowed_models is not an array", { name: "x", allowed_models: "test/ok" }, "allowed_models"],
		["an allowed origin is not a string", { name: "x", allowed_origins: ["https://a.example", 5] }, "allowed_origins[1]"],
		["expires_at is not a date", { name: "x", expires_at: "next tuesday" }, "expires_at"],
		["a field is unknown", { name: "x", colour: "blue" }, "colour"],
	])("refuses a key whose %s with 400 and its param", async (_label, body, param) => {
		const res = await admin("/keys", { method: "POST", body: JSON.stringify(body) });
		const json = (await res.json()) as ErrorBody;
		expect(res.status, JSON.stringify(json)).toBe(400);
		expect(json.error.type).toBe("invalid_request_error");
		expect(json.error.param).toBe(param);
	});

	it("refuses an invalid PATCH with its param and changes nothing", async () => {
		const { id } = await createKey({ name: "stable", rpm: 5 });
		const res = await admin(`/keys/${id}`, { method: "PATCH", body: JSON.stringify({ name: "changed", rpm: -3 }) });
		expect(res.status).toBe(400);
		expect(((await res.json()) as ErrorBody).error.param).toBe("rpm");
		expect(await (await admin(`/keys/${id}`)).json()).toMatchObject({ name: "stable", rpm: 5 });
	});

	it("refuses malformed JSON with 400", async () => {
		const res = await admin("/keys", { method: "POST", body: "{name:" });
		expect(res.status).toBe(400);
		expect(((await res.json()) as ErrorBody).error.type).toBe("invalid_request_error");
	});

	it("refuses a zero credit with its param", async () => {
		const { id } = await createKey();
		const res = await admin(`/keys/${id}/credits`, { method: "POST", body: JSON.stringify({ amount_usd: 0 }) });
		expect(res.status).toBe(400);
		expect(((await res.json()) as ErrorBody).error.param).toBe("amount_usd");
	});
});

describe("admin token throttle without Redis", () => {
	let ipSeq = 0;
	const freshIp = () => `203.0.113.${++ipSeq}`;
	const fromIp = (ip: string | null, token: string) =>
		gw("/admin/keys?limit=1", { headers: { authorization: `Bearer ${token}`, ...(ip ? { "cf-connecting-ip": ip } : {}) } });

	it(`answers 429 with Retry-After after ${ADMIN_FAIL_LIMIT} wrong admin tokens from one IP, even for the right one`, async () => {
		const ip = freshIp();
		for (let i = 0; i < ADMIN_FAIL_LIMIT; i++) {
			const res = await fromIp(ip, `wrong-${i}`);
			expect(res.status, `attempt ${i + 1}`).toBe(401);
			expect(((await res.json()) as ErrorBody).error.code).toBe("invalid_api_key");
		}
		await expectAuthThrottled(await fromIp(ip, "wrong-again"));
		// Once throttled, the right token is refused too: a brute force learns nothing.
		expect((await fromIp(ip, TEST_ADMIN_TOKEN)).status).toBe(429);
		// Other IPs, and requests without a client IP, keep working with the right token.
		expect((await fromIp(freshIp(), TEST_ADMIN_TOKEN)).status).toBe(200);
		expect((await fromIp(null, TEST_ADMIN_TOKEN)).status).toBe(200);
	});

	it("does not count successful admin calls, nor failed key authentications, against an IP", async () => {
		const ip = freshIp();
		for (let i = 0; i < ADMIN_FAIL_LIMIT + 5; i++) expect((await fromIp(ip, TEST_ADMIN_TOKEN)).status).toBe(200);
		for (let i = 0; i < ADMIN_FAIL_LIMIT - 1; i++) expect((await fromIp(ip, "wrong")).status).toBe(401);
		expect((await fromIp(ip, TEST_ADMIN_TOKEN)).status).toBe(200);
		for (let i = 0; i < ADMIN_FAIL_LIMIT + 2; i++) {
			const res = await gw("/v1/models", { headers: { authorization: "Bearer vk-not-a-key", "cf-connecting-ip": ip } });
			expect(res.status).toBe(401);
		}
		expect((await fromIp(ip, TEST_ADMIN_TOKEN)).status).toBe(200);
	});
});
