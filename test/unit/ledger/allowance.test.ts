/** The isolate's allowance arithmetic (src/ledger/allowance.ts), with the clock passed in. */
import { describe, expect, it } from "vitest";
import {
	ALLOWANCE_WARMUP_REQUESTS,
	adoptAt,
	adopted,
	adoptLeadMs,
	armIdleCheck,
	canTake,
	grownTarget,
	IDLE_CHECK_LOST_MS,
	IDLE_CHECK_WAITS,
	idleCheckDue,
	idleReleaseMs,
	isStale,
	type LocalAllowance,
	MAX_ALLOWANCE_HOLDS,
	needsRefill,
	REFILL_STALE_MS,
	refilled,
	settled,
	startAllowance,
	take,
	takeMarginMs,
	warmedUp,
} from "../../../src/ledger/allowance";

const T0 = 1_000_000;
const TTL = 30_000;

function fresh(amount = 1000, target = 1000): LocalAllowance {
	return startAllowance("alw_1", { amountNanos: amount, ttlMs: TTL, balanceNanos: 50_000 }, T0, target);
}

/** What the ledger reserves must always cover what the isolate may still take plus what it took. */
function covered(a: LocalAllowance, ledgerAmount: number): boolean {
	return a.remaining + a.inFlight <= ledgerAmount;
}

describe("edge allowance arithmetic", () => {
	it("starts from the grant, expiring a lifetime after the grant was sent", () => {
		const a = fresh();
		expect(a).toMatchObject({ remaining: 1000, inFlight: 0, expiresAt: T0 + TTL, lastBalance: 50_000 });
	});

	it("takes a hold that fits and moves it in flight", () => {
		const a = fresh();
		expect(take(a, 300, 0, T0 + 1)).toBe(true);
		expect(a.remaining).toBe(700);
		expect(a.inFlight).toBe(300);
	});

	it("never takes more than remains", () => {
		const a = fresh(1000);
		expect(take(a, 600, 0, T0)).toBe(true);
		expect(take(a, 600, 0, T0)).toBe(false);
		expect(a.remaining).toBe(400);
		expect(a.inFlight).toBe(600);
		expect(take(a, 400, 0, T0)).toBe(true);
		expect(take(a, 1, 0, T0)).toBe(false);
		expect(a.remaining).toBe(0);
	});

	it("refuses a zero hold and a reserve beyond the hold", () => {
		const a = fresh();
		expect(canTake(a, 0, 0, T0)).toBe(false);
		expect(canTake(a, 100, 101, T0)).toBe(false);
		expect(canTake(a, 100, 100, T0)).toBe(true);
	});

	it("stops taking within the expiry margin, and treats the allowance as stale there", () => {
		const a = fresh();
		const margin = takeMarginMs(TTL);
		expect(margin).toBe(10_000);
		expect(canTake(a, 10, 0, a.expiresAt - margin - 1)).toBe(true);
		expect(isStale(a, a.expiresAt - margin - 1)).toBe(false);
		expect(canTake(a, 10, 0, a.expiresAt - margin)).toBe(false);
		expect(isStale(a, a.expiresAt - margin)).toBe(true);
		expect(take(a, 10, 0, a.expiresAt + 1)).toBe(false);
		expect(a.remaining).toBe(1000);
	});

	it("scales the margins to short lifetimes", () => {
		expect(takeMarginMs(3000)).toBe(1000);
		expect(adoptLeadMs(3000)).toBe(500);
		expect(adoptLeadMs(TTL)).toBe(5000);
		// A request taken at the last moment still has time before it must adopt.
		expect(takeMarginMs(3000)).toBeGreaterThan(adoptLeadMs(3000));
		expect(adoptAt(fresh())).toBe(T0 + TTL - 5000);
	});

	it("gives back what a settled hold did not use", () => {
		const a = fresh();
		take(a, 300, 0, T0);
		let ledger = 1000;
		// The ledger lowers the reservation by the cost.
		ledger -= 120;
		settled(a, 300, 120, true);
		expect(a.remaining).toBe(880);
		expect(a.inFlight).toBe(0);
		expect(covered(a, ledger)).toBe(true);
		expect(a.remaining + a.inFlight).toBe(ledger);
	});

	it("gives nothing back when the settlement's answer is unknown", () => {
		const a = fresh();
		take(a, 300, 0, T0);
		settled(a, 300, 120, false);
		expect(a.remaining).toBe(700);
		expect(a.inFlight).toBe(0);
		// Whether the ledger applied it (880) or not (1000), the isolate stays below.
		expect(covered(a, 880)).toBe(true);
		expect(covered(a, 1000)).toBe(true);
	});

	it("keeps below the ledger through any order of takes, settlements, adoptions and refills", () => {
		const a = fresh(1000, 1000);
		let ledger = 1000;
		const holds = [200, 150, 300, 100];
		for (const h of holds) expect(take(a, h, 0, T0 + 5)).toBe(true);
		expect(covered(a, ledger)).toBe(true);
		// Settlements arrive out of order.
		ledger -= 50;
		settled(a, 300, 50, true);
		expect(covered(a, ledger)).toBe(true);
		// A long one adopts: its hold leaves the allowance.
		ledger -= 200;
		adopted(a, 200);
		expect(covered(a, ledger)).toBe(true);
		// A refill adds what the ledger granted.
		ledger += 400;
		refilled(a, { grantedNanos: 400, ttlMs: TTL, balanceNanos: 40_000 }, T0 + 10_000);
		expect(covered(a, ledger)).toBe(true);
		expect(a.expiresAt).toBe(T0 + 10_000 + TTL);
		expect(a.lastBalance).toBe(40_000);
		// One settles at its full hold, one at nothing.
		ledger -= 150;
		settled(a, 150, 150, true);
		ledger -= 0;
		settled(a, 100, 0, true);
		expect(a.inFlight).toBe(0);
		expect(a.remaining).toBe(ledger);
	});

	it("asks for a refill below half its target or past half its life, once at a time", () => {
		const a = fresh(1000, 1000);
		expect(needsRefill(a, T0)).toBe(false);
		take(a, 501, 0, T0);
		expect(needsRefill(a, T0)).toBe(true);
		a.refillSince = T0;
		expect(needsRefill(a, T0 + 100)).toBe(false);
		// A refill that never answered stops blocking.
		expect(needsRefill(a, T0 + REFILL_STALE_MS)).toBe(true);
		const b = fresh(1000, 1000);
		expect(needsRefill(b, T0 + TTL / 2 - 1)).toBe(false);
		expect(needsRefill(b, T0 + TTL / 2 + 1)).toBe(true);
	});

	it("never moves the expiry earlier on a refill sent before an extension", () => {
		const a = fresh();
		refilled(a, { grantedNanos: 0, ttlMs: TTL, balanceNanos: 1 }, T0 + 20_000);
		refilled(a, { grantedNanos: 0, ttlMs: TTL, balanceNanos: 1 }, T0 + 5_000);
		expect(a.expiresAt).toBe(T0 + 20_000 + TTL);
		expect(a.refillSince).toBe(0);
	});

	it("does not count in flight below zero", () => {
		const a = fresh();
		adopted(a, 50);
		settled(a, 50, 10, false);
		expect(a.inFlight).toBe(0);
	});
});

