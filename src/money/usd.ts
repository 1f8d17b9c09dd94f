/**
 * The zod schemas of every USD amount the API accepts (credits, balances, spend limits). The
 * ledger counts integer nano-dollars and treats a limit of 0 as "no limit", so an amount must
 * convert to a safe integer and a non-zero amount to at least one nano-dollar: whatever passes
 * here is safe to hand to `usdToNanos`.
 */
import { z } from "zod";

/** The largest amount (in USD) one API call may credit, debit, set as a balance or as a spend limit. */
export const MAX_USD = 1_000_000;
/** The smallest non-zero amount: one nano-dollar, the ledger's unit. */
export const MIN_USD = 1e-9;

const RANGE = `between ${MIN_USD} (one nano-dollar) and ${MAX_USD} USD`;

/** Finite, |n| in [MIN_USD, MAX_USD] or exactly 0 (zod's number already refuses NaN and ±Infinity). */
function inRange(n: number): boolean {
	const abs = Math.abs(n);
	return Number.isFinite(n) && (n === 0 || (abs >= MIN_USD && abs <= MAX_USD));
}

/** A credit (positive) or debit (negative): never zero. */
export const CreditUsd = z.number().refine((n) => n !== 0 && inRange(n), `must be non-zero, its size ${RANGE}`);

/** A starting balance: 0, or a positive amount within the range. */
export const BalanceUsd = z.number().refine((n) => n >= 0 && inRange(n), `must be 0 or ${RANGE}`);

/** A spend limit: 0 would mean "no limit" to the ledger, so it is refused (null is "no limit"). */
export const SpendLimitUsd = z.number().refine((n) => n > 0 && inRange(n), `must be ${RANGE} (null for no limit)`);
