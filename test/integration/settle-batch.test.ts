/**
 * Settlement batches (src/ledger/settle-batch.ts) in workerd with the real KeyLedger and D1:
 * concurrent requests of one key settle in fewer ledger calls than requests, and the books still
 * balance to the nano-dollar; a batch replaying a settled request debits it once. (How the queue
 * handles a failed or stuck call: test/unit/settle-batch.test.ts.)
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { settleCounters } from "../../src/ledger/settle-batch";
import { admin, chat, createKey, waitFor } from "../support/gateway";
import { flushUsage, freshKeyId, ledger, record } from "../support/ledger";

describe("settlement batches", () => {
	it("settles 40 concurrent requests of a key in fewer ledger calls, each once, and the books balance", async () => {
		const k = await createKey({ balance_usd: 50 });
		const before = { ...settleCounters };
		const answers = await Promise.all(
			Array.from({ length: 40 }, async (_, i) => {
				const res = await chat(k.key, { model: "test/ok", messages: [{ role: "user", content: `batch ${i}` }], max_tokens: 8 });
				expect(res.status).toBe(200);
				await res.text();
				return res.headers.get("x-request-id");
			}),
		);
		expect(new Set(answers).size).toBe(40);
		await waitFor(async () => (await ledger(k.id).info()).openHolds === 0, 10_000);
		const settlements = settleCounters.settlements - before.settlements;
		const calls = settleCounters.calls - before.calls;
		expect(settlements).toBeGreaterThanOrEqual(40);
		// Requests that ended while a settlement call was out went together in the next one.
		expect(calls).toBeLessThan(settlements);
		expect(settleCounters.largest).toBeGreaterThan(1);

		await flushUsage(ledger(k.id));
		const rows = await env.DB.prepare("SELECT request_id, cost_nanos FROM usage_records WHERE key_id = ? ORDER BY request_id")
			.bind(k.id)
			.all<{ request_id: string; cost_nanos: number }>();
		expect(rows.results.map((r) => r.request_id).sort()).toEqual([...answers].sort());
		const charged = rows.results.reduce((s, r) => s + r.cost_nanos, 0);
		expect(charged).toBeGreaterThan(0);
		const info = await ledger(k.id).info();
		expect(info.balanceNanos).toBe(50_000_000_000 - charged);
		expect(info.spentNanos).toBe(charged);
		expect(info.heldNanos).toBe(0);
		const view = (await (await admin(`/keys/${k.id}`)).json()) as { balance_usd: number };
		expect(view.balance_usd).toBeCloseTo((50_000_000_000 - charged) / 1e9, 9);
	});

	it("debits once a request that a batch carries twice or that was settled before", async () => {
		const keyId = freshKeyId("batch", "replay");
		const stub = ledger(keyId);
		await stub.credit({ keyId, amountNanos: 1_000_000, idempotencyKey: "seed" });
		const one = { requestId: "r-one", costNanos: 300, record: record(keyId) };
		const two = { requestId: "r-two", costNanos: 200, record: record(keyId) };
		expect(await stub.settle(one)).toMatchObject({ applied: true, balanceNanos: 999_700 });
		const answers = await stub.settleMany([one, two, two]);
		expect(answers).toEqual([
			{ requestId: "r-one", costNanos: 300, balanceNanos: 999_700, applied: false },
			{ requestId: "r-two", costNanos: 200, balanceNanos: 999_500, applied: true },
			{ requestId: "r-two", costNanos: 200, balanceNanos: 999_500, applied: false },
		]);
		expect(await stub.info()).toMatchObject({ balanceNanos: 999_500, spentNanos: 500, outboxSize: 2 });
	});
});
