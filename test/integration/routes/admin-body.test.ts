/**
 * How the admin API and POST /v1/tokens read a request body (http/json-body.ts: hono/body-limit,
 * @hono/zod-validator): JSON whatever the Content-Type, our own 400 for an empty, malformed or
 * too deeply nested body, 413 past 64 KiB (declared or streamed), and the key or caller checked
 * before the body, so those refusals do not depend on it.
 */

import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ledgerFor } from "../../../src/ledger/ledger-client";
import { APP, balanceOf, credit, expect400, mint, rawBody } from "../../support/admin-input";
import { admin, createKey, gw } from "../../support/gateway";
import { TEST_ADMIN_TOKEN } from "../../support/test-config";

type ErrorBody = { error: { message: string; type: string; param: string | null; code: string | null } };

const MALFORMED =
	"We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload.)";

/** An admin call with exactly these headers besides the token (no default Content-Type). */
function adminRaw(path: string, method: string, body: BodyInit | null, headers: Record<string, string> = {}): Promise<Response> {
	return gw(`/admin${path}`, { method, headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}`, ...headers }, body });
}

async function expectError(res: Response, status: number): Promise<ErrorBody["error"]> {
	const text = await res.text();
	expect(res.status, text).toBe(status);
	const body = JSON.parse(text) as ErrorBody;
	expect(Object.keys(body)).toEqual(["error"]);
	return body.error;
}

/** A body that streams (no content-length) `size` bytes of a JSON object. */
function streamedObject(size: number): ReadableStream<Uint8Array> {
	const enc = new TextEncoder();
	let sent = false;
	return new ReadableStream({
		pull(controller) {
			if (sent) return controller.close();
			controller.enqueue(enc.encode(`{"name":"${"x".repeat(size)}"}`));
			sent = true;
		},
	});
}

// Literals that are numbers in JSON but must never reach the ledger.
const HUGE = ["1e308", "1e999", "1000000.01", "9007199.254740993"];
const TINY = ["1e-10", "5e-10", "1e-300"];

describe("admin and token bodies", () => {
	it("reads the body as JSON whatever the Content-Type, or without one", async () => {
		for (const headers of [
			{},
			{ "content-type": "text/plain" },
			{ "content-type": "application/x-www-form-urlencoded" },
		] as Record<string, string>[]) {
			const res = await adminRaw("/keys", "POST", JSON.stringify({ name: "typed", rpm: 7 }), headers);
			expect(res.status, JSON.stringify(headers)).toBe(201);
			expect(await res.json()).toMatchObject({ name: "typed", rpm: 7 });
		}
	});

	it("applies a PATCH sent as curl -d sends it (form-urlencoded), instead of seeing an empty object", async () => {
		const { id } = await createKey({ name: "before" });
		const res = await adminRaw(`/keys/${id}`, "PATCH", JSON.stringify({ name: "after" }), {
			"content-type": "application/x-www-form-urlencoded",
		});
		expect(res.status).toBe(200);
		expect(await res.json()).toMatchObject({ id, name: "after" });
	});

	it("answers an empty or malformed body with our 400, whatever the Content-Type", async () => {
		const empty = await expectError(await adminRaw("/keys", "POST", ""), 400);
		expect(empty).toEqual({
			message: "The request body is empty; expected a JSON object.",
			type: "invalid_request_error",
			param: null,
			code: null,
		});
		for (const headers of [{ "content-type": "application/json" }, { "content-type": "text/plain" }]) {
			const bad = await expectError(await adminRaw("/keys", "POST", '{"name": "x",', headers), 400);
			expect(bad).toEqual({ message: MALFORMED, type: "invalid_request_error", param: null, code: null });
		}
	});

	it("refuses a field nested deeper than 64 levels with json_too_deep", async () => {
		let deep: unknown = "x";
		for (let i = 0; i < 70; i++) deep = { a: deep };
		const error = await expectError(
			await admin("/keys", { method: "POST", body: JSON.stringify({ name: "x", metadata: deep }) }),
			400,
		);
		expect(error.code).toBe("json_too_deep");
		expect(error.param?.startsWith("metadata.a.a")).toBe(true);
	});

	it("refuses a body over 64 KiB with 413, declared or streamed", async () => {
		const declared = await expectError(
			await admin("/keys", { method: "POST", body: JSON.stringify({ name: "x".repeat(70_000) }) }),
			413,
		);
		expect(declared).toEqual({
			message: "The request body is larger than the 65536 byte limit.",
			type: "invalid_request_error",
			param: null,
			code: "request_too_large",
		});
		const streamed = await expectError(
			await adminRaw("/keys", "POST", streamedObject(70_000), { "content-type": "application/json" }),
			413,
		);
		expect(streamed.code).toBe("request_too_large");
		// Under the limit, a streamed body is read as usual.
		expect((await adminRaw("/keys", "POST", streamedObject(100), { "content-type": "application/json" })).status).toBe(201);
	});

	it("looks the key up before reading the body: an unknown id is a 404, a token's credit names the id", async () => {
		const missing = await expectError(await admin("/keys/key_nope", { method: "PATCH", body: "{not json" }), 404);
		expect(missing.param).toBe("id");
		const { key } = await createKey();
		const minted = await gw("/v1/tokens", {
			method: "POST",
			headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
			body: JSON.stringify({ allowed_origins: ["https://app.example"] }),
		});
		const token = (await minted.json()) as { id: string };
		const credit = await expectError(await admin(`/keys/${token.id}/credits`, { method: "POST", body: "{not json" }), 400);
		expect(credit.param).toBe("id");
	});

	it("refuses a browser key's mint with 403 before reading the body", async () => {
		const { key } = await createKey({ allowed_origins: ["https://app.example"] });
		const res = await gw("/v1/tokens", {
			method: "POST",
			headers: { authorization: `Bearer ${key}`, origin: "https://app.example", "content-type": "application/json" },
			body: "{not json",
		});
		const error = await expectError(res, 403);
		expect(error.message).toContain("server-side keys");
	});
});

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
