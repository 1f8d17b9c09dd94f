/**
 * The isolate's settlement queue (src/ledger/settle-batch.ts) against a ledger made of plain
 * functions: who sends, what is batched, and how a failed or stuck batch still settles every
 * request (a replay on the real ledger debits nothing).
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { SettleInput, SettleManyAnswer, SettleResult } from "../../../src/ledger/durable/rpc-types";
import { MAX_BATCH, STUCK_AFTER_MS, settleCounters, settleInBatch } from "../../../src/ledger/settle-batch";
import { forgetSettleQueues } from "../../support/reset-isolate";

function input(requestId: string, costNanos = 100): SettleInput {
	return {
		requestId,
		costNanos,
		record: {
			key_id: "k",
			model: "m",
			requested_model: "m",
			node: null,
			prompt_tokens: 1,
			completion_tokens: 1,
			status: "completed",
			estimated: false,
			search_count: 0,
		},
	};
}

function result(i: SettleInput): SettleResult {
	return { requestId: i.requestId, costNanos: i.costNanos, balanceNanos: 1_000 - i.costNanos, applied: true };
}

/** A ledger whose calls answer when the test says (`release`), recording every call. */
function fakeLedger(answer: (i: SettleInput) => SettleManyAnswer = result) {
	const batches: string[][] = [];
	const singles: string[] = [];
	const gates: Array<() => void> = [];
	let failNext: Error | null = null;
	let hangNext = false;
	const ledger = {
		settleMany: async (inputs: SettleInput[]) => {
			batches.push(inputs.map((i) => i.requestId));
			const fail = failNext;
			failNext = null;
			if (hangNext) {
				hangNext = false;
				return new Promise<SettleManyAnswer[]>(() => {});
			}
			await new Promise<void>((r) => gates.push(r));
			if (fail) throw fail;
			return inputs.map(answer);
		},
		settle: async (i: SettleInput) => {
			singles.push(i.requestId);
			return result(i);
		},
	};
	return {
		ledger: () => ledger,
		batches,
		singles,
		/** Answers every call made so far. */
		release: () => {
			for (const g of gates.splice(0)) g();
		},
		failNextBatch: (err: Error) => {
			failNext = err;
		},
		/** The next call never answers (its request's context is gone). */
		hangNextCall: () => {
			hangNext = true;
		},
	};
}

/** Moves the fake clock on, running queued promise callbacks and the waiting requests' polls (1 ms, doubling to 32 ms). */
const tick = (ms = 40) => vi.advanceTimersByTimeAsync(ms);

beforeEach(() => {
	forgetSettleQueues();
	// The queue's polls and stuck-call deadline run on this clock: no test waits on real time.
	vi.useFakeTimers({ now: 1_000_000, toFake: ["Date", "setTimeout"] });
});
afterEach(() => vi.useRealTimers());

