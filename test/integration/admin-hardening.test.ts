/**
 * Money and input hardening of the admin API and POST /v1/tokens: money fields stay finite,
 * in range and at least a nano-dollar; tokens cannot be topped up and a debit cannot take a
 * balance below zero; a reused Idempotency-Key with another amount is a 409; GET /v1/key hides
 * the operator's metadata; key and usage listings page by (created_at, id) and refuse malformed
 * cursors; key names are one line of well-formed text; PATCH cannot change a token's scopes;
 * failed admin-token attempts are throttled per client IP.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ADMIN_FAIL_LIMIT } from "../../src/auth/fail-throttle";
import { ledgerFor } from "../../src/ledger/ledger-client";
import { admin, createKey, expectAuthThrottled, gw } from "../support/gateway";
import { TEST_ADMIN_TOKEN } from "../support/test-config";

type Json = Record<string, unknown>;
type ErrorBody = { error: { message: string; type: string; param: string | null; code: string | null } };

const APP = "https://app.example";

async function expect400(res: Response, param: string, code: string | null = null): Promise<ErrorBody> {
	const json = (await res.json()) as ErrorBody;
	expect(res.status, JSON.stringify(json)).toBe(400);
	expect(json.error.type).toBe("invalid_request_error");
	expect(json.error.param).toBe(param);
	expect(json.error.code).toBe(code);
	return json;
}

/** A JSON body with a raw numeric literal (1e999 parses to Infinity), which JSON.stringify cannot write. */
function rawBody(fields: Json, param: string, literal: string): string {
	return JSON.stringify({ ...fields, [param]: "@@" }).replace('"@@"', literal);
}

function mint(key: string, fields: Json): Promise<Response> {
	return gw("/v1/tokens", {
		method: "POST",
		headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
		body: JSON.stringify({ allowed_origins: [APP], ...fields }),
	});
}

async function balanceOf(id: string): Promise<number> {
	return ((await (await admin(`/keys/${id}`)).json()) as { balance_usd: number }).balance_usd;
}

function credit(id: string, body: Json | string, headers: Record<string, string> = {}): Promise<Response> {
	return admin(`/keys/${id}/credits`, {
		method: "POST",
		headers,
		body: typeof body === "string" ? body : JSON.stringify(body),
	});
}

// Literals that are numbers in JSON but must never reach the ledger.
const HUGE = ["1e308", "1e999", "1000000.01", "9007199.254740993"];
const TINY = ["1e-10", "5e-10", "1e-300"];

