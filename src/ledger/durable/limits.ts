/**
 * Per-key limits kept inside the key's ledger Durable Object: requests and tokens per minute
 * over an exact sliding window, and spend per period. Everything here is synchronous SQLite
 * work on the ledger's own storage, so the ledger can check and record limits in the same
 * atomic step as the hold. The period arithmetic is pure and takes `now`.
 */

import type { LimitRefusal, RateState, RateWindow, ScopeLimits } from "./limit-types";
import { slotRefusal } from "./slots";
import { type PeriodKey, periodEnd, periodStart } from "./spend-periods";

export type * from "./limit-types";
export type { SpendPeriod } from "./spend-periods";

export const RATE_WINDOW_MS = 60_000;

/** The tables are created by the ledger's migrations (schema.ts). */
const PERIOD_COLUMNS = {
	total: ["total", null],
	daily: ["day", "day_start"],
	weekly: ["week", "week_start"],
	monthly: ["month", "month_start"],
} as const;

export function isLimited(s: ScopeLimits): boolean {
	return Boolean(s.rpm || s.tpm || s.spendLimitNanos || s.maxConcurrent);
}

/** The ledger's limit tables, operated synchronously on its SQLite storage. */
export class LedgerLimits {
	constructor(private readonly sql: SqlStorage) {}

	/** The first limit this request would break, or null; also the windows as they stand. Writes nothing but pruning. */
	check(
		scopes: readonly ScopeLimits[],
		tokens: number,
		now: number,
		/** The ledger's own key and its lifetime spend, which the ledger always knows. */
		own?: { scope: string; spentNanos: number },
		/** Worst case beyond a single choice's (see AuthorizeInput.reserveNanos): each cap's headroom must cover it. */
		reserveNanos = 0,
	): { refusal: LimitRefusal | null; rate: RateState } {
		const rate: RateState = {};
		// Slots first: a request refused for want of one is not counted anywhere.
		for (const s of scopes) {
			const refusal = s.maxConcurrent ? slotRefusal(this.sql, s.scope, s.maxConcurrent, now) : null;
			if (refusal) return { refusal, rate };
		}
		for (const s of scopes) {
			if (s.rpm || s.tpm) this.sql.exec("DELETE FROM rate_events WHERE scope = ? AND at <= ?", s.scope, now - RATE_WINDOW_MS);
			if (s.rpm) {
				const w = this.requestWindow(s.scope, s.rpm, now);
				if (w.remaining <= 0) {
					const refusal = { ...rateRefusal(s.scope, "requests", w.resetMs), ...(s.user ? { user: s.user } : {}) };
					return { refusal, rate: s.user ? rate : { ...rate, requests: w } };
				}
				// An end user's window is theirs; the headers show the key's.
				if (!s.user)
					rate.requests = tighter(rate.requests, { ...w, remaining: w.remaining - 1, resetMs: w.resetMs || RATE_WINDOW_MS });
			}
			if (s.tpm) {
				// As OpenAI: the request's own tokens must fit in what is left of the minute.
				const need = Math.max(1, Math.round(tokens));
				const w = this.tokenWindow(s.scope, s.tpm, now, need);
				if (w.remaining < need) {
					const refusal = rateRefusal(s.scope, "tokens", w.resetMs, need > s.tpm ? need : undefined);
					return { refusal, rate: { ...rate, tokens: w } };
				}
				rate.tokens = tighter(rate.tokens, {
					...w,
					remaining: Math.max(0, w.remaining - Math.round(tokens)),
					resetMs: w.resetMs || RATE_WINDOW_MS,
				});
			}
		}
		for (const s of scopes) {
			if (!s.spendLimitNanos) continue;
			const period = s.spendPeriod ?? null;
			const spent = period === null && own?.scope === s.scope ? own.spentNanos : this.spent(s.scope, period ?? "total", now);
			const committed = spent + this.held(s.scope);
			if (committed >= s.spendLimitNanos || s.spendLimitNanos - committed < reserveNanos) {
				return {
					refusal: {
						refused: "spend_limit",
						scope: s.scope,
						limitNanos: s.spendLimitNanos,
						spentNanos: spent,
						period,
						resetsAt: period ? periodEnd(period, now) : null,
						...(s.user ? { user: s.user } : {}),
					},
					rate,
				};
			}
		}
		return { refusal: null, rate };
	}

