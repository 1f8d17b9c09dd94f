/** What the KeyLedger's RPC methods take and return (key-ledger.ts). */
import type { LimitRefusal, RateState, ScopeLimits } from "./limits";
import type { UsageRecordInput } from "./outbox";

export type AuthorizeResult =
	| {
			ok: true;
			availableNanos: number;
			holdNanos: number;
			/** The balance when the hold was placed (before this request's cost). */
			balanceNanos: number;
			rate?: RateState;
	  }
	| { ok: false; availableNanos: number; requiredNanos: number; rate?: RateState; refused?: undefined }
	| ({ ok: false; rate: RateState } & LimitRefusal);

export interface AuthorizeInput {
	/** This ledger's key: the payer of every request it holds (a `vk-tmp-` token's parent). */
	keyId: string;
	requestId: string;
	holdNanos: number;
	now?: number;
	/**
	 * The limits of every key this request runs under (the ledger's own key, and the token that
	 * called, if any). Checked and counted in the same atomic step as the hold.
	 */
	scopes?: ScopeLimits[];
	/** Tokens counted against tpm until settlement replaces them with the real count. */
	tokens?: number;
	/**
	 * Worst case this request may cost beyond what a single-choice request would (the `n - 1`
	 * extra choices): admitted only when the available balance, and every spend cap's headroom,
	 * covers it. A single-choice request passes 0 and is admitted as long as anything is left.
	 */
	reserveNanos?: number;
	/** How long the hold lives before the alarm voids it (default HOLD_TTL_MS); a queued background run needs longer. */
	ttlMs?: number;
}

export interface SettleInput {
	requestId: string;
	costNanos: number;
	record: UsageRecordInput;
	now?: number;
}

export interface SettleResult {
	requestId: string;
	costNanos: number;
	balanceNanos: number;
	/** false when this request had already been settled: nothing was debited this time. */
	applied: boolean;
}

export interface LedgerInfo {
	/** This ledger's key, once an authorize or credit has named it. */
	keyId: string | null;
	balanceNanos: number;
	spentNanos: number;
	heldNanos: number;
	openHolds: number;
	outboxSize: number;
}

export interface CreditInput {
	/** This ledger's key. */
	keyId: string;
	/** Negative takes credit back. */
	amountNanos: number;
	/** A credit is applied once per key; the same key with another amount is refused. */
	idempotencyKey: string;
	note?: string;
	now?: number;
}

export interface CreditResult {
	balanceNanos: number;
	applied: boolean;
	/** Set when nothing was applied because the balance would leave its range (below zero, or past 2^53 nanos). */
	refused?: "below_zero" | "too_large" | "idempotency_mismatch";
}

/**
 * The ledger's balance, spend and total held, loaded once. The ledger is the only writer of these
 * values, so memory stays equal to storage; it is updated only after the SQLite transaction that
 * persists a change has committed.
 */
export interface LedgerState {
	balance: number;
	spent: number;
	held: number;
	/** Open holds with limit rows (rate windows or spend caps) to settle. */
	limitedHolds: number;
	/** This ledger's key, remembered from the first authorize or credit. */
	keyId: string | null;
}