describe("warm-up and idle release", () => {
	it("counts a key busy only after ALLOWANCE_WARMUP_REQUESTS requests within one window", () => {
		const seen: number[] = [];
		const need = ALLOWANCE_WARMUP_REQUESTS;
		for (let i = 0; i < need - 1; i++) expect(warmedUp(seen, 1_000 + i, 30_000)).toBe(false);
		expect(warmedUp(seen, 1_000 + need, 30_000)).toBe(true);
	});

	it("forgets requests older than the window, and keeps a bounded list", () => {
		const seen: number[] = [];
		const need = ALLOWANCE_WARMUP_REQUESTS;
		for (let i = 0; i < need - 1; i++) warmedUp(seen, i * 1_000, 30_000);
		// The earlier ones are past the window: this one alone is not busy.
		expect(warmedUp(seen, 100_000, 30_000)).toBe(false);
		expect(seen).toEqual([100_000]);
		for (let i = 1; i < 50; i++) warmedUp(seen, 100_000 + i, 30_000);
		expect(seen.length).toBe(need);
	});

	it("gives an idle allowance back after at most 2 s, sooner for short lifetimes", () => {
		expect(idleReleaseMs(30_000)).toBe(2_000);
		expect(idleReleaseMs(3_000)).toBe(1_500);
		expect(idleReleaseMs(3_000)).toBeLessThan(3_000 - takeMarginMs(3_000) + 1);
	});

	it("keeps one idle check per allowance, however many requests leave it idle", () => {
		const a = fresh();
		const idle = idleReleaseMs(TTL);
		// The first request to leave it idle arms the check; the next ones (one every 10 ms) only note when.
		expect(armIdleCheck(a, T0 + 100)).toBe(T0 + 100 + idle);
		const gen = a.idleCheckGen;
		for (let t = T0 + 110; t < T0 + 100 + idle; t += 10) expect(armIdleCheck(a, t)).toBeNull();
		const last = T0 + 100 + idle - 10;
		// The check looks while the allowance was used meanwhile: it waits for a quiet idleReleaseMs after the last request.
		expect(idleCheckDue(a, T0 + 100 + idle, gen)).toBe(last + idle);
		expect(a.idleCheckAt).toBe(last + idle);
		expect(armIdleCheck(a, last + 5)).toBeNull();
		expect(idleCheckDue(a, last + idle, gen)).toBe(last + 5 + idle);
		// Nothing ran since: give it back.
		expect(idleCheckDue(a, last + 5 + idle, gen)).toBe("release");
		expect(a.idleCheckAt).toBe(0);
		expect(a.idleCheckGen).toBe(gen);
	});

	it("never gives back an allowance a request runs on; the request arms the next check when it ends", () => {
		const a = fresh();
		const idle = idleReleaseMs(TTL);
		armIdleCheck(a, T0);
		const gen = a.idleCheckGen;
		expect(take(a, 100, 0, T0 + 50)).toBe(true);
		expect(idleCheckDue(a, T0 + idle, gen)).toBeNull();
		expect(a.idleCheckAt).toBe(0);
		settled(a, 100, 40, true);
		expect(armIdleCheck(a, T0 + idle + 1)).toBe(T0 + 2 * idle + 1);
		expect(a.idleCheckGen).toBe(gen + 1);
	});

	it("hands over to a fresh check when the live one runs low on looks, so the last request is always checked", () => {
		const a = fresh();
		const idle = idleReleaseMs(TTL);
		let t = T0;
		expect(armIdleCheck(a, t)).toBe(t + idle);
		const first = a.idleCheckGen;
		let at = t + idle;
		// A request ends just before each look: the check waits again, using up its looks.
		for (let look = 0; look < IDLE_CHECK_WAITS - 1; look++) {
			t = at - 1;
			expect(armIdleCheck(a, t)).toBeNull();
			at = idleCheckDue(a, at, first) as number;
			expect(at).toBe(t + idle);
		}
		expect(a.idleWaits).toBe(1);
		// Down to its last look: the next request to end arms a fresh check in its own context.
		t = at - 1;
		expect(armIdleCheck(a, t)).toBe(t + idle);
		const second = a.idleCheckGen;
		expect(second).toBe(first + 1);
		// The old check, looking at its time, stands down; the new one releases once quiet.
		expect(idleCheckDue(a, at, first)).toBeNull();
		expect(a.idleCheckAt).toBe(t + idle);
		expect(idleCheckDue(a, t + idle, second)).toBe("release");
	});

	it("arms another idle check when the pending one is overdue (its request ended before its timer)", () => {
		const a = fresh();
		const idle = idleReleaseMs(TTL);
		const at = armIdleCheck(a, T0) as number;
		expect(armIdleCheck(a, at + IDLE_CHECK_LOST_MS)).toBeNull();
		expect(armIdleCheck(a, at + IDLE_CHECK_LOST_MS + 1)).toBe(at + IDLE_CHECK_LOST_MS + 1 + idle);
	});

	it("counts takes, so an idle check sees a request that came and went", () => {
		const a = startAllowance("alw_t", { amountNanos: 1_000, ttlMs: 30_000, balanceNanos: 10_000 }, 0, 1_000);
		expect(a.takes).toBe(0);
		expect(take(a, 100, 0, 1)).toBe(true);
		settled(a, 100, 40, true);
		expect(a.takes).toBe(1);
		expect(a.inFlight).toBe(0);
		expect(a.remaining).toBe(960);
	});
});

describe("an allowance grows with concurrency", () => {
	it("aims for twice what runs on it at once, between 10 and 100 holds", () => {
		const a = startAllowance("alw_g", { amountNanos: 1_000, ttlMs: 30_000, balanceNanos: 1e9 }, 0, 1_000);
		expect(a.unitNanos).toBe(100);
		expect(grownTarget(a, 100)).toBe(1_000);
		for (let i = 0; i < 10; i++) take(a, 100, 0, 1);
		// Ten run at once and an eleventh did not fit: room for twice that.
		expect(grownTarget(a, 100)).toBe(2 * (1_000 + 100));
		a.inFlight = 1_000_000;
		expect(grownTarget(a, 100)).toBe(MAX_ALLOWANCE_HOLDS * 100);
	});
});