	/**
	 * Counts an admitted request in each limited scope's windows and ties its hold to those scopes.
	 * Scopes without any limit cost nothing here: that is the common case on the hot path.
	 */
	admit(requestId: string, scopes: readonly ScopeLimits[], tokens: number, now: number, leaseMs: number): boolean {
		let limited = false;
		for (const s of scopes) {
			if (!isLimited(s)) continue;
			limited = true;
			const rated = Boolean(s.rpm || s.tpm);
			if (rated) {
				this.sql.exec(
					"INSERT OR IGNORE INTO rate_events (request_id, scope, at, tokens) VALUES (?, ?, ?, ?)",
					requestId,
					s.scope,
					now,
					Math.max(0, Math.round(tokens)),
				);
			}
			// A scope with max_concurrent: the row is also the request's slot, leased until slot_until (slots.ts).
			this.sql.exec(
				"INSERT OR IGNORE INTO hold_limits (request_id, scope, spend, rated, slot_until) VALUES (?, ?, ?, ?, ?)",
				requestId,
				s.scope,
				s.spendLimitNanos ? 1 : 0,
				rated ? 1 : 0,
				s.maxConcurrent ? now + leaseMs : null,
			);
		}
		return limited;
	}

	/** Counts a request that holds nothing in each rpm-limited scope's window (no tokens, no hold ties). */
	countRequest(requestId: string, scopes: readonly ScopeLimits[], now: number): void {
		for (const s of scopes) {
			if (!s.rpm) continue;
			this.sql.exec(
				"INSERT OR IGNORE INTO rate_events (request_id, scope, at, tokens) VALUES (?, ?, ?, 0)",
				requestId,
				s.scope,
				now,
			);
		}
	}

	/**
	 * At settlement: the real tokens replace the estimate, and the cost counts towards the spend
	 * of each scope with a spend limit (per-period spend is tracked from the time a limit exists).
	 */
	settle(requestId: string, costNanos: number, tokens: number, now: number): boolean {
		const rows = this.sql
			.exec<{ scope: string; spend: number; rated: number }>(
				"DELETE FROM hold_limits WHERE request_id = ? RETURNING scope, spend, rated",
				requestId,
			)
			.toArray();
		if (rows.length === 0) return false;
		if (rows.some((r) => r.rated)) {
			this.sql.exec("UPDATE rate_events SET tokens = ? WHERE request_id = ?", Math.max(0, Math.round(tokens)), requestId);
		}
		for (const r of rows) {
			if (!r.spend) continue;
			// One row per scope; SQLite evaluates every SET expression against the old row.
			this.sql.exec(
				`INSERT INTO spend_periods (scope, total, day_start, day, week_start, week, month_start, month) VALUES (?1, ?2, ?3, ?2, ?4, ?2, ?5, ?2)
				 ON CONFLICT (scope) DO UPDATE SET
				   total = total + excluded.total,
				   day = CASE WHEN day_start = excluded.day_start THEN day + excluded.day ELSE excluded.day END, day_start = excluded.day_start,
				   week = CASE WHEN week_start = excluded.week_start THEN week + excluded.week ELSE excluded.week END, week_start = excluded.week_start,
				   month = CASE WHEN month_start = excluded.month_start THEN month + excluded.month ELSE excluded.month END, month_start = excluded.month_start`,
				r.scope,
				costNanos,
				periodStart("daily", now),
				periodStart("weekly", now),
				periodStart("monthly", now),
			);
		}
		return true;
	}

	/** Forgets the limits of holds that no longer exist (expired); returns how many limited holds remain. */
	pruneHolds(): number {
		this.sql.exec("DELETE FROM hold_limits WHERE request_id NOT IN (SELECT request_id FROM holds)");
		return this.openLimitedHolds();
	}

