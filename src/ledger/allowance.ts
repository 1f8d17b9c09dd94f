/**
 * An isolate's view of one edge allowance (docs/allowances.md), as plain data, and the arithmetic
 * on it. Pure: every function takes `now` (this isolate's clock), does no I/O and holds nothing
 * of a request, so the state can live across requests (workerd forbids sharing I/O objects
 * between requests; see bench/README.md) and the tests can drive the clock.
 *
 * The invariant every function keeps: `remaining + inFlight` never exceeds what the ledger
 * reserves for the allowance. Takes move money from `remaining` to `inFlight`; a settlement
 * returns the unused part of a take to `remaining` (the ledger lowered the reservation by the
 * cost); an adoption moves a take out of the allowance altogether.
 */

/** An allowance is sized for this many holds of the request that asked for it, at first. */
export const ALLOWANCE_HOLDS = 10;
/** It grows to cover twice what runs on it at once, up to this many holds. */
export const MAX_ALLOWANCE_HOLDS = 100;
/** A refill that has not answered after this long no longer blocks the next one. */
export const REFILL_STALE_MS = 10_000;
/** After the ledger refused a grant, this isolate does not ask again for this long. */
export const GRANT_BACKOFF_MS = 5_000;
/**
 * An isolate asks for a key's allowance only once it has seen this many of the key's eligible
 * requests within one allowance lifetime: a key with sporadic traffic would find its allowance
 * expired by its next request anyway, and stays on the exact synchronous path.
 */
export const ALLOWANCE_WARMUP_REQUESTS = 3;

export interface LocalAllowance {
	id: string;
	/** What requests may still take. May go negative when a settlement cost more than its hold. */
	remaining: number;
	/** What requests running now took. */
	inFlight: number;
	/** When it expires, by this isolate's clock: when the grant was sent plus its lifetime (never later than the ledger's expiry). */
	expiresAt: number;
	ttlMs: number;
	/** The size refills aim for: ALLOWANCE_HOLDS × the hold of the request that asked, grown with concurrency (grownTarget). */
	targetNanos: number;
	/** The hold it was sized for (the ledger's headroom counts in these). */
	unitNanos: number;
	/** The last balance the ledger reported (for `x-venym-balance-usd` on requests it serves). */
	lastBalance: number;
	/** When the running refill was sent (0: none runs). */
	refillSince: number;
	/** How many requests took from it so far. */
	takes: number;
	/** When the last request running on it ended (nothing ran since, while `inFlight` is 0). */
	idleSince: number;
	/** When the pending idle check fires (0: none pending): one check per allowance, not one per request. */
	idleCheckAt: number;
	/** Which idle check is live (a newer one supersedes an older one still waiting). */
	idleCheckGen: number;
	/** Looks the live idle check has left before a request that ends hands over to a fresh one. */
	idleWaits: number;
}

/** No request takes from an allowance this close to its expiry: it has time to finish, or to adopt its hold. */
export function takeMarginMs(ttlMs: number): number {
	return Math.min(10_000, Math.floor(ttlMs / 3));
}

/** A request still running this long before its allowance expires moves its hold into the ledger (adopt). */
export function adoptLeadMs(ttlMs: number): number {
	return Math.min(5_000, Math.floor(ttlMs / 6));
}

/**
 * An allowance nothing runs on and nothing took from for this long is given back to the ledger
 * at once, rather than left reserved until it expires: when traffic stops, `held_usd` returns to
 * what is really in flight within seconds.
 */
export function idleReleaseMs(ttlMs: number): number {
	return Math.min(2_000, Math.floor(ttlMs / 2));
}

/** A pending idle check this overdue is taken as lost (its request ended first): the next idle request arms another. */
export const IDLE_CHECK_LOST_MS = 1_000;
/**
 * How many times one request's idle check may look again (each at most idleReleaseMs later), so it
 * stays well within a request's waitUntil budget. When it is down to its last look, the next request
 * to leave the allowance idle arms a fresh check (in its own context) that supersedes it.
 */
export const IDLE_CHECK_WAITS = 5;

/**
 * A request ended and nothing runs on the allowance now: notes when, and says when this request
 * must check it for idleness (null: a pending check will see it). At most one check per allowance
 * is live, whatever the request rate; `idleCheckGen` names it.
 */
export function armIdleCheck(a: LocalAllowance, now: number): number | null {
	a.idleSince = now;
	if (a.idleCheckAt > 0 && now <= a.idleCheckAt + IDLE_CHECK_LOST_MS && a.idleWaits > 1) return null;
	a.idleCheckGen++;
	a.idleWaits = IDLE_CHECK_WAITS;
	a.idleCheckAt = now + idleReleaseMs(a.ttlMs);
	return a.idleCheckAt;
}

/**
 * The idle check `gen` looks at `now`: "release" when nothing ran on the allowance for
 * idleReleaseMs, a time to look again when something ran meanwhile and it is idle again, or null
 * when a request runs on it now (that request arms the next check when it ends) or a newer check
 * superseded this one. A check never gives up while the allowance is idle: once its looks run low,
 * the next request that ends hands over to a fresh check, and with no request ending the next look
 * finds it due.
 */
