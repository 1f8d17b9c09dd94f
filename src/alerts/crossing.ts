/**
 * When a spend alert rule holds, and when a change of balance or spend crosses it. Pure: the
 * ledger (ledger/durable/alerts.ts) keeps each rule's armed flag and calls this after every
 * change of its balance. A rule fires once when it goes from not holding to holding while armed,
 * and is armed again once it stops holding (a top-up, or a new spend period).
 */
import { usdToNanos } from "../money/pricing";
import type { AlertRule } from "./rules";

/** What a rule is checked against (integer nano-dollars). */
export interface AlertFacts {
	balanceNanos: number;
	/** The key's spend limit and what was spent in its period, when it has one. */
	cap: { limitNanos: number; spentNanos: number } | null;
}

export function ruleHolds(rule: AlertRule, f: AlertFacts): boolean {
	switch (rule.when) {
		case "balance_below_usd":
			return f.balanceNanos < usdToNanos(rule.at ?? 0);
		case "exhausted":
			return f.balanceNanos <= 0;
		case "spent_pct_of_cap":
			return f.cap !== null && f.cap.limitNanos > 0 && f.cap.spentNanos * 100 >= (rule.at ?? 0) * f.cap.limitNanos;
	}
}

/** Where a rule was set: the key's own `alerts`, or the config's operator-wide `alerts`. */
export type AlertSource = "key" | "operator";

/** A rule's identity for its armed flag: a changed rule is a new rule. */
export function ruleId(source: AlertSource, rule: AlertRule): string {
	return JSON.stringify([source, rule.when, rule.at ?? null, rule.webhook_url ?? null]);
}

/**
 * What a change does to one rule: `armed` is its flag before the change (undefined for a rule
 * never seen: armed unless it already held before the change). It fires on a crossing (and
 * disarms), and is armed again once the rule stops holding. Returns the flag to keep.
 */
export function step(armed: boolean | undefined, heldBefore: boolean, holdsNow: boolean): { armed: boolean; fire: boolean } {
	const isArmed = armed ?? !heldBefore;
	if (isArmed && holdsNow) return { armed: false, fire: true };
	return { armed: isArmed || !holdsNow, fire: false };
}
