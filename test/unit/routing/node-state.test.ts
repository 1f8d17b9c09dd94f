/** A node's prefill rate (configured, learned, default), which first-token timeouts cool it, and its state for operators (src/routing/node-state.ts). */
import { describe, expect, it } from "vitest";
import {
	DEFAULT_PREFILL_TOKENS_PER_S,
	isLongPrompt,
	newRuntime,
	prefillAllowanceMs,
	prefillRate,
	recordFailure,
	recordPrefill,
	recordSuccess,
	recordTimeout,
	reenable,
	reportOf,
	reportState,
} from "../../../src/routing/node-state";
import { mergeReports, type NodeReport } from "../../../src/routing/view-types";

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

describe("a node's state for operators, across isolates", () => {
	const report = (r: Partial<NodeReport>): NodeReport => ({ error: null, error_at: 0, success_at: 0, cooling_until: 0, ...r });

	it("keeps the newer error, the newer success and the later cooldown of two reports", () => {
		const a = report({ error: "status 500", error_at: 100, success_at: 50, cooling_until: 0 });
		const b = report({ error: "connection failed", error_at: 200, success_at: 20, cooling_until: 900 });
		expect(mergeReports(a, b)).toEqual({ error: "connection failed", error_at: 200, success_at: 50, cooling_until: 900 });
		expect(mergeReports(b, a)).toEqual(mergeReports(a, b));
		expect(mergeReports(undefined, a)).toEqual(a);
	});

	it("is cooling while a cooldown runs with no success or passing probe since, then failing, then ok", () => {
		const r = report({ error: "connection failed", error_at: 1000, cooling_until: 5000 });
		expect(reportState(r, undefined, 2000, 60_000)).toBe("cooling");
		expect(reportState(r, { healthy: true, checked_at: 1500 }, 2000, 60_000)).toBe("failing");
		expect(reportState(r, { healthy: false, checked_at: 1500 }, 2000, 60_000)).toBe("cooling");
		expect(reportState({ ...r, success_at: 1200 }, undefined, 2000, 60_000)).toBe("ok");
		expect(reportState({ ...r, cooling_until: 0 }, undefined, 2000, 60_000)).toBe("failing");
		expect(reportState({ ...r, cooling_until: 0 }, undefined, 70_000, 60_000)).toBe("ok");
	});

	it("is ok again once re-enabled: no cooldown, and a success after the failure", () => {
		const rt = newRuntime();
		recordFailure(rt, "connection failed", 1000, 60_000);
		expect(reportState(reportOf(rt), undefined, 2000, 300_000)).toBe("cooling");
		reenable(rt, 3000);
		expect(reportState(reportOf(rt), undefined, 4000, 300_000)).toBe("ok");
		// Merged with another isolate's older report of the failure, it stays ok.
		const other = report({ error: "connection failed", error_at: 1000, cooling_until: 61_000 });
		expect(reportState(mergeReports(other, reportOf(rt)), undefined, 4000, 300_000)).toBe("ok");
	});
});
