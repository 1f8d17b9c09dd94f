/**
 * The KeyLedger Durable Object, called directly over RPC: holds, settlement idempotency,
 * races, expiry and credits, all in exact integer nano-dollars.
 */
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { HOLD_TTL_MS, type SettleInput } from "../../../src/ledger/durable/key-ledger";
import type { UsageRecordInput } from "../../../src/ledger/durable/usage-flush";
import { at } from "../../support/clock";
import { flushUsage, freshKeyId, ledger } from "../../support/ledger";

function record(keyId: string, fields: Partial<UsageRecordInput> = {}): UsageRecordInput {
	return {
		key_id: keyId,
		model: "test/ok",
		node: "http://node.test/v1",
		prompt_tokens: 10,
		completion_tokens: 20,
		status: "completed",
		estimated: false,
		...fields,
	};
}

function settleInput(keyId: string, requestId: string, costNanos: number, extra: Partial<SettleInput> = {}): SettleInput {
	return { requestId, costNanos, record: record(keyId), ...extra };
}

/** A ledger with `balance` nano-dollars credited. */
async function funded(label: string, balance: number) {
	const keyId = freshKeyId("ledger", label);
	const stub = ledger(keyId);
	if (balance !== 0) {
		const r = await stub.credit({ keyId, amountNanos: balance, idempotencyKey: "initial" });
		expect(r).toEqual({ balanceNanos: balance, applied: true });
	}
	return { keyId, stub };
}

async function usageRow(requestId: string) {
	return env.DB.prepare("SELECT * FROM usage_records WHERE request_id = ?").bind(requestId).all();
}

