/** What the KeyLedger's RPC methods take and return (key-ledger.ts). */
import type { LimitRefusal, RateState, ScopeLimits } from "./limits";
import type { UsageRecordInput } from "./usage-flush";

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
	| ({ ok: false; rate: RateState } & LimitRefusal)
	/** The key (or the token that called) was revoked: the admin call told this ledger (see RevokeInput). */
	| { ok: false; refused: "revoked"; scope: string; rate?: undefined };

export interface AuthorizeInput {
	/** This ledger's key: the payer of every request it holds (a `vk-tmp-` token's parent). */
	payerKeyId: string;
	requestId: string;
	holdNanos: number;
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

/** A request that holds nothing but counts against the requests per minute of its scopes (count_tokens). */
export interface CountRequestInput {
	requestId: string;
	/** The limits of every key the request runs under; only `rpm` is read. */
	scopes: ScopeLimits[];
}

export type CountRequestResult = { ok: true; rate: RateState } | ({ ok: false; rate: RateState } & LimitRefusal);

export interface SettleInput {
	requestId: string;
	costNanos: number;
	record: UsageRecordInput;
	/**
	 * The allowance the request was served from (no hold of its own): its reservation goes down by
	 * the cost. Ignored when the request holds (it adopted its share) or the allowance is gone.
	 */
	allowanceId?: string;
}

export interface SettleResult {
	requestId: string;
	costNanos: number;
	balanceNanos: number;
	/** false when this request had already been settled: nothing was debited this time. */
	applied: boolean;
	/** With `allowanceId`: that allowance as it stands after this settlement (see AllowanceState). */
	allowance?: AllowanceState;
}

/** One entry of a batch's answer (`settleMany`): its settlement, or why this one failed (the others stand). */
export type SettleManyAnswer = SettleResult | { failed: string };

/**
 * An allowance as the ledger sees it after a call: `live` (usable), `revoked` (the key, its limits
 * or its balance changed: the isolate stops using it and gives back what it does not need) or
 * `gone` (expired or never granted).
 */
export type AllowanceState = "live" | "revoked" | "gone";

export interface GrantInput {
	/** This ledger's key: the payer of every request the allowance serves. */
	payerKeyId: string;
	/** Chosen by the isolate, fresh for each allowance it starts (never reused after it is gone). */
	allowanceId: string;
	/** One request's hold: the unit of the headroom rule and of the allowance's size. */
	holdNanos: number;
	/** How large the isolate wants the allowance (its reservation after the grant). */
	wantNanos: number;
	ttlMs: number;
	/** The available balance must cover this many holds before anything is granted. */
	minHeadroom: number;
	/** false: start a new allowance; true: top up and extend one the isolate already has (refused when it is gone). */
	extend: boolean;
}

export type GrantResult =
	| {
			ok: true;
			/** What this grant added to the reservation (may be 0 on an extension that is already full). */
			grantedNanos: number;
			/** The reservation now. */
			amountNanos: number;
			/** How long from now it lives (the isolate adds this to when it sent the call, never to the ledger's clock). */
			ttlMs: number;
			balanceNanos: number;
	  }
	| { ok: false; reason: "headroom" | "revoked" | "gone" | "paused"; balanceNanos: number };

export interface AdoptInput {
	allowanceId: string;
	requestId: string;
	/** The request's hold: moved out of the allowance into a hold of its own (HOLD_TTL_MS). */
	holdNanos: number;
}

export interface RevokeInput {
	/**
	 * `revoked`: the key `scope` (this ledger's own, or a token it pays for) was revoked: no new hold
	 * is placed for it again. `changed`: its limits or scopes may have changed. Either way every
	 * allowance is revoked and none is granted for `pauseMs`.
	 */
	change: "revoked" | "changed";
	scope: string;
	/** How long grants stay refused (default ALLOWANCE_PAUSE_MS: the longest a key lookup stays cached). */
	pauseMs?: number;
}

export interface LedgerInfo {
	/** This ledger's key, once an authorize or credit has named it. */
	keyId: string | null;
	balanceNanos: number;
	spentNanos: number;
	/** Open holds and live allowances' reservations. */
	heldNanos: number;
	/** Of `heldNanos`, what edge allowances reserve (docs/allowances.md) rather than requests' own holds. */
	reservedNanos: number;
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
}

export interface CreditResult {
	balanceNanos: number;
	applied: boolean;
	/** Set when nothing was applied because the balance would leave its range (below zero, or past 2^53 nanos). */
	refused?: "below_zero" | "held" | "too_large" | "idempotency_mismatch";
	/** With `held`: what requests in flight and edge allowances hold. */
	heldNanos?: number;
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
	/**
	 * How many holds are open (rows of `holds`): a settlement while none is open needs no hold
	 * lookup (a request served from an edge allowance, the common case under load). Never below
	 * the real count: raised once a hold is stored, lowered once its removal is.
	 */
	openHolds: number;
	/** Open holds with limit rows (rate windows or spend caps) to settle. */
	limitedHolds: number;
	/** This ledger's key, remembered from the first authorize or credit. */
	keyId: string | null;
	/** Keys revoked through RevokeInput: nothing new is held for them. */
	revoked: Set<string>;
	/** No allowance is granted before this time (unix ms). */
	grantsPausedUntil: number;
}
