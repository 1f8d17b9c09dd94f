import { describe, expect, it } from "vitest";
import { memoize } from "../../src/memo";

describe("memoize", () => {
	it("computes each input once and returns the same value after", () => {
		let calls = 0;
		const upper = memoize((s) => {
			calls++;
			return s.toUpperCase();
		});
		expect(upper("a")).toBe("A");
		expect(upper("a")).toBe("A");
		expect(upper("b")).toBe("B");
		expect(calls).toBe(2);
	});

	it("forgets everything once it holds `max` entries, so arbitrary inputs cannot grow it", () => {
		let calls = 0;
		const id = memoize((s) => {
			calls++;
			return s;
		}, 2);
		id("a");
		id("b");
		id("c");
		id("a");
		expect(calls).toBe(4);
	});
});
