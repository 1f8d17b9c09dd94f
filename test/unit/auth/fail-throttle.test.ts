import { afterEach, describe, expect, it, vi } from "vitest";
import { memoryThrottle } from "../../../src/auth/fail-throttle";

describe("memoryThrottle", () => {
	afterEach(() => {
		vi.useRealTimers();
	});

	function setup(maxIps = 100) {
		vi.useFakeTimers({ toFake: ["Date"], now: 1_000_000 });
		const windows = new Map<string, { count: number; endsAt: number }>();
		const throttle = memoryThrottle(windows, 3, 60, maxIps);
		return { throttle, windows, advance: (ms: number) => vi.setSystemTime(Date.now() + ms) };
	}

	it("throttles an IP after `limit` failures until its window ends", async () => {
		const { throttle, advance } = setup();
		for (let i = 0; i < 3; i++) {
			expect(await throttle.check("a")).toBe(0);
			expect(await throttle.fail("a")).toBe(0);
		}
		expect(await throttle.check("a")).toBe(60_000);
		expect(await throttle.check("b")).toBe(0);
		expect(await throttle.fail("a")).toBe(60_000);
		advance(59_000);
		expect(await throttle.check("a")).toBe(1_000);
		advance(1_000);
		expect(await throttle.check("a")).toBe(0);
		expect(await throttle.fail("a")).toBe(0);
	});

	it("never throttles a request without a client IP", async () => {
		const { throttle, windows } = setup();
		for (let i = 0; i < 10; i++) expect(await throttle.fail(null)).toBe(0);
		expect(await throttle.check(null)).toBe(0);
		expect(windows.size).toBe(0);
	});

	it("remembers at most maxIps windows, forgetting the oldest", async () => {
		const { throttle, windows } = setup(2);
		for (let i = 0; i < 3; i++) await throttle.fail("old");
		await throttle.fail("b");
		await throttle.fail("c");
		expect(windows.size).toBe(2);
		expect([...windows.keys()]).toEqual(["b", "c"]);
		expect(await throttle.check("old")).toBe(0);
	});
});
