import { describe, expect, it } from "vitest";
import { GatewayClock } from "../../../src/observability/overhead";

describe("GatewayClock", () => {
	it("is the time to the head less the upstream waits, overlapping waits counted once", () => {
		const clock = new GatewayClock(1000);
		clock.waitBegin(1010); // engine attempt 1
		clock.waitBegin(1020); // a search call beside it
		clock.waitEnd(1100);
		clock.waitEnd(1200); // both over: 190 ms waited
		clock.waitBegin(1250); // engine attempt 2, still open at the head
		expect(clock.waitedMs(1300)).toBe(240);
		expect(clock.overheadMs(1300)).toBe(60);
	});

	it("is fixed once asked: a stream's body after its head adds nothing", () => {
		const clock = new GatewayClock(0);
		clock.waitBegin(10);
		expect(clock.overheadMs(50)).toBe(10);
		clock.waitEnd(5000);
		expect(clock.overheadMs(9000)).toBe(10);
	});

	it("ignores an end without a begin and never reads below zero", () => {
		const clock = new GatewayClock(100);
		clock.waitEnd(120);
		clock.waitBegin(90);
		expect(clock.overheadMs(110)).toBe(0);
	});
});
