/**
 * Bounds on what one request may cost: an embeddings batch is held and reserved in full like legacy
 * completions' prompts (balance and every spend cap), and the ledger refuses any amount that is not
 * a finite safe integer whatever it is sent. Test pricing of test/embed: $1/Mtok in (1,000 nano$/token),
 * context 512 tokens.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { KeyLedger } from "../../../src/ledger/durable/key-ledger";
import { createKey, gw } from "../../support/gateway";
import { expectBooks, freshKeyId, ledger, record } from "../../support/ledger";

type ErrorBody = { error: { message: string; param: string | null; code: string | null } };

const APP = "https://app.example";

function embed(key: string, input: string[], headers: Record<string, string> = {}): Promise<Response> {
	return gw("/v1/embeddings", {
		method: "POST",
		headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
		body: JSON.stringify({ model: "test/embed", input }),
	});
}

/** Inputs of 400 characters: each may bill 416 tokens (a token a character, plus 16), 416,000 nano$. */
const INPUT_NANOS = 416_000;
const batch = (n: number) => Array.from({ length: n }, (_, i) => `${i} ${"x".repeat(398 - String(i).length)}`);

describe("an embeddings batch", () => {
	it("is refused when the balance cannot cover every input but the largest", async () => {
		// $0.001: two inputs' worth and a bit.
		const k = await createKey({ balance_usd: 0.001 });
		const refused = await embed(k.key, batch(2048));
		expect(refused.status).toBe(402);
		expect(((await refused.json()) as ErrorBody).error.code).toBe("insufficient_balance");
		// Three inputs: two reserved beyond the first, 832,000 ≤ 1,000,000 → admitted.
		const three = await embed(k.key, batch(3));
		expect(three.status).toBe(200);
		await three.json();
		// Overspend stays within one input's worth whatever was admitted.
		const { info } = await expectBooks(k.id, 1_000_000);
		expect(info.balanceNanos).toBeGreaterThanOrEqual(-INPUT_NANOS);
	});

	it("is refused by a key's spend cap that cannot cover it", async () => {
		const k = await createKey({ balance_usd: 10, spend_limit_usd: 0.001 });
		const refused = await embed(k.key, batch(2048));
		expect(refused.status).toBe(403);
		expect((await embed(k.key, batch(2))).status).toBe(200);
		await expectBooks(k.id, 10_000_000_000);
	});

	it("is refused by a token's spend cap, and by its parent's", async () => {
		const parent = await createKey({ balance_usd: 10, spend_limit_usd: 0.01 });
		const mint = await gw("/v1/tokens", {
			method: "POST",
			headers: { authorization: `Bearer ${parent.key}`, "content-type": "application/json" },
			body: JSON.stringify({ allowed_origins: [APP], spend_limit_usd: 0.001 }),
		});
		expect(mint.status).toBe(201);
		const { token } = (await mint.json()) as { token: string };
		const fromApp = { origin: APP };
		// The token's $0.001 cap: refused.
		expect((await embed(token, batch(64), fromApp)).status).toBe(403);
		expect((await embed(token, batch(2), fromApp)).status).toBe(200);
		// The parent's $0.01 cap: 64 inputs (26.6 million nano$) are refused to the parent itself.
		expect((await embed(parent.key, batch(64))).status).toBe(403);
		await expectBooks(parent.id, 10_000_000_000);
	});
});

/** A ledger method called inside its object (a refusal thrown over RPC would surface as an uncaught error in workerd). */
function inLedger<T>(stub: DurableObjectStub<KeyLedger>, fn: (l: KeyLedger) => T): Promise<T> {
	return runInDurableObject(stub, async (l: KeyLedger) => fn(l));
}

