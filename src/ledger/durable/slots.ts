/**
 * Concurrency slots (a key's `max_concurrent`): a request admitted under a scope with a cap holds
 * one slot from its hold to its settlement. The slot is the request's `hold_limits` row with a
 * lease (`slot_until`): the request's keep-alive renews it while the request runs
 * (settlement/hold-keep-alive.ts), its settlement deletes it, and a slot whose lease ended (an
 * isolate that was lost with its requests) no longer counts, without waiting for the alarm.
 * Synchronous SQLite work inside the KeyLedger's calls, so counting and taking a slot is atomic
 * with the hold.
 */
import type { LimitRefusal } from "./limit-types";

/**
 * How long a slot lives without renewal. A running request renews it every SLOT_KEEPALIVE_MS
 * (a quarter of this) while it moves; one that stalls longer than this stops counting.
 */
export const SLOT_LEASE_MS = 2 * 60 * 1000;

/**
 * What a refused request is told to wait: the ledger cannot foresee when a running request ends,
 * and a slot frees the moment one settles, so a short wait.
 */
const SLOT_RETRY_MS = 1000;

/** How many slots of `scope` are held now (leases not yet ended). */
export function slotsInUse(sql: SqlStorage, scope: string, now: number): number {
	return sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM hold_limits WHERE scope = ? AND slot_until > ?", scope, now).one().n;
}

/** The refusal when every slot of `scope` is taken, else null. Writes nothing. */
export function slotRefusal(sql: SqlStorage, scope: string, max: number, now: number): LimitRefusal | null {
	if (slotsInUse(sql, scope, now) < max) return null;
	return { refused: "concurrency_limited", scope, limit: max, retryAfterMs: SLOT_RETRY_MS };
}

/**
 * Extends the slots of a running request (its keep-alive: the authorize replay) to `until`. A
 * lease that already ended is not revived: its slot may have gone to another request since.
 */
export function renewSlots(sql: SqlStorage, requestId: string, until: number, now: number): void {
	sql.exec(
		"UPDATE hold_limits SET slot_until = MAX(slot_until, ?2) WHERE request_id = ?1 AND slot_until > ?3",
		requestId,
		until,
		now,
	);
}