describe("KeyLedger: authorize and settle", () => {
	it("places a hold, then settles the real cost exactly and releases the hold", async () => {
		const { keyId, stub } = await funded("basic", 1_000_000);

		const auth = await stub.authorize({ payerKeyId: keyId, requestId: "r1", holdNanos: 300_000 });
		expect(auth).toMatchObject({ ok: true, availableNanos: 700_000, holdNanos: 300_000, balanceNanos: 1_000_000 });
		expect(await stub.info()).toEqual({
			keyId,
			balanceNanos: 1_000_000,
			spentNanos: 0,
			heldNanos: 300_000,
			reservedNanos: 0,
			openHolds: 1,
			outboxSize: 0,
		});

		const s = await stub.settle(settleInput(keyId, "r1", 123_456));
		expect(s).toEqual({ requestId: "r1", costNanos: 123_456, balanceNanos: 876_544, applied: true });
		const info = await stub.info();
		expect(info.balanceNanos).toBe(876_544);
		expect(info.spentNanos).toBe(123_456);
		expect(info.heldNanos).toBe(0);
		expect(info.openHolds).toBe(0);
	});

	it("rounds fractional amounts to integer nano-dollars and never debits a negative cost", async () => {
		const { keyId, stub } = await funded("rounding", 1_000);
		const a = await stub.authorize({ payerKeyId: keyId, requestId: "frac", holdNanos: 10.6 });
		expect(a).toMatchObject({ ok: true, availableNanos: 989, holdNanos: 11 });
		expect(await stub.settle(settleInput(keyId, "frac", 7.4))).toMatchObject({ costNanos: 7, balanceNanos: 993 });
		expect(await stub.settle(settleInput(keyId, "neg", -50))).toMatchObject({ costNanos: 0, balanceNanos: 993 });
		expect((await stub.info()).spentNanos).toBe(7);
	});

	it("a repeated authorize for the same request places one hold", async () => {
		const { keyId, stub } = await funded("reauth", 1_000_000);
		const a = await stub.authorize({ payerKeyId: keyId, requestId: "same", holdNanos: 400_000 });
		const b = await stub.authorize({ payerKeyId: keyId, requestId: "same", holdNanos: 400_000 });
		expect(a.ok && b.ok).toBe(true);
		expect(b).toMatchObject({ ok: true, holdNanos: 400_000 });
		const info = await stub.info();
		expect(info.openHolds).toBe(1);
		expect(info.heldNanos).toBe(400_000);
	});

	it("an authorize replayed after its request settled does not open a new hold", async () => {
		const { keyId, stub } = await funded("reauth-after-settle", 1_000_000);
		await stub.authorize({ payerKeyId: keyId, requestId: "done", holdNanos: 400_000 });
		await stub.settle(settleInput(keyId, "done", 5_000));
		// The request is finished: a late duplicate authorize must not strand 400_000 of the balance
		// in a hold that no settle can ever release (a replayed settle is a no-op).
		await stub.authorize({ payerKeyId: keyId, requestId: "done", holdNanos: 400_000 });
		await stub.settle(settleInput(keyId, "done", 5_000));
		const info = await stub.info();
		expect(info.balanceNanos).toBe(995_000);
		expect(info.openHolds).toBe(0);
		expect(info.heldNanos).toBe(0);
	});

	it("refuses when balance minus holds is not positive, with available and required amounts", async () => {
		const { keyId, stub } = await funded("refuse", 500_000);
		expect(await stub.authorize({ payerKeyId: keyId, requestId: "a", holdNanos: 500_000 })).toMatchObject({
			ok: true,
			availableNanos: 0,
			holdNanos: 500_000,
		});
		// Exactly zero available is not positive.
		expect(await stub.authorize({ payerKeyId: keyId, requestId: "b", holdNanos: 1 })).toEqual({
			ok: false,
			availableNanos: 0,
			requiredNanos: 1,
		});
		expect((await stub.info()).openHolds).toBe(1);

		const empty = await funded("empty", 0);
		expect(await empty.stub.authorize({ payerKeyId: empty.keyId, requestId: "x", holdNanos: 42 })).toEqual({
			ok: false,
			availableNanos: 0,
			requiredNanos: 42,
		});
		expect((await empty.stub.info()).openHolds).toBe(0);
	});

	it("goes negative by at most one request's hold", async () => {
		const { keyId, stub } = await funded("negative", 100);
		// 100 available is positive, so a request that may cost 2_000 may start...
		expect(await stub.authorize({ payerKeyId: keyId, requestId: "big", holdNanos: 2_000 })).toMatchObject({
			ok: true,
			availableNanos: -1_900,
			holdNanos: 2_000,
		});
		// ...but nothing else may start while it runs.
		expect(await stub.authorize({ payerKeyId: keyId, requestId: "next", holdNanos: 1 })).toMatchObject({
			ok: false,
			availableNanos: -1_900,
		});
		const s = await stub.settle(settleInput(keyId, "big", 2_000));
		expect(s.balanceNanos).toBe(-1_900);
		expect(s.balanceNanos).toBeGreaterThanOrEqual(-2_000);
		expect(await stub.authorize({ payerKeyId: keyId, requestId: "after", holdNanos: 1 })).toMatchObject({
			ok: false,
			availableNanos: -1_900,
			requiredNanos: 1,
		});
	});

	it("remembers its key id", async () => {
		const keyId = freshKeyId("ledger", "remember");
		const stub = ledger(keyId);
		await stub.authorize({ payerKeyId: keyId, requestId: "r", holdNanos: 1 });
		expect((await stub.info()).keyId).toBe(keyId);
	});
});