describe("the ledger refuses amounts that are not safe integers", () => {
	const bad = [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 1e300, 2 ** 53];

	it("refuses a hold, reserve or settlement of such an amount and keeps its state", async () => {
		const keyId = freshKeyId("bounds", "ledger");
		const stub = ledger(keyId);
		await stub.credit({ keyId, amountNanos: 1_000_000, idempotencyKey: "initial" });
		const before = await stub.info();
		for (const v of bad) {
			await expect(inLedger(stub, (l) => l.authorize({ payerKeyId: keyId, requestId: `h-${v}`, holdNanos: v }))).rejects.toThrow(
				/holdNanos/,
			);
			const reserve = inLedger(stub, (l) =>
				l.authorize({ payerKeyId: keyId, requestId: `r-${v}`, holdNanos: 1, reserveNanos: v }),
			);
			await expect(reserve).rejects.toThrow(/reserveNanos/);
			const tokens = inLedger(stub, (l) => l.authorize({ payerKeyId: keyId, requestId: `t-${v}`, holdNanos: 1, tokens: v }));
			await expect(tokens).rejects.toThrow(/tokens/);
		}
		expect(await stub.info()).toEqual(before);

		// A settlement of a hold placed properly: a bad cost is refused, the hold stays for a proper one.
		expect(await stub.authorize({ payerKeyId: keyId, requestId: "ok", holdNanos: 500 })).toMatchObject({ ok: true });
		const held = await stub.info();
		for (const v of bad) {
			const settle = inLedger(stub, (l) => l.settle({ requestId: "ok", costNanos: v, record: record(keyId) }));
			await expect(settle).rejects.toThrow(/costNanos/);
		}
		const answers = await stub.settleMany([{ requestId: "ok", costNanos: Number.NaN, record: record(keyId) }]);
		expect(answers[0]).toMatchObject({ failed: expect.stringMatching(/costNanos/) });
		expect(await stub.info()).toEqual(held);
		expect(await stub.settle({ requestId: "ok", costNanos: 400, record: record(keyId) })).toMatchObject({
			applied: true,
			balanceNanos: 1_000_000 - 400,
		});
		await expectBooks(keyId, 1_000_000);
	});

	it("refuses a credit or grant of such an amount and keeps the balance a number", async () => {
		const keyId = freshKeyId("bounds", "credit");
		const stub = ledger(keyId);
		await stub.credit({ keyId, amountNanos: 1_000_000, idempotencyKey: "initial" });
		for (const v of bad) {
			const credit = inLedger(stub, (l) => l.credit({ keyId, amountNanos: v, idempotencyKey: `c-${v}` }));
			await expect(credit).rejects.toThrow(/amountNanos/);
			const grant = {
				payerKeyId: keyId,
				allowanceId: `a-${v}`,
				holdNanos: v,
				wantNanos: 10,
				ttlMs: 1000,
				minHeadroom: 2,
				extend: false,
			};
			await expect(inLedger(stub, (l) => l.grant(grant))).rejects.toThrow(/holdNanos/);
		}
		expect(await stub.info()).toMatchObject({ balanceNanos: 1_000_000, heldNanos: 0 });
		// Still tops up as before.
		expect(await stub.credit({ keyId, amountNanos: 5, idempotencyKey: "more" })).toMatchObject({ balanceNanos: 1_000_005 });
	});

	it("refuses a settlement larger than any hold can be", async () => {
		const keyId = freshKeyId("bounds", "range");
		const stub = ledger(keyId);
		await stub.credit({ keyId, amountNanos: 1_000, idempotencyKey: "initial" });
		expect(await stub.authorize({ payerKeyId: keyId, requestId: "big", holdNanos: 1 })).toMatchObject({ ok: true });
		const settle = inLedger(stub, (l) =>
			l.settle({ requestId: "big", costNanos: Number.MAX_SAFE_INTEGER, record: record(keyId) }),
		);
		await expect(settle).rejects.toThrow(/costNanos/);
		expect(await stub.info()).toMatchObject({ balanceNanos: 1_000, heldNanos: 1, openHolds: 1 });
	});
});
