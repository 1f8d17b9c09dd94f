/** A node's prefill rate (configured, learned, default) and which first-token timeouts cool it (src/routing/node-state.ts). */
import { describe, expect, it } from "vitest";
import {
	DEFAULT_PREFILL_TOKENS_PER_S,
	isLongPrompt,
	newRuntime,
	prefillAllowanceMs,
	prefillRate,
	recordPrefill,
	recordSuccess,
	recordTimeout,
} from "../../../src/routing/node-state";

describe("prefill rate", () => {
	it("is the configured rate, else half the learned one, else the slow default", () => {
		const rt = newRuntime();
		expect(prefillRate(rt, undefined)).toBe(DEFAULT_PREFILL_TOKENS_PER_S);
		// llama.cpp's timings: 4,000 tokens in 1,000 ms.
		recordPrefill(rt, 4000, 1000);
		expect(rt.prefillTokensPerS).toBe(4000);
		expect(prefillRate(rt, undefined)).toBe(2000);
		expect(prefillRate(rt, 750)).toBe(750);
	});

	it("learns from long prefills only, as a moving average", () => {
		const rt = newRuntime();
		recordPrefill(rt, 10, 1);
		recordPrefill(rt, 1000, 0);
		recordPrefill(rt, Number.NaN, 100);
		expect(rt.prefillTokensPerS).toBeNull();
		recordPrefill(rt, 1000, 1000);
		recordPrefill(rt, 2000, 1000);
		expect(rt.prefillTokensPerS).toBeCloseTo(1300);
	});

	it("adds the prompt's tokens at the rate to the wait; a prompt whose share is half the timeout is long", () => {
		expect(prefillAllowanceMs(2000, 1000)).toBe(2000);
		expect(prefillAllowanceMs(0, 1000)).toBe(0);
		expect(prefillAllowanceMs(1, 3)).toBe(334);
		expect(isLongPrompt(15_000, 30_000)).toBe(true);
		expect(isLongPrompt(14_999, 30_000)).toBe(false);
	});
});

describe("first-token timeouts", () => {
	it("cool a node on a short prompt at once", () => {
		const rt = newRuntime();
		expect(recordTimeout(rt, false, 1_000, 10_000)).toBe(true);
		expect(rt).toMatchObject({ coolingUntil: 11_000, lastError: "timeout", failures: 1 });
	});

	it("leave a node in service on a long prompt, unless a short prompt timed out there since it last answered", () => {
		const rt = newRuntime();
		expect(recordTimeout(rt, true, 1_000, 10_000)).toBe(false);
		expect(rt).toMatchObject({ coolingUntil: 0, failures: 0, lastError: "timeout on a long prompt" });
		recordTimeout(rt, false, 2_000, 10_000);
		recordSuccess(rt, 5, 3_000);
		// It answered since the short prompt's timeout: a long prompt's timeout is its prefill again.
		expect(recordTimeout(rt, true, 4_000, 10_000)).toBe(false);
		recordTimeout(rt, false, 5_000, 10_000);
		expect(recordTimeout(rt, true, 6_000, 10_000)).toBe(true);
		expect(rt.coolingUntil).toBeGreaterThan(6_000);
	});
});