describe("money fields", () => {
	describe("POST /admin/keys/{id}/credits amount_usd", () => {
		it.each([...HUGE, ...HUGE.map((l) => `-${l}`), ...TINY, ...TINY.map((l) => `-${l}`)])(
			"refuses %s with 400 and leaves the balance alone",
			async (literal) => {
				const { id } = await createKey({ balance_usd: 1 });
				await expect400(await credit(id, rawBody({}, "amount_usd", literal)), "amount_usd");
				expect(await balanceOf(id)).toBe(1);
			},
		);

		it("accepts the edges of the range: one nano-dollar and $1,000,000", async () => {
			const { id } = await createKey({ balance_usd: 0 });
			const small = await credit(id, { amount_usd: 1e-9 });
			expect(small.status).toBe(200);
			expect(await small.json()).toMatchObject({ balance_usd: 1e-9, applied: true });
			const big = await credit(id, { amount_usd: 1_000_000 });
			expect(big.status).toBe(200);
			expect(await big.json()).toMatchObject({ balance_usd: 1_000_000.000000001, applied: true });
			const back = await credit(id, { amount_usd: -1_000_000 });
			expect(back.status).toBe(200);
			expect(await back.json()).toMatchObject({ balance_usd: 1e-9, applied: true });
		});

		it("refuses a credit that would take the balance past 2^53 nano-dollars", async () => {
			const { id } = await createKey({ balance_usd: 0 });
			// Only the ledger can get this close to the ceiling: the API adds at most $1M a call.
			const near = Number.MAX_SAFE_INTEGER - 500_000_000_000_000;
			await ledgerFor(env, id).credit({ keyId: id, amountNanos: near, idempotencyKey: "test:near" });
			const json = await expect400(await credit(id, { amount_usd: 1_000_000 }), "amount_usd", "balance_too_large");
			expect(json.error.message).toMatch(/largest/);
			expect((await ledgerFor(env, id).info()).balanceNanos).toBe(near);
		});
	});

	describe("POST /admin/keys", () => {
		it.each([
			["balance_usd", "1e308"],
			["balance_usd", "1e999"],
			["balance_usd", "1000000.5"],
			["balance_usd", "1e-10"],
			["balance_usd", "-1e-300"],
			["spend_limit_usd", "1e-10"],
			["spend_limit_usd", "1e308"],
			["spend_limit_usd", "2000000"],
			["spend_limit_usd", "0"],
			["rpm", "2000000000"],
			["rpm", "9007199254740993"],
			["tpm", "1e12"],
			["tpm", "-1"],
			["max_tokens", "1000000001"],
			["max_tokens", "0"],
		])("refuses %s = %s with 400 naming it", async (param, literal) => {
			await expect400(await admin("/keys", { method: "POST", body: rawBody({ name: "m" }, param, literal) }), param);
		});

		it("accepts the largest values of the documented ranges", async () => {
			const res = await admin("/keys", {
				method: "POST",
				body: JSON.stringify({
					name: "edges",
					balance_usd: 1_000_000,
					spend_limit_usd: 1_000_000,
					rpm: 1_000_000_000,
					tpm: 1_000_000_000,
					max_tokens: 1_000_000_000,
				}),
			});
			expect(res.status).toBe(201);
			expect(await res.json()).toMatchObject({
				balance_usd: 1_000_000,
				spend_limit_usd: 1_000_000,
				rpm: 1_000_000_000,
				tpm: 1_000_000_000,
				max_tokens: 1_000_000_000,
			});
		});

		it("keeps a one-nano-dollar spend limit as a limit, never as 'no limit'", async () => {
			const res = await admin("/keys", { method: "POST", body: JSON.stringify({ name: "nano", spend_limit_usd: 1e-9 }) });
			expect(res.status).toBe(201);
			expect(await res.json()).toMatchObject({ spend_limit_usd: 1e-9 });
		});
	});

	describe("PATCH /admin/keys/{id}", () => {
		it.each([
			["spend_limit_usd", "1e-10"],
			["spend_limit_usd", "1e308"],
			["rpm", "1e10"],
			["tpm", "1e10"],
			["max_tokens", "1e10"],
		])("refuses %s = %s with 400 and changes nothing", async (param, literal) => {
			const { id } = await createKey({ name: "stable", spend_limit_usd: 3, rpm: 5, tpm: 500, max_tokens: 50 });
			await expect400(await admin(`/keys/${id}`, { method: "PATCH", body: rawBody({}, param, literal) }), param);
			expect(await (await admin(`/keys/${id}`)).json()).toMatchObject({ spend_limit_usd: 3, rpm: 5, tpm: 500, max_tokens: 50 });
		});

		it("refuses balance_usd: balances change only through credits", async () => {
			const { id } = await createKey();
			await expect400(await admin(`/keys/${id}`, { method: "PATCH", body: JSON.stringify({ balance_usd: 5 }) }), "balance_usd");
		});
	});

	describe("POST /v1/tokens", () => {
		it.each([
			["spend_limit_usd", "1e-10"],
			["spend_limit_usd", "1e308"],
			["spend_limit_usd", "1e999"],
			["spend_limit_usd", "1000001"],
			["rpm", "2e9"],
			["tpm", "2e9"],
			["max_tokens", "2e9"],
		])("refuses %s = %s with 400 naming it", async (param, literal) => {
			const parent = await createKey();
			const body = rawBody({ allowed_origins: [APP] }, param, literal);
			const res = await gw("/v1/tokens", {
				method: "POST",
				headers: { authorization: `Bearer ${parent.key}`, "content-type": "application/json" },
				body,
			});
			await expect400(res, param);
		});

		it("keeps a one-nano-dollar spend limit on a token", async () => {
			const parent = await createKey();
			const res = await mint(parent.key, { spend_limit_usd: 1e-9 });
			expect(res.status).toBe(201);
			expect(await res.json()).toMatchObject({ spend_limit_usd: 1e-9 });
		});
	});
});

