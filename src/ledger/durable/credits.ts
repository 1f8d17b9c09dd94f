/**
 * Credits of one key's ledger: top-ups, debits and the initial balance, each applied once per
 * idempotency key, kept as the key's credit history. Synchronous SQLite work inside the
 * KeyLedger's RPC methods, so each step is atomic.
 */

import { ledgerClock } from "./clock";
import type { CreditInput, CreditResult, LedgerState } from "./rpc-types";

/** One line of a key's credit history, newest first (GET /admin/keys/{id}/credits). */
export interface CreditEntry {
	amount: number;
	balanceAfter: number;
	note: string | null;
	createdAt: number;
}

export class LedgerCredits {
	constructor(
		private readonly sql: SqlStorage,
		private readonly transaction: <T>(fn: () => T) => T,
	) {}

	/** Adds credit (or removes it, with a negative amount); idempotent by key. `st.balance` follows once it is stored. */
	apply(st: LedgerState, input: CreditInput): CreditResult {
		const amount = Math.round(input.amountNanos);
		const prior = this.sql
			.exec<{ amount: number; balance_after: number }>(
				"SELECT amount, balance_after FROM credits WHERE idempotency_key = ?",
				input.idempotencyKey,
			)
			.toArray()[0];
		if (prior) {
			// The same key with another amount is a different request, not a replay.
			if (prior.amount !== amount) return { balanceNanos: st.balance, applied: false, refused: "idempotency_mismatch" };
			return { balanceNanos: prior.balance_after, applied: false };
		}
		const after = st.balance + amount;
		// A debit may take back credit, never more than there is: the balance stays at or above zero.
		if (!Number.isSafeInteger(after) || (amount < 0 && after < 0)) {
			return { balanceNanos: st.balance, applied: false, refused: amount < 0 ? "below_zero" : "too_large" };
		}
		// Nor may it take what running requests (and edge allowances) hold: their settlements would
		// then take the balance below zero by more than one hold.
		if (amount < 0 && after < st.held) return { balanceNanos: st.balance, applied: false, refused: "held", heldNanos: st.held };
		this.transaction(() => {
			this.sql.exec("INSERT INTO meta (k, v) VALUES ('balance', ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v", after);
			this.sql.exec(
				"INSERT INTO credits (idempotency_key, amount, balance_after, note, created_at) VALUES (?, ?, ?, ?, ?)",
				input.idempotencyKey,
				amount,
				after,
				input.note ?? null,
				ledgerClock.now(),
			);
		});
		st.balance = after;
		return { balanceNanos: after, applied: true };
	}

	/** The newest `limit` credits, newest first. */
	history(limit: number): CreditEntry[] {
		const n = Math.max(1, Math.min(1000, Math.floor(limit)));
		return this.sql
			.exec<{ amount: number; balance_after: number; note: string | null; created_at: number }>(
				"SELECT amount, balance_after, note, created_at FROM credits ORDER BY created_at DESC, rowid DESC LIMIT ?",
				n,
			)
			.toArray()
			.map((r) => ({ amount: r.amount, balanceAfter: r.balance_after, note: r.note, createdAt: r.created_at }));
	}
}
