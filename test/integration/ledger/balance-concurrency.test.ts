/** Balance checks under concurrency: 402s past the balance, every admitted request billed once, nothing left held. */
import { describe, expect, it } from "vitest";
import {
	COMPLETED,
	type ErrorBody,
	HOLD,
	IN,
	keyView,
	OUT,
	PROMPT_BOUND,
	ping,
	settledInfo,
	usageOf,
	usd,
} from "../../support/billing";
import { chat, createKey, readSse } from "../../support/gateway";

describe("balance checks under concurrency", () => {
	it("50 concurrent requests on a balance worth three: the rest get 402, the books balance", async () => {
		// test/slow streams 40 words, one every 50 ms, so the first requests hold their money
		// while the others arrive. max_tokens 40: hold = 1_039×1_000 + 40×2_000 = 1_119_000; the
		// engine reports 3 prompt + 40 completion tokens: cost = 83_000.
		const hold = PROMPT_BOUND * IN + 40 * OUT;
		const cost = 3 * IN + 40 * OUT;
		expect(hold).toBe(1_119_000);
		expect(cost).toBe(83_000);
		const initial = 3 * hold; // 3_357_000 nano$ = $0.003357
		const k = await createKey({ balance_usd: usd(initial) });
		expect(k.balance_usd).toBe(0.003357);

		const body = { model: "test/slow", stream: true, max_tokens: 40, messages: [{ role: "user", content: "ping conc01" }] };
		const responses = await Promise.all(
			Array.from({ length: 50 }, async () => {
				const res = await chat(k.key, body);
				if (res.status === 200) return { status: 200, frames: await readSse(res), headers: res.headers, json: null };
				return { status: res.status, frames: [], headers: res.headers, json: (await res.json()) as ErrorBody };
			}),
		);

		const ok = responses.filter((r) => r.status === 200);
		const refused = responses.filter((r) => r.status === 402);
		expect(ok.length + refused.length, JSON.stringify(responses.map((r) => r.status))).toBe(50);
		// Balance minus holds hits exactly zero after the third hold: the fourth is refused.
		expect(ok.length).toBe(3);
		expect(refused.length).toBe(47);
		for (const r of refused) {
			const e = r.json?.error;
			expect(e?.code).toBe("insufficient_balance");
			expect(e?.type).toBe("insufficient_quota");
			expect(typeof e?.available_usd).toBe("number");
			expect(e?.available_usd as number).toBeLessThanOrEqual(0);
			expect(e?.required_usd).toBe(usd(hold));
			expect(e?.message).toContain("0.001119");
		}
		for (const r of ok) expect(r.frames.at(-1)).toBe("[DONE]");

		const end = await settledInfo(k.id, ok.length);
		expect(end.openHolds).toBe(0);
		expect(end.heldNanos).toBe(0);
		expect(end.balanceNanos).toBeGreaterThanOrEqual(-hold);
		expect(end.spentNanos).toBe(ok.length * cost);
		expect(end.balanceNanos).toBe(initial - ok.length * cost); // 12_000
		const rows = await usageOf(k.id, ok.length);
		expect(rows).toHaveLength(ok.length);
		const totalRecorded = rows.reduce((s, r) => s + r.cost_nanos, 0);
		expect(totalRecorded).toBe(initial - end.balanceNanos); // Σ records == Σ debits
		expect(totalRecorded).toBe(end.spentNanos); // == spent
		for (const r of rows)
			expect(r).toMatchObject({ status: "completed", prompt_tokens: 3, completion_tokens: 40, cost_nanos: cost });

		const view = await keyView(k.id);
		expect(view.balance_usd).toBe(usd(initial - 3 * cost));
		expect(view.spent_usd).toBe(usd(3 * cost));
		expect(view.open_holds).toBe(0);
	});

	it("50 concurrent fast requests: whatever passes is billed exactly once and nothing is left held", async () => {
		const initial = 3 * HOLD;
		const k = await createKey({ balance_usd: usd(initial) });
		const statuses = await Promise.all(
			Array.from({ length: 50 }, async () => {
				const res = await chat(k.key, { model: "test/ok", messages: [{ role: "user", content: ping() }] });
				const j = (await res.json()) as ErrorBody & Record<string, unknown>;
				if (res.status === 402) expect(j.error.code).toBe("insufficient_balance");
				return {
					status: res.status,
					cost: res.headers.get("x-venym-cost-usd"),
				};
			}),
		);
		const ok = statuses.filter((s) => s.status === 200);
		expect(ok.length + statuses.filter((s) => s.status === 402).length).toBe(50);
		expect(ok.length).toBeGreaterThanOrEqual(3);
		const end = await settledInfo(k.id, ok.length);
		expect(end.openHolds).toBe(0);
		expect(end.balanceNanos).toBeGreaterThanOrEqual(-HOLD);
		expect(end.spentNanos).toBe(ok.length * COMPLETED);
		expect(end.balanceNanos).toBe(initial - ok.length * COMPLETED);
		const debitedByHeaders = ok.reduce((s, r) => s + Math.round(Number(r.cost) * 1e9), 0);
		expect(debitedByHeaders).toBe(end.spentNanos);
		const rows = await usageOf(k.id, ok.length);
		expect(rows).toHaveLength(ok.length);
		expect(rows.reduce((s, r) => s + r.cost_nanos, 0)).toBe(end.spentNanos);
	});
});