export function idleCheckDue(a: LocalAllowance, now: number, gen: number): "release" | number | null {
	if (gen !== a.idleCheckGen) return null;
	a.idleCheckAt = 0;
	if (a.inFlight > 0) return null;
	const due = a.idleSince + idleReleaseMs(a.ttlMs);
	if (now >= due) return "release";
	a.idleWaits--;
	a.idleCheckAt = due;
	return due;
}

/**
 * Notes an eligible request of a key at `now` in `seen` (its recent times, oldest first, kept to
 * `windowMs`) and says whether the key is busy enough for an allowance.
 */
export function warmedUp(seen: number[], now: number, windowMs: number): boolean {
	seen.push(now);
	while (seen.length > 0 && now - (seen[0] as number) > windowMs) seen.shift();
	if (seen.length > ALLOWANCE_WARMUP_REQUESTS) seen.splice(0, seen.length - ALLOWANCE_WARMUP_REQUESTS);
	return seen.length >= ALLOWANCE_WARMUP_REQUESTS;
}

/** A new allowance from a grant sent at `sentAt`. */
export function startAllowance(
	id: string,
	grant: { amountNanos: number; ttlMs: number; balanceNanos: number },
	sentAt: number,
	targetNanos: number,
): LocalAllowance {
	return {
		id,
		remaining: grant.amountNanos,
		inFlight: 0,
		expiresAt: sentAt + grant.ttlMs,
		ttlMs: grant.ttlMs,
		targetNanos,
		unitNanos: Math.max(1, Math.round(targetNanos / ALLOWANCE_HOLDS)),
		lastBalance: grant.balanceNanos,
		refillSince: 0,
		takes: 0,
		idleSince: sentAt,
		idleCheckAt: 0,
		idleCheckGen: 0,
		idleWaits: 0,
	};
}

/** Whether a request holding `hold` (and needing `reserve` covered) may take from the allowance now. */
export function canTake(a: LocalAllowance, hold: number, reserve: number, now: number): boolean {
	return hold > 0 && reserve <= hold && a.remaining >= hold && a.expiresAt - now > takeMarginMs(a.ttlMs);
}

/** Takes a request's hold locally; false (and nothing changed) when it does not fit. */
export function take(a: LocalAllowance, hold: number, reserve: number, now: number): boolean {
	if (!canTake(a, hold, reserve, now)) return false;
	a.remaining -= hold;
	a.inFlight += hold;
	a.takes++;
	return true;
}

/**
 * The size to aim for when a request (holding `hold`) did not fit: enough for twice what runs on
 * the allowance at once, so a steady level of concurrency is served without a ledger call before
 * the engine; never below ALLOWANCE_HOLDS holds, never above MAX_ALLOWANCE_HOLDS.
 */
export function grownTarget(a: LocalAllowance, hold: number): number {
	const wanted = Math.max(a.targetNanos, ALLOWANCE_HOLDS * hold, 2 * (a.inFlight + hold));
	return Math.min(wanted, MAX_ALLOWANCE_HOLDS * Math.max(hold, a.unitNanos));
}

/** Whether a refill should start: below half its target, or past half its lifetime, and none running. */
export function needsRefill(a: LocalAllowance, now: number): boolean {
	if (a.refillSince > 0 && now - a.refillSince < REFILL_STALE_MS) return false;
	return a.remaining < a.targetNanos / 2 || a.expiresAt - now < a.ttlMs / 2;
}

/** A refill (sent at `sentAt`) answered: the reservation grew by `grantedNanos` and lives `ttlMs` from when it was sent. */
export function refilled(
	a: LocalAllowance,
	grant: { grantedNanos: number; ttlMs: number; balanceNanos: number },
	sentAt: number,
): void {
	a.remaining += grant.grantedNanos;
	a.expiresAt = Math.max(a.expiresAt, sentAt + grant.ttlMs);
	a.ttlMs = grant.ttlMs;
	a.lastBalance = grant.balanceNanos;
	a.refillSince = 0;
}

/**
 * A request served from the allowance settled. `known`: the ledger answered, so it lowered the
 * reservation by `cost` and what the hold did not use comes back; otherwise nothing comes back
 * (the ledger may or may not have applied it: staying below is the safe side).
 */
export function settled(a: LocalAllowance, hold: number, cost: number, known: boolean): void {
	a.inFlight = Math.max(0, a.inFlight - hold);
	if (known) a.remaining += hold - cost;
}

/** A running request moved its hold into the ledger: it no longer counts against the allowance. */
export function adopted(a: LocalAllowance, hold: number): void {
	a.inFlight = Math.max(0, a.inFlight - hold);
}

/** When a request that took from the allowance should adopt its hold, by this isolate's clock. */
export function adoptAt(a: LocalAllowance): number {
	return a.expiresAt - adoptLeadMs(a.ttlMs);
}

/** Whether the allowance is past use (expired or about to): a new one replaces it. */
export function isStale(a: LocalAllowance, now: number): boolean {
	return a.expiresAt - now <= takeMarginMs(a.ttlMs);
}
