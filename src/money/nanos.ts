/**
 * The ledger's guard on every amount it is sent: integer nano-dollars that are finite and bounded,
 * so that no RPC argument (a bug, a bad config, a hostile caller) can make the stored balance,
 * spend or holds NaN, infinite or past 2^53, after which the ledger would admit without limit and
 * refuse every top-up. Pure: no imports, so the config loader can share the bound.
 */

/** The most one request may hold or be charged: $1M. The config loader refuses a catalog that could hold more. */
export const MAX_REQUEST_NANOS = 1_000_000 * 1e9;

/**
 * `value` rounded to an integer, or a RangeError naming `field` when it is not a finite number of
 * at most `max` in size. A negative amount where none makes sense (a hold, a cost) counts as 0, as
 * it always has: it can only lower what is taken, never poison a total.
 */
export function nanosArg(method: string, field: string, value: unknown, max: number, signed = false): number {
	const n = typeof value === "number" ? Math.round(value) : Number.NaN;
	if (!Number.isSafeInteger(n) || Math.abs(n) > max) {
		throw new RangeError(`KeyLedger.${method}: ${field} must be a finite integer of at most ${max}, got ${String(value)}.`);
	}
	return signed ? n : Math.max(0, n);
}

/** The ledger's stored totals after a change: a RangeError (nothing stored) when one would leave the safe range. */
export function assertSafeTotal(method: string, field: string, value: number): void {
	if (!Number.isSafeInteger(value)) {
		throw new RangeError(
			`KeyLedger.${method}: the ${field} would become ${value}, outside the ledger's range; nothing was stored.`,
		);
	}
}
