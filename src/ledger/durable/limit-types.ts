/** The limits a KeyLedger checks with a hold, and what it answers (limits.ts, slots.ts). */
import type { SpendPeriod } from "./spend-periods";

/** The limits of one key that pays through this ledger: the ledger's own key, or a token it minted. */
export interface ScopeLimits {
	/** The key id; for an end user's share of a key, `<key id>/user:<end user>` (see `user`). */
	scope: string;
	rpm?: number | null;
	tpm?: number | null;
	spendLimitNanos?: number | null;
	/** Without a period the spend limit covers the key's whole life. */
	spendPeriod?: SpendPeriod | null;
	/** Requests of this scope in flight at once (each holds a slot with a lease, slots.ts). */
	maxConcurrent?: number | null;
	/**
	 * Set on the scope of one end user of a key (`per_user_rpm` as `rpm`, `per_user_daily_usd` as a
	 * daily spend limit): its refusals name the per-user limit, and its window is not shown in the
	 * x-ratelimit-* headers, which are the key's.
	 */
	user?: { keyId: string; endUser: string };
}

export interface RateWindow {
	limit: number;
	remaining: number;
	/** Milliseconds until the oldest counted request (or tokens) leaves the window. */
	resetMs: number;
}

/** The tightest request and token windows over every scope of a request. */
export interface RateState {
	requests?: RateWindow;
	tokens?: RateWindow;
}

export type LimitRefusal =
	| {
			refused: "rate_limited";
			scope: string;
			limit: "requests" | "tokens";
			/** When this request would be admitted again: the moment enough of the window has left it. */
			retryAfterMs: number;
			/** Set when the request's tokens exceed the whole tpm limit: waiting never admits it. */
			tooLarge?: { requestedTokens: number };
			/** Set when the scope is an end user's share of a key (`per_user_rpm`). */
			user?: ScopeLimits["user"];
	  }
	| {
			refused: "spend_limit";
			scope: string;
			limitNanos: number;
			spentNanos: number;
			period: SpendPeriod | null;
			/** Unix milliseconds when the period ends, or null for a lifetime limit. */
			resetsAt: number | null;
			/** Set when the scope is an end user's share of a key (`per_user_daily_usd`). */
			user?: ScopeLimits["user"];
	  }
	| {
			refused: "concurrency_limited";
			scope: string;
			/** The scope's max_concurrent. */
			limit: number;
			/** When the earliest slot's lease ends, at the latest: a slot may free sooner (its request settles). */
			retryAfterMs: number;
	  };