describe("KeyLedger: settlement happens once per request id", () => {
	it("a replayed settle debits nothing and returns the first result", async () => {
		const { keyId, stub } = await funded("replay", 1_000_000);
		await stub.authorize({ payerKeyId: keyId, requestId: "r", holdNanos: 200_000 });
		const first = await stub.settle(settleInput(keyId, "r", 9_000));
		expect(first).toEqual({ requestId: "r", costNanos: 9_000, balanceNanos: 991_000, applied: true });

		// Same id, even with a different cost: nothing changes.
		const again = await stub.settle(settleInput(keyId, "r", 9_000));
		const different = await stub.settle(settleInput(keyId, "r", 77_777));
		expect(again).toEqual({ requestId: "r", costNanos: 9_000, balanceNanos: 991_000, applied: false });
		expect(different).toEqual({ requestId: "r", costNanos: 9_000, balanceNanos: 991_000, applied: false });

		// A fresh stub (as the gateway makes after an error) sees the same.
		const replay = await ledger(keyId).settle(settleInput(keyId, "r", 9_000));
		expect(replay.applied).toBe(false);

		const info = await stub.info();
		expect(info.balanceNanos).toBe(991_000);
		expect(info.spentNanos).toBe(9_000);
		expect(info.openHolds).toBe(0);

		await flushUsage(stub);
		const rows = await usageRow("r");
		expect(rows.results).toHaveLength(1);
		expect(rows.results[0]).toMatchObject({ request_id: "r", key_id: keyId, cost_nanos: 9_000 });
	});

	it("two settles racing (Promise.all) debit once", async () => {
		const { keyId, stub } = await funded("race2", 1_000_000);
		await stub.authorize({ payerKeyId: keyId, requestId: "race", holdNanos: 200_000 });
		const [a, b] = await Promise.all([
			ledger(keyId).settle(settleInput(keyId, "race", 50_000)),
			ledger(keyId).settle(settleInput(keyId, "race", 50_000)),
		]);
		expect([a.applied, b.applied].filter(Boolean)).toHaveLength(1);
		expect(a.balanceNanos).toBe(950_000);
		expect(b.balanceNanos).toBe(950_000);
		expect(a.costNanos).toBe(50_000);
		expect(b.costNanos).toBe(50_000);
		const info = await stub.info();
		expect(info).toMatchObject({ balanceNanos: 950_000, spentNanos: 50_000, heldNanos: 0, openHolds: 0 });
	});

	it("many settles racing for many requests: each debited exactly once", async () => {
		const { keyId, stub } = await funded("race-many", 10_000_000);
		const ids = Array.from({ length: 20 }, (_, i) => `m${i}`);
		await Promise.all(ids.map((id) => stub.authorize({ payerKeyId: keyId, requestId: id, holdNanos: 100_000 })));
		expect((await stub.info()).openHolds).toBe(20);
		// Every request settled five times concurrently, with cost (i + 1) * 1_000.
		const results = await Promise.all(
			ids.flatMap((id, i) => Array.from({ length: 5 }, () => ledger(keyId).settle(settleInput(keyId, id, (i + 1) * 1_000)))),
		);
		expect(results.filter((r) => r.applied)).toHaveLength(20);
		const expectedSpent = ids.reduce((sum, _id, i) => sum + (i + 1) * 1_000, 0); // 210_000
		expect(expectedSpent).toBe(210_000);
		const info = await stub.info();
		expect(info).toMatchObject({ balanceNanos: 9_790_000, spentNanos: 210_000, heldNanos: 0, openHolds: 0 });

		await flushUsage(stub);
		const d1 = await env.DB.prepare("SELECT COUNT(*) AS n, SUM(cost_nanos) AS total FROM usage_records WHERE key_id = ?")
			.bind(keyId)
			.first<{ n: number; total: number }>();
		expect(d1).toEqual({ n: 20, total: 210_000 });
		expect((await stub.info()).outboxSize).toBe(0);
	});
});

