/**
 * What this isolate keeps of its edge allowances (edge-allowances.ts) in module memory, as plain
 * data: the allowance of each paying key, the grants under way, the back-offs, the retired
 * allowances requests still run on, the warm-up counts, and the counters tests and the bench read.
 */

import { adopted, GRANT_BACKOFF_MS, type LocalAllowance, warmedUp } from "./allowance";
import type { AllowanceTicket } from "./allowance-adopt";

export const allowances = new Map<string, LocalAllowance>();
/** A fresh grant is being asked for this key (since when), so concurrent requests ask once. */
export const granting = new Map<string, number>();
/** The ledger refused a grant for this key: not before this time. */
export const backoff = new Map<string, number>();
/** Allowances no longer used that requests still run on, by id (retire); at most RETIRED_MAX. */
export const retired = new Map<string, LocalAllowance>();
export const RETIRED_MAX = 1_000;
/** Recent eligible synchronous requests per key (times), for the warm-up before a first grant. */
export const recent = new Map<string, number[]>();
/** Keys remembered in `recent` at most (an isolate sees many keys; the map must stay small). */
const RECENT_KEYS = 10_000;

/** What this isolate did, for tests and the benchmark rig. */
export const allowanceCounters = { taken: 0, grants: 0, refills: 0, refused: 0, adopted: 0, dropped: 0, released: 0 };

/** A running request moved its hold into the ledger: it no longer counts against its allowance. */
export function onAdopted(ticket: AllowanceTicket): void {
	allowanceCounters.adopted++;
	const a = allowances.get(ticket.payerKeyId);
	if (a?.id === ticket.allowanceId) adopted(a, ticket.hold);
	const r = retired.get(ticket.allowanceId);
	if (r) adopted(r, ticket.hold);
}

/** Only for tests: whether idle allowances are given back (tests that look at an allowance between requests turn it off). */
export const allowanceTuning = { idleRelease: true };

/** Only for tests (through test/support/reset-isolate.ts): forget every allowance of this isolate (the ledger's reservations expire on their own). */
export function forgetAllowances(): void {
	allowances.clear();
	granting.clear();
	backoff.clear();
	recent.clear();
	retired.clear();
	for (const k of Object.keys(allowanceCounters)) allowanceCounters[k as keyof typeof allowanceCounters] = 0;
}

/** Only for tests: this isolate's allowance for a key, as plain data. */
export function localAllowance(payerKeyId: string): Readonly<LocalAllowance> | undefined {
	return allowances.get(payerKeyId);
}

/** Notes this request of the key; true once the key is busy enough for an allowance (ALLOWANCE_WARMUP_REQUESTS). */
export function busy(payerKeyId: string, now: number, windowMs: number): boolean {
	let seen = recent.get(payerKeyId);
	if (!seen) {
		if (recent.size >= RECENT_KEYS) recent.clear();
		seen = [];
		recent.set(payerKeyId, seen);
	}
	if (!warmedUp(seen, now, windowMs)) return false;
	recent.delete(payerKeyId);
	return true;
}

export function refused(payerKeyId: string, now: number): void {
	allowanceCounters.refused++;
	backoff.set(payerKeyId, now + GRANT_BACKOFF_MS);
}

/** The last balance this isolate knows for a key from a synchronous call (for allowance-served requests' header). */
export function noteBalance(payerKeyId: string, balanceNanos: number): void {
	const a = allowances.get(payerKeyId);
	if (a) a.lastBalance = balanceNanos;
}
