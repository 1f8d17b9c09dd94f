/** The ledger's own guards: the n-choice reserve, hold lifetimes, and credits that keep a balance in range. */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { HOLD_TTL_MS } from "../../src/ledger/durable/key-ledger";
import { ledger } from "../support/ledger";

async function funded(balance: number) {
	const keyId = `key_lh_${crypto.randomUUID()}`;
	const stub = ledger(keyId);
	if (balance) await stub.credit({ keyId, amountNanos: balance, idempotencyKey: "initial" });
	return { keyId, stub };
}

describe("KeyLedger reserve (n > 1)", () => {
	it("admits only when the available balance covers the reserve; no reserve is admitted as before", async () => {
		const { keyId, stub } = await funded(1_000);
		expect(await stub.authorize({ keyId, requestId: "a", holdNanos: 5_000, reserveNanos: 1_001 })).toMatchObject({
			ok: false,
			availableNanos: 1_000,
		});
		expect(await stub.authorize({ keyId, requestId: "b", holdNanos: 5_000, reserveNanos: 1_000 })).toMatchObject({ ok: true });
		// Available is now negative: nothing more, reserve or not.
		expect(await stub.authorize({ keyId, requestId: "c", holdNanos: 1 })).toMatchObject({ ok: false });
	});

	it("checks a spend cap's headroom against the reserve", async () => {
		const { keyId, stub } = await funded(1_000_000);
		const scopes = [{ scope: keyId, spendLimitNanos: 10_000 }];
		expect(await stub.authorize({ keyId, requestId: "a", holdNanos: 1, scopes, reserveNanos: 10_001 })).toMatchObject({
			ok: false,
			refused: "spend_limit",
		});
		expect(await stub.authorize({ keyId, requestId: "b", holdNanos: 1, scopes, reserveNanos: 9_999 })).toMatchObject({
			ok: true,
		});
	});
});

describe("KeyLedger hold lifetime", () => {
	it("keeps a hold for its own ttl, and a replay extends it from then", async () => {
		const { keyId, stub } = await funded(1_000_000);
		// Real time: the ledger sets its alarm for the expiry, and an alarm in the past would fire at once.
		const t0 = Date.now();
		const ttl = 60 * 60 * 1000;
		await stub.authorize({ keyId, requestId: "queued", holdNanos: 100, ttlMs: ttl, now: t0 });
		expect(await stub.expireHolds(t0 + HOLD_TTL_MS + 1)).toBe(0);
		// The run picks the hold up 50 minutes later: it lives on for another TTL from then.
		const t1 = t0 + 50 * 60 * 1000;
		expect(await stub.authorize({ keyId, requestId: "queued", holdNanos: 100, now: t1 })).toMatchObject({
			ok: true,
			holdNanos: 100,
		});
		expect(await stub.expireHolds(t0 + ttl + 1)).toBe(0);
		expect(await stub.expireHolds(t1 + HOLD_TTL_MS)).toBe(1);
	});

	it("adds the expiry column to a ledger created before it existed, old holds keeping the default ttl", async () => {
		const { keyId, stub } = await funded(1_000);
		await runInDurableObject(stub, (_i, state) => {
			const cols = state.storage.sql.exec<{ name: string }>("SELECT name FROM pragma_table_info('holds')").toArray();
			expect(cols.map((c) => c.name)).toContain("expires_at");
			state.storage.sql.exec("INSERT INTO holds (request_id, amount, created_at) VALUES ('legacy', 10, 5000)");
		});
		expect(await stub.expireHolds(5000 + HOLD_TTL_MS - 1)).toBe(0);
		expect(await stub.expireHolds(5000 + HOLD_TTL_MS)).toBe(1);
		expect(keyId).toBeTruthy();
	});
});

describe("KeyLedger credits keep the balance in range", () => {
	it("refuses a debit that would take the balance below zero, applies one that does not", async () => {
		const { keyId, stub } = await funded(1_000);
		expect(await stub.credit({ keyId, amountNanos: -1_001, idempotencyKey: "d1" })).toEqual({
			balanceNanos: 1_000,
			applied: false,
			refused: "below_zero",
		});
		expect(await stub.credit({ keyId, amountNanos: -1_000, idempotencyKey: "d2" })).toEqual({ balanceNanos: 0, applied: true });
	});

	it("refuses a credit that would pass 2^53 nano-dollars", async () => {
		const { keyId, stub } = await funded(1_000);
		const r = await stub.credit({ keyId, amountNanos: Number.MAX_SAFE_INTEGER, idempotencyKey: "big" });
		expect(r).toMatchObject({ applied: false, refused: "too_large", balanceNanos: 1_000 });
		expect((await stub.info()).balanceNanos).toBe(1_000);
	});
});
