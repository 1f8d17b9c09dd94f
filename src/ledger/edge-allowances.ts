/**
 * This isolate's edge allowances (docs/allowances.md): one per paying key, kept in module memory
 * as plain data (allowance.ts). Only requests touch the ledger: a refill, an adoption or a
 * release is made by the request that needs it, with a fresh stub, under its own `waitUntil`;
 * nothing here keeps a stub, a promise or a timer of one request for another (workerd's
 * per-request I/O isolation, bench/README.md).
 */
import type { LedgerConfig } from "../config";
import { afterResponse } from "../http/after-response";
import { randomId } from "../ids";
import {
	ALLOWANCE_HOLDS,
	armIdleCheck,
	grownTarget,
	idleCheckDue,
	isStale,
	type LocalAllowance,
	needsRefill,
	REFILL_STALE_MS,
	refilled,
	settled,
	startAllowance,
	take,
} from "./allowance";
import { type AllowanceTicket, adoptNow as adoptWith, type Stub, scheduleAdopt } from "./allowance-adopt";
import type { AllowanceState, GrantInput, SettleResult } from "./durable/rpc-types";
import {
	allowanceCounters,
	allowances,
	allowanceTuning,
	backoff,
	busy,
	granting,
	onAdopted,
	RETIRED_MAX,
	refused,
	retired,
} from "./edge-allowance-state";

/** What a request needs to use allowances: the config's `ledger` block and its own `waitUntil`. */
export interface EdgeContext {
	ledger: LedgerConfig;
	waitUntil: (p: Promise<unknown>) => void;
}

export { type AllowanceTicket, beforeSettle } from "./allowance-adopt";

/** Adopts now (the request's keep-alive calls this when the timer could not); retried once. */
export function adoptNow(ledger: Stub, ticket: AllowanceTicket): Promise<void> {
	return adoptWith(ledger, ticket, onAdopted);
}

/**
 * Takes `hold` from the key's allowance when it fits and has time left; starts a refill (under
 * this request's waitUntil) when it runs low. Null: take the synchronous path.
 */
export function takeLocal(
	ledger: Stub,
	payerKeyId: string,
	requestId: string,
	hold: number,
	reserve: number,
	edge: EdgeContext,
	now: number,
): { ticket: AllowanceTicket; balanceNanos: number } | null {
	const a = allowances.get(payerKeyId);
	if (!a || !take(a, hold, reserve, now)) return null;
	allowanceCounters.taken++;
	const ticket: AllowanceTicket = { payerKeyId, requestId, allowanceId: a.id, hold, adopted: false, done: false };
	if (needsRefill(a, now)) refill(ledger, payerKeyId, a, edge, now);
	scheduleAdopt(ledger, ticket, a, now, () => allowances.get(ticket.payerKeyId), onAdopted);
	return { ticket, balanceNanos: a.lastBalance };
}

/**
 * After a synchronous hold of an eligible request: when the key's available balance is large
 * against this hold, ask for an allowance so the next request needs no ledger call first.
 */
export function afterSyncHold(
	ledger: Stub,
	payerKeyId: string,
	hold: number,
	availableNanos: number,
	edge: EdgeContext,
	now: number,
): void {
	if (hold <= 0 || availableNanos < edge.ledger.allowance_min_headroom * hold) return;
	if ((backoff.get(payerKeyId) ?? 0) > now) return;
	const a = allowances.get(payerKeyId);
	if (a && !isStale(a, now)) {
		// Too small for this request (more run at once than it was sized for), or running low:
		// grow it with the concurrency and top it up, one refill at a time.
		a.targetNanos = grownTarget(a, hold);
		const refilling = a.refillSince > 0 && now - a.refillSince < REFILL_STALE_MS;
		if (!refilling && (a.remaining < hold || needsRefill(a, now))) refill(ledger, payerKeyId, a, edge, now);
		return;
	}
	const since = granting.get(payerKeyId);
	if (since !== undefined && now - since < REFILL_STALE_MS) return;
	if (!busy(payerKeyId, now, edge.ledger.allowance_ttl_ms)) return;
	granting.set(payerKeyId, now);
	const id = randomId("alw_", 9);
	const target = ALLOWANCE_HOLDS * hold;
	allowanceCounters.grants++;
	edge.waitUntil(
		grantLater(ledger, {
			payerKeyId,
			allowanceId: id,
			holdNanos: hold,
			wantNanos: target,
			ttlMs: edge.ledger.allowance_ttl_ms,
			minHeadroom: edge.ledger.allowance_min_headroom,
			extend: false,
		})
			.then((g) => {
				if (!g.ok) return refused(payerKeyId, now);
				// A stale allowance this replaces is retired: what its running requests do not need goes back now, the rest as they settle.
				const old = allowances.get(payerKeyId);
				const fresh = startAllowance(id, g, now, target);
				allowances.set(payerKeyId, fresh);
				if (old) retire(ledger, old, edge);
				// Traffic may have stopped with the warm-up: unless a request takes from it, it goes back soon.
				if (allowanceTuning.idleRelease) releaseWhenIdle(ledger, payerKeyId, fresh, edge);
			})
			.catch((err) => console.warn(`allowance grant for ${payerKeyId} failed`, err))
			.finally(() => granting.delete(payerKeyId)),
	);
}

/** The ledger's grant, asked just after this request's answer has gone out: nothing waits for it. */
async function grantLater(ledger: Stub, input: GrantInput) {
	await afterResponse();
	return ledger().grant(input);
}