	openLimitedHolds(): number {
		return this.sql.exec<{ n: number }>("SELECT COUNT(DISTINCT request_id) AS n FROM hold_limits").one().n;
	}

	/** Drops requests that left every window (those of scopes no longer seen, such as expired tokens, too). */
	pruneWindows(now: number): void {
		this.sql.exec("DELETE FROM rate_events WHERE at <= ?", now - RATE_WINDOW_MS);
	}

	/**
	 * Forgets end users' daily spend from before today (their scopes, `<key>/user:<end user>`, have
	 * only a daily cap): a key with many end users keeps one row per user active today, not one per
	 * user ever seen. A row of an earlier day reads as 0 today anyway (`spent`).
	 */
	pruneUserDays(now: number): void {
		this.sql.exec("DELETE FROM spend_periods WHERE day_start < ? AND instr(scope, '/user:') > 0", periodStart("daily", now));
	}

	/** Spend in the period containing `now`. */
	spent(scope: string, period: PeriodKey, now: number): number {
		const [value, start] = PERIOD_COLUMNS[period];
		const row = this.sql
			.exec<Record<string, number>>(
				`SELECT ${value} AS spent${start ? `, ${start} AS period_start` : ""} FROM spend_periods WHERE scope = ?`,
				scope,
			)
			.toArray()[0];
		if (!row) return 0;
		return start === null || row.period_start === periodStart(period, now) ? (row.spent as number) : 0;
	}

	private held(scope: string): number {
		return this.sql
			.exec<{ t: number }>(
				"SELECT COALESCE(SUM(h.amount), 0) AS t FROM holds h JOIN hold_limits s ON s.request_id = h.request_id WHERE s.scope = ? AND s.spend = 1",
				scope,
			)
			.one().t;
	}

	private requestWindow(scope: string, limit: number, now: number): RateWindow {
		const row = this.sql
			.exec<{ n: number; oldest: number | null }>(
				"SELECT COUNT(*) AS n, MIN(at) AS oldest FROM rate_events WHERE scope = ? AND at > ?",
				scope,
				now - RATE_WINDOW_MS,
			)
			.one();
		return { limit, remaining: limit - row.n, resetMs: row.oldest === null ? 0 : row.oldest + RATE_WINDOW_MS - now };
	}

	/**
	 * When `need` more tokens do not fit, `resetMs` is how long until enough tokens leave the window
	 * to admit them (exact: a request leaves the window at `at + RATE_WINDOW_MS`); a request larger
	 * than the whole limit waits for the window to empty and still does not fit.
	 */
	private tokenWindow(scope: string, limit: number, now: number, need: number): RateWindow {
		const rows = this.sql
			.exec<{ at: number; tokens: number }>(
				"SELECT at, tokens FROM rate_events WHERE scope = ? AND at > ? ORDER BY at",
				scope,
				now - RATE_WINDOW_MS,
			)
			.toArray();
		let used = 0;
		for (const r of rows) used += r.tokens;
		let resetMs = rows.length ? (rows[0] as { at: number }).at + RATE_WINDOW_MS - now : 0;
		if (used + need > limit) {
			let left = used;
			for (const r of rows) {
				left -= r.tokens;
				resetMs = r.at + RATE_WINDOW_MS - now;
				if (left + need <= limit) break;
			}
		}
		return { limit, remaining: limit - used, resetMs };
	}
}

function rateRefusal(scope: string, limit: "requests" | "tokens", resetMs: number, tooLarge?: number): LimitRefusal {
	const refusal: LimitRefusal = { refused: "rate_limited", scope, limit, retryAfterMs: Math.max(1, resetMs) };
	return tooLarge === undefined ? refusal : { ...refusal, tooLarge: { requestedTokens: tooLarge } };
}

function tighter(a: RateWindow | undefined, b: RateWindow): RateWindow {
	return !a || b.remaining < a.remaining ? b : a;
}
