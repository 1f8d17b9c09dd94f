/** The pure parts of alerts: rule validation, the crossing step, the signature, the backoff. */
import { createHmac } from "node:crypto";
import { describe, expect, it } from "vitest";
import { ruleHolds, step } from "../../../src/alerts/crossing";
import { backoffMs, RETRY_FOR_MS } from "../../../src/alerts/outbox";
import { AlertRuleSchema, webhookUrlProblem } from "../../../src/alerts/rules";
import { signAlert, verifyAlertSignature } from "../../../src/alerts/signature";

describe("alert rules", () => {
	it("accepts https anywhere and http only to loopback, without credentials, bounded", () => {
		expect(webhookUrlProblem("https://hooks.example.com/x?token=1")).toBeNull();
		expect(webhookUrlProblem("http://localhost:8080/hook")).toBeNull();
		expect(webhookUrlProblem("http://127.0.0.1/hook")).toBeNull();
		expect(webhookUrlProblem("http://[::1]:9/hook")).toBeNull();
		expect(webhookUrlProblem("http://example.com/hook")).toMatch(/https/);
		expect(webhookUrlProblem("http://localhost.example.com/hook")).toMatch(/https/);
		expect(webhookUrlProblem("ftp://example.com/")).toMatch(/https/);
		expect(webhookUrlProblem("https://a:b@example.com/")).toMatch(/credentials/);
		expect(webhookUrlProblem("/relative")).toMatch(/absolute/);
		expect(webhookUrlProblem(`https://example.com/${"a".repeat(2048)}`)).toMatch(/2048/);
	});

	it("needs `at` where it means something, and refuses it on exhausted", () => {
		expect(AlertRuleSchema.safeParse({ when: "balance_below_usd", at: 5 }).success).toBe(true);
		expect(AlertRuleSchema.safeParse({ when: "balance_below_usd" }).success).toBe(false);
		expect(AlertRuleSchema.safeParse({ when: "balance_below_usd", at: -1 }).success).toBe(false);
		expect(AlertRuleSchema.safeParse({ when: "spent_pct_of_cap", at: 80 }).success).toBe(true);
		expect(AlertRuleSchema.safeParse({ when: "spent_pct_of_cap", at: 1001 }).success).toBe(false);
		expect(AlertRuleSchema.safeParse({ when: "exhausted" }).success).toBe(true);
		expect(AlertRuleSchema.safeParse({ when: "exhausted", at: 1 }).success).toBe(false);
		expect(AlertRuleSchema.safeParse({ when: "exhausted", extra: 1 }).success).toBe(false);
	});
});

describe("crossing", () => {
	const below5 = { when: "balance_below_usd" as const, at: 5 };
	const pct80 = { when: "spent_pct_of_cap" as const, at: 80 };
	const usd = (n: number) => n * 1e9;

	it("holds below the amount, at zero, and from the percentage of the cap on", () => {
		expect(ruleHolds(below5, { balanceNanos: usd(5), cap: null })).toBe(false);
		expect(ruleHolds(below5, { balanceNanos: usd(5) - 1, cap: null })).toBe(true);
		expect(ruleHolds({ when: "exhausted" }, { balanceNanos: 1, cap: null })).toBe(false);
		expect(ruleHolds({ when: "exhausted" }, { balanceNanos: 0, cap: null })).toBe(true);
		expect(ruleHolds({ when: "exhausted" }, { balanceNanos: -5, cap: null })).toBe(true);
		expect(ruleHolds(pct80, { balanceNanos: 0, cap: null })).toBe(false);
		expect(ruleHolds(pct80, { balanceNanos: 0, cap: { limitNanos: 100, spentNanos: 79 } })).toBe(false);
		expect(ruleHolds(pct80, { balanceNanos: 0, cap: { limitNanos: 100, spentNanos: 80 } })).toBe(true);
	});

	it("fires once on a crossing, stays quiet while it holds, re-arms once it stops holding", () => {
		expect(step(true, false, true)).toEqual({ armed: false, fire: true });
		expect(step(false, true, true)).toEqual({ armed: false, fire: false });
		expect(step(false, true, false)).toEqual({ armed: true, fire: false });
		expect(step(true, false, false)).toEqual({ armed: true, fire: false });
		// A rule never seen: armed unless it already held before the change.
		expect(step(undefined, false, true)).toEqual({ armed: false, fire: true });
		expect(step(undefined, true, true)).toEqual({ armed: false, fire: false });
		expect(step(undefined, false, false)).toEqual({ armed: true, fire: false });
	});
});

describe("the signature", () => {
	it("is Stripe's scheme: t=<unix>,v1=<hex HMAC-SHA256 of 't.body'>", async () => {
		const header = await signAlert("s3cret", '{"a":1}', 1_700_000_000);
		const hex = createHmac("sha256", "s3cret").update('1700000000.{"a":1}').digest("hex");
		expect(header).toBe(`t=1700000000,v1=${hex}`);
	});

	it("verifies the body as sent, within five minutes, under the secret only", async () => {
		const header = await signAlert("s3cret", "body", 1000);
		expect(await verifyAlertSignature("s3cret", header, "body", 1000 + 300)).toBe(true);
		expect(await verifyAlertSignature("s3cret", header, "body", 1000 + 301)).toBe(false);
		expect(await verifyAlertSignature("s3cret", header, "body ", 1000)).toBe(false);
		expect(await verifyAlertSignature("other", header, "body", 1000)).toBe(false);
		expect(await verifyAlertSignature("s3cret", header.replace("t=1000", "t=1001"), "body", 1000)).toBe(false);
		expect(await verifyAlertSignature("s3cret", null, "body", 1000)).toBe(false);
		expect(await verifyAlertSignature("s3cret", "garbage", "body", 1000)).toBe(false);
	});
});

describe("retries", () => {
	it("back off from 30 s, doubling to an hour, and fit a day about 28 times", () => {
		expect([1, 2, 3, 4].map(backoffMs)).toEqual([30_000, 60_000, 120_000, 240_000]);
		expect(backoffMs(8)).toBe(3_600_000);
		expect(backoffMs(50)).toBe(3_600_000);
		let t = 0;
		let attempts = 0;
		while (t + backoffMs(attempts + 1) <= RETRY_FOR_MS) t += backoffMs(++attempts);
		expect(attempts).toBeGreaterThan(20);
		expect(attempts).toBeLessThan(40);
	});
});