function refill(ledger: Stub, payerKeyId: string, a: LocalAllowance, edge: EdgeContext, now: number): void {
	a.refillSince = now;
	allowanceCounters.refills++;
	const id = a.id;
	edge.waitUntil(
		grantLater(ledger, {
			payerKeyId,
			allowanceId: id,
			holdNanos: a.unitNanos,
			wantNanos: a.targetNanos,
			ttlMs: edge.ledger.allowance_ttl_ms,
			minHeadroom: edge.ledger.allowance_min_headroom,
			extend: true,
		})
			.then((g) => {
				const current = allowances.get(payerKeyId);
				if (current?.id !== id) return;
				if (g.ok) refilled(current, g, now);
				else {
					refused(payerKeyId, now);
					drop(ledger, payerKeyId, current, g.reason, edge);
				}
			})
			.catch((err) => {
				a.refillSince = 0;
				console.warn(`allowance refill for ${payerKeyId} failed`, err);
			}),
	);
}

/**
 * Stops using an allowance; when the ledger still has it (revoked, or refused a refill for lack
 * of headroom), gives back what this isolate's running requests do not need.
 */
function drop(
	ledger: Stub,
	payerKeyId: string,
	a: LocalAllowance,
	state: AllowanceState | "headroom" | "paused",
	edge: EdgeContext,
) {
	if (allowances.get(payerKeyId) !== a) return;
	allowances.delete(payerKeyId);
	allowanceCounters.dropped++;
	if (state === "gone") return;
	retire(ledger, a, edge);
}

/**
 * Stops using an allowance the ledger still has: it shrinks to what the requests running on it
 * took, and once the last of them has settled (settleRetired) the rest, what their holds did not
 * use, is given back too, instead of staying reserved until the allowance expires.
 */
function retire(ledger: Stub, a: LocalAllowance, edge: EdgeContext): void {
	const keep = a.inFlight;
	if (keep > 0) {
		if (retired.size >= RETIRED_MAX) retired.clear();
		retired.set(a.id, a);
	}
	release(ledger, a.id, keep, edge);
}

function release(ledger: Stub, allowanceId: string, keepNanos: number, edge: EdgeContext): void {
	edge.waitUntil(
		ledger()
			.release({ allowanceId, keepNanos })
			.catch((err) => console.warn(`releasing allowance ${allowanceId} failed (it expires on its own)`, err)),
	);
}

/** A request of a retired allowance settled: when it was the last one running, the allowance is given back in full. */
function settleRetired(ledger: Stub, ticket: AllowanceTicket, edge: EdgeContext | undefined): void {
	const r = retired.get(ticket.allowanceId);
	if (!r) return;
	if (!ticket.adopted) r.inFlight = Math.max(0, r.inFlight - ticket.hold);
	if (r.inFlight > 0) return;
	retired.delete(r.id);
	if (edge) release(ledger, r.id, 0, edge);
}

/**
 * After settlement (once per request): what the hold did not use goes back to the allowance,
 * unless the request adopted its hold or the ledger's answer is unknown; an allowance the ledger
 * says is revoked or gone is dropped.
 */
export function afterSettle(
	ledger: Stub,
	ticket: AllowanceTicket,
	result: SettleResult | null,
	cost: number,
	edge: EdgeContext | undefined,
): void {
	if (ticket.done) return;
	ticket.done = true;
	if (ticket.timer !== undefined) clearTimeout(ticket.timer);
	const a = allowances.get(ticket.payerKeyId);
	if (a?.id !== ticket.allowanceId) {
		settleRetired(ledger, ticket, edge);
		return;
	}
	if (!ticket.adopted) settled(a, ticket.hold, cost, result !== null);
	if (result) a.lastBalance = result.balanceNanos;
	const state = result?.allowance;
	if (edge && (state === "revoked" || state === "gone")) drop(ledger, ticket.payerKeyId, a, state, edge);
	else if (edge && a.inFlight === 0 && allowanceTuning.idleRelease) releaseWhenIdle(ledger, ticket.payerKeyId, a, edge);
}

/**
 * Nothing runs on the allowance any more: unless a request takes from it within idleReleaseMs,
 * it is given back, so a key whose traffic stopped shows no reservation a moment later instead of
 * one allowance lifetime later. One check per allowance is pending (allowance.ts armIdleCheck),
 * under the waitUntil of the request that armed it: a busy key does not keep a timer and a live
 * request context per request for two seconds.
 */
function releaseWhenIdle(ledger: Stub, payerKeyId: string, a: LocalAllowance, edge: EdgeContext): void {
	const at = armIdleCheck(a, Date.now());
	if (at === null) return;
	const gen = a.idleCheckGen;
	const check = async (): Promise<void> => {
		let next: number | "release" | null = at;
		while (typeof next === "number") {
			await new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, (next as number) - Date.now())));
			// Replaced or dropped meanwhile: whoever did that has dealt with it.
			if (allowances.get(payerKeyId) !== a) return;
			next = idleCheckDue(a, Date.now(), gen);
		}
		if (next !== "release") return;
		allowances.delete(payerKeyId);
		allowanceCounters.released++;
		await ledger()
			.release({ allowanceId: a.id, keepNanos: 0 })
			.catch((err) => console.warn(`releasing idle allowance ${a.id} failed (it expires on its own)`, err));
	};
	edge.waitUntil(check());
}