describe("settlement batches", () => {
	it("sends a lone settlement at once, in a call of its own", async () => {
		const f = fakeLedger();
		const p = settleInBatch(f.ledger, "k", input("r1", 250));
		expect(f.batches).toEqual([["r1"]]);
		f.release();
		expect(await p).toEqual({ requestId: "r1", costNanos: 250, balanceNanos: 750, applied: true });
		expect(settleCounters).toMatchObject({ calls: 1, settlements: 1, alone: 0 });
	});

	it("gathers what settles while a call is out into the next call, and answers each its own", async () => {
		const f = fakeLedger();
		const all = Array.from({ length: 10 }, (_, i) => settleInBatch(f.ledger, "k", input(`r${i}`, i)));
		expect(f.batches).toEqual([["r0"]]);
		f.release();
		await tick();
		expect(f.batches[1]).toEqual(["r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9"]);
		f.release();
		await tick();
		const results = await Promise.all(all);
		expect(results.map((r) => [r.requestId, r.costNanos])).toEqual(Array.from({ length: 10 }, (_, i) => [`r${i}`, i]));
		expect(f.batches).toHaveLength(2);
		expect(f.singles).toEqual([]);
	});

	it("keeps keys apart: each key's ledger gets only its own settlements", async () => {
		const a = fakeLedger();
		const b = fakeLedger();
		const pa = settleInBatch(a.ledger, "ka", input("a1"));
		const pb = settleInBatch(b.ledger, "kb", input("b1"));
		expect(a.batches).toEqual([["a1"]]);
		expect(b.batches).toEqual([["b1"]]);
		a.release();
		b.release();
		expect((await pa).requestId).toBe("a1");
		expect((await pb).requestId).toBe("b1");
	});

	it("caps a call at MAX_BATCH settlements", async () => {
		const f = fakeLedger();
		const first = settleInBatch(f.ledger, "k", input("first"));
		const rest = Array.from({ length: MAX_BATCH + 5 }, (_, i) => settleInBatch(f.ledger, "k", input(`r${i}`)));
		f.release();
		await tick();
		expect(f.batches[1]).toHaveLength(MAX_BATCH);
		f.release();
		await tick();
		expect(f.batches[2]).toHaveLength(5);
		f.release();
		await tick();
		await Promise.all([first, ...rest]);
	});

	it("rejects only the entry the ledger failed; the others of its batch stand", async () => {
		const f = fakeLedger((i) => (i.requestId === "bad" ? { failed: "boom" } : result(i)));
		const first = settleInBatch(f.ledger, "k", input("first"));
		const good = settleInBatch(f.ledger, "k", input("good"));
		const bad = settleInBatch(f.ledger, "k", input("bad"));
		f.release();
		await tick();
		f.release();
		// Its rejection is expected before the clock moves on, so it is never unhandled.
		const rejected = expect(bad).rejects.toThrow(/boom/);
		await tick();
		await rejected;
		expect((await good).requestId).toBe("good");
		expect((await first).requestId).toBe("first");
	});

	it("settles each entry of a batch whose call failed on its own", async () => {
		const f = fakeLedger();
		f.failNextBatch(new Error("network"));
		const first = settleInBatch(f.ledger, "k", input("first"));
		f.release();
		await expect(first).resolves.toMatchObject({ requestId: "first" });
		expect(f.singles).toEqual(["first"]);
		expect(settleCounters.alone).toBe(1);
	});

	it("sends one batch per request: the sender is done once answered, and a waiting request sends the next", async () => {
		const f = fakeLedger();
		const pending: Array<Promise<SettleResult>> = [settleInBatch(f.ledger, "k", input("s0"))];
		const done: string[] = [];
		// Each time a call is out, one more settlement arrives.
		for (let round = 1; round <= 5; round++) {
			const p = settleInBatch(f.ledger, "k", input(`s${round}`));
			void p.then((r) => done.push(r.requestId));
			pending.push(p);
			f.release();
			await tick();
		}
		f.release();
		await Promise.all(pending);
		expect(f.batches).toEqual([["s0"], ["s1"], ["s2"], ["s3"], ["s4"], ["s5"]]);
		expect(f.singles).toEqual([]);
	});

	it("answers the sender even when the next batch, sent by another request, never returns", async () => {
		const f = fakeLedger();
		const first = settleInBatch(f.ledger, "k", input("first"));
		void settleInBatch(f.ledger, "k", input("second"));
		f.hangNextCall();
		f.release();
		expect((await first).requestId).toBe("first");
	});

	it("gives up on a stuck call: its entries settle on their own, and the queue moves on", async () => {
		const f = fakeLedger();
		f.hangNextCall();
		// The first request's call never answers: it and all it carried are as good as gone.
		void settleInBatch(f.ledger, "k", input("stuck"));
		const waiter = settleInBatch(f.ledger, "k", input("waiter"));
		await vi.advanceTimersByTimeAsync(STUCK_AFTER_MS - 100);
		expect(f.batches).toEqual([["stuck"]]);
		// Once the call counts as stuck, the waiting request sends the queue itself.
		await vi.advanceTimersByTimeAsync(250);
		expect(f.batches).toEqual([["stuck"], ["waiter"]]);
		f.release();
		expect((await waiter).requestId).toBe("waiter");
		// A later request is not held up by the stuck call.
		const later = settleInBatch(f.ledger, "k", input("later"));
		expect(f.batches.at(-1)).toEqual(["later"]);
		f.release();
		expect((await later).requestId).toBe("later");
		expect(f.singles).toEqual([]);
	});

	it("settles on its own an entry stuck inside another request's call", async () => {
		const f = fakeLedger();
		const first = settleInBatch(f.ledger, "k", input("first"));
		const a = settleInBatch(f.ledger, "k", input("a"));
		const b = settleInBatch(f.ledger, "k", input("b"));
		f.hangNextCall();
		f.release();
		await vi.advanceTimersByTimeAsync(5);
		// One of the waiting two sent both in a call that never answers (its request is gone).
		expect(f.batches).toEqual([["first"], ["a", "b"]]);
		expect((await first).requestId).toBe("first");
		await vi.advanceTimersByTimeAsync(STUCK_AFTER_MS + 50);
		// The other one gave up on that call and settled alone (on the real ledger, a replay if the call landed).
		expect(f.singles).toEqual(["b"]);
		expect((await b).requestId).toBe("b");
		void a;
	});

	it("polls less and less often while a slow call is out (a ledger on another continent)", async () => {
		// Counts the timers set, around the fake setTimeout (put back before the fake timers go).
		const fakeSetTimeout = globalThis.setTimeout;
		let timers = 0;
		globalThis.setTimeout = ((...args: Parameters<typeof setTimeout>) => {
			timers++;
			return fakeSetTimeout(...args);
		}) as typeof setTimeout;
		try {
			const f = fakeLedger();
			const first = settleInBatch(f.ledger, "k", input("first"));
			const waiter = settleInBatch(f.ledger, "k", input("waiter"));
			await vi.advanceTimersByTimeAsync(150);
			// 1, 2, 4, 8, 16, then every 32 ms: 8 wake-ups in 150 ms, where every millisecond would be 150.
			expect(timers).toBeGreaterThanOrEqual(6);
			expect(timers).toBeLessThanOrEqual(10);
			f.release();
			expect((await first).requestId).toBe("first");
			await vi.advanceTimersByTimeAsync(40);
			f.release();
			expect((await waiter).requestId).toBe("waiter");
		} finally {
			globalThis.setTimeout = fakeSetTimeout;
		}
	});
});
