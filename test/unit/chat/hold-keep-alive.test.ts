/** The hold keep-alive renews a running request's hold only while the request moves. */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { keepHoldAlive } from "../../../src/settlement/hold-keep-alive";

const EVERY = 300_000;

describe("the hold keep-alive", () => {
	beforeEach(() => {
		vi.useFakeTimers();
		vi.spyOn(console, "log").mockImplementation(() => {});
		vi.spyOn(console, "warn").mockImplementation(() => {});
	});
	afterEach(() => {
		vi.useRealTimers();
		vi.restoreAllMocks();
	});

	it("renews while the request moves and stops renewing once it stops moving", async () => {
		let progress = 0;
		const renew = vi.fn(async () => {});
		const ka = keepHoldAlive({ everyMs: EVERY, progress: () => progress, renew, requestId: "req_ka" });
		progress += 3;
		await vi.advanceTimersByTimeAsync(EVERY);
		expect(renew).toHaveBeenCalledTimes(1);
		progress += 1;
		await vi.advanceTimersByTimeAsync(EVERY);
		expect(renew).toHaveBeenCalledTimes(2);
		// The client stopped reading: nothing more moves, however many periods pass.
		await vi.advanceTimersByTimeAsync(EVERY * 5);
		expect(renew).toHaveBeenCalledTimes(2);
		// It moves again: renewed again.
		progress += 1;
		await vi.advanceTimersByTimeAsync(EVERY);
		expect(renew).toHaveBeenCalledTimes(3);
		ka.stop();
		progress += 1;
		await vi.advanceTimersByTimeAsync(EVERY * 2);
		expect(renew).toHaveBeenCalledTimes(3);
	});

	it("never renews a request that has not moved since it started", async () => {
		const renew = vi.fn(async () => {});
		const ka = keepHoldAlive({ everyMs: EVERY, progress: () => 7, renew, requestId: "req_ka2" });
		await vi.advanceTimersByTimeAsync(EVERY * 4);
		expect(renew).not.toHaveBeenCalled();
		ka.stop();
	});

	it("renews a stalled request for at most stallMs (a request holding a concurrency slot), then stops", async () => {
		const renew = vi.fn(async () => {});
		const ka = keepHoldAlive({ everyMs: EVERY, progress: () => 7, renew, requestId: "req_ka4", stallMs: EVERY * 3 });
		await vi.advanceTimersByTimeAsync(EVERY * 3);
		expect(renew).toHaveBeenCalledTimes(3);
		await vi.advanceTimersByTimeAsync(EVERY * 3);
		expect(renew).toHaveBeenCalledTimes(3);
		ka.stop();
	});

	it("survives a renewal that fails", async () => {
		let progress = 0;
		const renew = vi.fn(async () => {
			throw new Error("ledger down");
		});
		const ka = keepHoldAlive({ everyMs: EVERY, progress: () => ++progress, renew, requestId: "req_ka3" });
		await vi.advanceTimersByTimeAsync(EVERY * 2);
		expect(renew).toHaveBeenCalledTimes(2);
		ka.stop();
	});
});