describe("KeyLedger: hold expiry", () => {
	it("expireHolds voids an expired hold exactly once and leaves the balance alone", async () => {
		const { keyId, stub } = await funded("expire-now", 1_000_000);
		const t0 = Date.now();
		await at(t0, () => stub.authorize({ payerKeyId: keyId, requestId: "old", holdNanos: 300_000 }));
		await at(t0 + 60_000, () => stub.authorize({ payerKeyId: keyId, requestId: "young", holdNanos: 100_000 }));

		expect(await at(t0 + HOLD_TTL_MS - 1, () => stub.expireHolds())).toBe(0);
		expect(await at(t0 + HOLD_TTL_MS, () => stub.expireHolds())).toBe(1);
		expect(await at(t0 + HOLD_TTL_MS, () => stub.expireHolds())).toBe(0);
		expect(await at(t0 + HOLD_TTL_MS + 1_000, () => stub.expireHolds())).toBe(0);

		let info = await stub.info();
		expect(info).toMatchObject({ balanceNanos: 1_000_000, spentNanos: 0, heldNanos: 100_000, openHolds: 1 });

		expect(await at(t0 + 60_000 + HOLD_TTL_MS, () => stub.expireHolds())).toBe(1);
		info = await stub.info();
		expect(info).toMatchObject({ balanceNanos: 1_000_000, heldNanos: 0, openHolds: 0 });

		// A settle that arrives after its hold expired still debits, once.
		expect(await stub.settle(settleInput(keyId, "old", 10_000))).toMatchObject({ applied: true, balanceNanos: 990_000 });
		expect(await stub.settle(settleInput(keyId, "old", 10_000))).toMatchObject({ applied: false, balanceNanos: 990_000 });
		expect((await stub.info()).openHolds).toBe(0);
	});

	it("the alarm voids an expired hold once", async () => {
		const { keyId, stub } = await funded("expire-alarm", 1_000_000);
		await stub.authorize({ payerKeyId: keyId, requestId: "stale", holdNanos: 250_000 });
		await stub.authorize({ payerKeyId: keyId, requestId: "fresh", holdNanos: 50_000 });
		// Age the first hold past its TTL inside the object.
		await runInDurableObject(stub, (_instance, state) => {
			state.storage.sql.exec(
				"UPDATE holds SET created_at = ?1, expires_at = ?1 + ?2 WHERE request_id = 'stale'",
				Date.now() - HOLD_TTL_MS - 1_000,
				HOLD_TTL_MS,
			);
		});
		expect(await runDurableObjectAlarm(stub)).toBe(true);
		let info = await stub.info();
		expect(info).toMatchObject({ balanceNanos: 1_000_000, spentNanos: 0, heldNanos: 50_000, openHolds: 1 });
		// The alarm is rescheduled for the remaining hold; running it again voids nothing more.
		await runDurableObjectAlarm(stub);
		info = await stub.info();
		expect(info).toMatchObject({ balanceNanos: 1_000_000, heldNanos: 50_000, openHolds: 1 });
		expect(await stub.expireHolds()).toBe(0);
		// The freed money is available again.
		expect(await stub.authorize({ payerKeyId: keyId, requestId: "next", holdNanos: 1 })).toMatchObject({
			ok: true,
			availableNanos: 1_000_000 - 50_000 - 1,
		});
	});

	it("an open hold keeps an alarm scheduled so it can expire", async () => {
		const { keyId, stub } = await funded("expire-scheduled", 1_000_000);
		const before = Date.now();
		await stub.authorize({ payerKeyId: keyId, requestId: "h", holdNanos: 10 });
		const alarm = await runInDurableObject(stub, (_i, state) => state.storage.getAlarm());
		expect(alarm).not.toBeNull();
		expect(alarm as number).toBeGreaterThanOrEqual(before + HOLD_TTL_MS - 1_000);
		expect(alarm as number).toBeLessThanOrEqual(Date.now() + HOLD_TTL_MS + 1_000);
	});
});