describe("credits", () => {
	it("refuses to top up a temporary token, naming its parent, and funds nothing", async () => {
		const parent = await createKey({ balance_usd: 1 });
		const res = await mint(parent.key, {});
		const token = (await res.json()) as { id: string };
		const json = await expect400(await credit(token.id, { amount_usd: 5 }), "id");
		expect(json.error.message).toContain(parent.id);
		expect(json.error.message).toMatch(/parent key's balance/);
		expect((await ledgerFor(env, token.id).info()).balanceNanos).toBe(0);
		expect(await balanceOf(parent.id)).toBe(1);
	});

	it("refuses a debit below zero with 400 and keeps the balance", async () => {
		const { id } = await createKey({ balance_usd: 1 });
		const json = await expect400(await credit(id, { amount_usd: -1.000000001 }), "amount_usd", "balance_below_zero");
		expect(json.error.message).toMatch(/below zero/);
		expect(await balanceOf(id)).toBe(1);
		const exact = await credit(id, { amount_usd: -1 });
		expect(exact.status).toBe(200);
		expect(await exact.json()).toMatchObject({ balance_usd: 0, applied: true });
		await expect400(await credit(id, { amount_usd: -1e-9 }), "amount_usd", "balance_below_zero");
	});

	it("still answers a replayed Idempotency-Key with the first result", async () => {
		const { id } = await createKey({ balance_usd: 1 });
		const headers = { "idempotency-key": "topup-1" };
		expect(await (await credit(id, { amount_usd: 2 }, headers)).json()).toMatchObject({ balance_usd: 3, applied: true });
		const again = await credit(id, { amount_usd: 2 }, headers);
		expect(again.status).toBe(200);
		expect(await again.json()).toMatchObject({ balance_usd: 3, applied: false });
	});

	it("refuses an Idempotency-Key reused with another amount with 409 and changes nothing", async () => {
		const { id } = await createKey({ balance_usd: 1 });
		const headers = { "idempotency-key": "topup-reused" };
		expect((await credit(id, { amount_usd: 2 }, headers)).status).toBe(200);
		const res = await credit(id, { amount_usd: 5 }, headers);
		const json = (await res.json()) as ErrorBody;
		expect(res.status, JSON.stringify(json)).toBe(409);
		expect(json.error).toMatchObject({ type: "invalid_request_error", code: "idempotency_key_reused", param: null });
		expect(json.error.message).toMatch(/Idempotency-Key/);
		expect(await balanceOf(id)).toBe(3);
		// The same amount is still a replay.
		expect(await (await credit(id, { amount_usd: 2 }, headers)).json()).toMatchObject({ balance_usd: 3, applied: false });
	});
});

describe("GET /v1/key", () => {
	it("does not show the operator's metadata to the key holder", async () => {
		const k = await createKey({ name: "meta", metadata: { customer: "acme", plan: "internal-note" } });
		expect(await (await admin(`/keys/${k.id}`)).json()).toMatchObject({ metadata: { customer: "acme" } });
		const res = await gw("/v1/key", { headers: { authorization: `Bearer ${k.key}` } });
		expect(res.status).toBe(200);
		const text = await res.text();
		const body = JSON.parse(text) as Json;
		expect(body).not.toHaveProperty("metadata");
		expect(text).not.toContain("internal-note");
		expect(body).toMatchObject({ id: k.id, name: "meta", object: "api_key", balance_usd: 10, parent_key_id: null });
		expect(body.limits).toMatchObject({ rpm: null, allowed_models: null });
	});
});

describe("GET /admin/keys paging", () => {
	type Page = { data: Array<{ id: string; created_at: number }>; next_cursor: string | null };

	it("returns every key exactly once when many share a created_at millisecond", async () => {
		const ids = new Set<string>();
		for (let i = 0; i < 7; i++) ids.add((await createKey({ name: `same-ms-${i}` })).id);
		// Newer than anything else in this file, all in one millisecond.
		const sameMs = Date.now() + 86_400_000;
		for (const id of ids) await env.DB.prepare("UPDATE api_keys SET created_at = ? WHERE id = ?").bind(sameMs, id).run();

		const seen: string[] = [];
		let cursor: string | null = null;
		let pages = 0;
		do {
			const res = await admin(`/keys?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
			expect(res.status).toBe(200);
			const page = (await res.json()) as Page;
			seen.push(...page.data.map((k) => k.id));
			cursor = page.next_cursor;
			pages++;
		} while (cursor && pages < 100);
		expect(seen.filter((id) => ids.has(id)).sort()).toEqual([...ids].sort());
		expect(new Set(seen).size).toBe(seen.length);
		// Newest first: the seven same-millisecond keys lead, in descending id order.
		expect(seen.slice(0, 7)).toEqual([...ids].sort().reverse());
	});

	it.each([
		"garbage",
		"123",
		":key_x",
		"12x:key_a",
		"-5:key_a",
		"1e3:key_a",
		"99999999999999999999:key_a",
		"1:\u0000",
		"1:key a",
	])("refuses the malformed cursor %s with 400", async (cursor) => {
		await createKey();
		await expect400(await admin(`/keys?cursor=${encodeURIComponent(cursor)}`), "cursor");
	});
});

describe("GET /admin/usage paging", () => {
	it.each([
		"Infinity:x",
		"1e400:x",
		"-1:x",
		"1.5:x",
		"1e3:x",
		"NaN:x",
		"0x10:x",
		" 5:x",
		"99999999999999999999:x",
		"5:",
		"1:\u0000",
		"1:req_x\nreq_y",
		"1:req x",
		`1:${"r".repeat(200)}`,
		"5",
		":x",
		"garbage",
	])("refuses the malformed cursor %s with 400", async (cursor) => {
		await expect400(await admin(`/usage?cursor=${encodeURIComponent(cursor)}`), "cursor");
	});

	it("accepts a well-formed cursor", async () => {
		const res = await admin(`/usage?cursor=${encodeURIComponent(`${Date.now()}:req_x`)}`);
		expect(res.status).toBe(200);
	});

	it.each(["99999999999999999999", "1e400", "9999-12-31", "9000000000000"])("refuses since=%s with 400", async (since) => {
		await expect400(await admin(`/usage?since=${since}`), "since");
		await expect400(await admin(`/usage?until=${since}`), "until");
	});
});

describe("key names", () => {
	const BAD: Array<[string, string, string?]> = [
		["a NUL", "a\u0000b"],
		["a newline", "a\nb"],
		["a tab", "a\tb"],
		["DEL", "a\u007fb"],
		["a C1 control", "a\u0085b"],
		["a line separator", "a\u2028b"],
		// Refused when the body is read (http/lone-surrogate.ts), with the code of an invalid value.
		["a lone high surrogate", "a\ud800b", "invalid_value"],
		["a lone low surrogate", "\udfff", "invalid_value"],
	];

	it.each(BAD)("POST refuses a name with %s", async (_label, name, code) => {
		await expect400(await admin("/keys", { method: "POST", body: JSON.stringify({ name }) }), "name", code ?? null);
	});

	it.each(BAD)("PATCH refuses a name with %s and keeps the old one", async (_label, name, code) => {
		const { id } = await createKey({ name: "before" });
		await expect400(await admin(`/keys/${id}`, { method: "PATCH", body: JSON.stringify({ name }) }), "name", code ?? null);
		expect(((await (await admin(`/keys/${id}`)).json()) as Json).name).toBe("before");
	});

	it("keeps names with accents, CJK and emoji (surrogate pairs) intact", async () => {
		const name = "Café 東京 🚀 — prod";
		const { id } = await createKey({ name });
		expect(((await (await admin(`/keys/${id}`)).json()) as Json).name).toBe(name);
	});
});

describe("PATCH /admin/keys/{id} on a temporary token", () => {
	async function tokenOf(parentFields: Json = {}): Promise<{ parentId: string; id: string; expires_at: number }> {
		const parent = await createKey({ spend_limit_usd: 50, rpm: 10, ...parentFields });
		const res = await mint(parent.key, { ttl_seconds: 600, spend_limit_usd: 1 });
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