describe("KeyLedger: credits", () => {
	it("credits are idempotent by key, and may be negative", async () => {
		const keyId = freshKeyId("ledger", "credit");
		const stub = ledger(keyId);
		expect(await stub.credit({ keyId, amountNanos: 1_500_000_000, idempotencyKey: "c1" })).toEqual({
			balanceNanos: 1_500_000_000,
			applied: true,
		});
		expect(await stub.credit({ keyId, amountNanos: 1_500_000_000, idempotencyKey: "c1" })).toEqual({
			balanceNanos: 1_500_000_000,
			applied: false,
		});
		const [x, y] = await Promise.all([
			ledger(keyId).credit({ keyId, amountNanos: 7, idempotencyKey: "c2" }),
			ledger(keyId).credit({ keyId, amountNanos: 7, idempotencyKey: "c2" }),
		]);
		expect([x.applied, y.applied].filter(Boolean)).toHaveLength(1);
		expect(x.balanceNanos).toBe(1_500_000_007);
		expect(y.balanceNanos).toBe(1_500_000_007);
		expect(await stub.credit({ keyId, amountNanos: -500_000_000, idempotencyKey: "c3" })).toEqual({
			balanceNanos: 1_000_000_007,
			applied: true,
		});
		expect(await stub.info()).toMatchObject({ keyId, balanceNanos: 1_000_000_007, spentNanos: 0 });
	});

	it("a credit revives a ledger that refused", async () => {
		const { keyId, stub } = await funded("revive", 1_000);
		await stub.authorize({ payerKeyId: keyId, requestId: "a", holdNanos: 5_000 });
		await stub.settle(settleInput(keyId, "a", 1_000));
		expect(await stub.authorize({ payerKeyId: keyId, requestId: "b", holdNanos: 5_000 })).toMatchObject({
			ok: false,
			availableNanos: 0,
		});
		await stub.credit({ keyId, amountNanos: 10_000, idempotencyKey: "top" });
		expect(await stub.authorize({ payerKeyId: keyId, requestId: "b", holdNanos: 5_000 })).toMatchObject({
			ok: true,
			availableNanos: 5_000,
			holdNanos: 5_000,
		});
	});
});

describe("KeyLedger: usage outbox", () => {
	it("the alarm flushes a settled record to D1 with its exact fields", async () => {
		const { keyId, stub } = await funded("outbox", 1_000_000);
		await stub.authorize({ payerKeyId: keyId, requestId: "u1", holdNanos: 100_000 });
		const createdAt = Date.now() - 5_000;
		await stub.settle({
			requestId: "u1",
			costNanos: 12_345,
			record: record(keyId, {
				prompt_tokens: 345,
				completion_tokens: 6000,
				estimated: true,
				search_count: 2,
				created_at: createdAt,
			}),
		});
		expect((await stub.info()).outboxSize).toBe(1);
		await flushUsage(stub);
		const rows = (await usageRow("u1")).results;
		expect(rows).toEqual([
			{
				request_id: "u1",
				key_id: keyId,
				model: "test/ok",
				requested_model: null,
				node: "http://node.test/v1",
				prompt_tokens: 345,
				completion_tokens: 6000,
				cost_nanos: 12_345,
				status: "completed",
				estimated: 1,
				search_count: 2,
				created_at: createdAt,
				flush_id: expect.any(Number),
				// No lane, cached tokens, repairs, end user or batch on this hand-made record.
				lane: null,
				cached_tokens: 0,
				tool_calls_repaired: 0,
				end_user: null,
				batch_id: null,
				custom_id: null,
			},
		]);
		expect((await stub.info()).outboxSize).toBe(0);
	});
});

describe("KeyLedger reserve (n > 1)", () => {
	it("admits only when the available balance covers the reserve; no reserve is admitted as before", async () => {
		const { keyId, stub } = await funded("guard", 1_000);
		expect(await stub.authorize({ payerKeyId: keyId, requestId: "a", holdNanos: 5_000, reserveNanos: 1_001 })).toMatchObject({
			ok: false,
			availableNanos: 1_000,
		});
		expect(await stub.authorize({ payerKeyId: keyId, requestId: "b", holdNanos: 5_000, reserveNanos: 1_000 })).toMatchObject({
			ok: true,
		});
		// Available is now negative: nothing more, reserve or not.
		expect(await stub.authorize({ payerKeyId: keyId, requestId: "c", holdNanos: 1 })).toMatchObject({ ok: false });
	});

	it("checks a spend cap's headroom against the reserve", async () => {
		const { keyId, stub } = await funded("guard", 1_000_000);
		const scopes = [{ scope: keyId, spendLimitNanos: 10_000 }];
		expect(await stub.authorize({ payerKeyId: keyId, requestId: "a", holdNanos: 1, scopes, reserveNanos: 10_001 })).toMatchObject(
			{
				ok: false,
				refused: "spend_limit",
			},
		);
		expect(await stub.authorize({ payerKeyId: keyId, requestId: "b", holdNanos: 1, scopes, reserveNanos: 9_999 })).toMatchObject({
			ok: true,
		});
	});
});

describe("KeyLedger hold lifetime", () => {
	it("keeps a hold for its own ttl, and a replay extends it from then", async () => {
		const { keyId, stub } = await funded("guard", 1_000_000);
		// Real time: the ledger sets its alarm for the expiry, and an alarm in the past would fire at once.
		const t0 = Date.now();
		const ttl = 60 * 60 * 1000;
		await at(t0, () => stub.authorize({ payerKeyId: keyId, requestId: "queued", holdNanos: 100, ttlMs: ttl }));
		expect(await at(t0 + HOLD_TTL_MS + 1, () => stub.expireHolds())).toBe(0);
		// The run picks the hold up 50 minutes later: it lives on for another TTL from then.
		const t1 = t0 + 50 * 60 * 1000;
		expect(await at(t1, () => stub.authorize({ payerKeyId: keyId, requestId: "queued", holdNanos: 100 }))).toMatchObject({
			ok: true,
			holdNanos: 100,
		});
		expect(await at(t0 + ttl + 1, () => stub.expireHolds())).toBe(0);
		expect(await at(t1 + HOLD_TTL_MS, () => stub.expireHolds())).toBe(1);
	});

	it("adds the expiry column to a ledger created before it existed, old holds keeping the default ttl", async () => {
		const { keyId, stub } = await funded("guard", 1_000);
		await runInDurableObject(stub, (_i, state) => {
			const cols = state.storage.sql.exec<{ name: string }>("SELECT name FROM pragma_table_info('holds')").toArray();
			expect(cols.map((c) => c.name)).toContain("expires_at");
			state.storage.sql.exec("INSERT INTO holds (request_id, amount, created_at) VALUES ('legacy', 10, 5000)");
		});
		expect(await at(5000 + HOLD_TTL_MS - 1, () => stub.expireHolds())).toBe(0);
		expect(await at(5000 + HOLD_TTL_MS, () => stub.expireHolds())).toBe(1);
		expect(keyId).toBeTruthy();
	});
});

describe("KeyLedger credits keep the balance in range", () => {
	it("refuses a debit that would take the balance below zero, applies one that does not", async () => {
		const { keyId, stub } = await funded("guard", 1_000);
		expect(await stub.credit({ keyId, amountNanos: -1_001, idempotencyKey: "d1" })).toEqual({
			balanceNanos: 1_000,
			applied: false,
			refused: "below_zero",
		});
		expect(await stub.credit({ keyId, amountNanos: -1_000, idempotencyKey: "d2" })).toEqual({ balanceNanos: 0, applied: true });
	});

	it("refuses a credit that would pass 2^53 nano-dollars", async () => {
		const { keyId, stub } = await funded("guard", 1_000);
		const r = await stub.credit({ keyId, amountNanos: Number.MAX_SAFE_INTEGER, idempotencyKey: "big" });
		expect(r).toMatchObject({ applied: false, refused: "too_large", balanceNanos: 1_000 });
		expect((await stub.info()).balanceNanos).toBe(1_000);
	});
});
