/**
 * Holds of one key's ledger: the worst-case cost of a running request, placed before the engine
 * is called (with the key's limits checked and counted in the same step), released by its
 * settlement or voided by the alarm once it expires. Synchronous SQLite work inside the
 * KeyLedger's RPC methods, so each step is atomic.
 */

import { ledgerClock } from "./clock";
import { isLimited, type LedgerLimits, type RateState } from "./limits";
import type { AuthorizeInput, AuthorizeResult, LedgerState } from "./rpc-types";
import { renewSlots, SLOT_LEASE_MS } from "./slots";

/** How long a hold lives without settlement before the alarm voids it. */
export const HOLD_TTL_MS = 15 * 60 * 1000;

export class LedgerHolds {
	constructor(
		private readonly sql: SqlStorage,
		private readonly limits: LedgerLimits,
		private readonly transaction: <T>(fn: () => T) => T,
		private readonly ensureAlarm: (at: number) => void,
	) {}

	/**
	 * Places a hold when balance minus what is held is positive and no limit of `scopes` is reached
	 * (requests and tokens per minute, then spend caps). A repeated call for the same request is a
	 * no-op that returns the hold it placed (and extends its life). `st` follows once stored.
	 */
	authorize(st: LedgerState, input: AuthorizeInput): AuthorizeResult {
		const now = ledgerClock.now();
		const available = st.balance - st.held;
		const hold = Math.max(0, Math.round(input.holdNanos));
		const reserve = Math.max(0, Math.round(input.reserveNanos ?? 0));
		const expiresAt = now + (input.ttlMs ?? HOLD_TTL_MS);
		// Scopes without any limit need no checks and no limit rows (the common case).
		const scopes = (input.scopes ?? []).filter(isLimited);
		// A key revoked since (told by the admin call) gets no new hold, whatever its cached lookup says.
		const revoked = st.revoked.size > 0 ? revokedScope(st.revoked, input) : null;
		if (revoked === null && scopes.length === 0 && available > 0 && available >= reserve) {
			// The common case is one statement: the insert is also the replay check (a request that
			// already settled, or already holds, writes nothing and takes the lookup below).
			const placed = this.sql.exec(
				"INSERT INTO holds (request_id, amount, created_at, expires_at) SELECT ?1, ?2, ?3, ?4 WHERE NOT EXISTS (SELECT 1 FROM settlements WHERE request_id = ?1) ON CONFLICT DO NOTHING",
				input.requestId,
				hold,
				now,
				expiresAt,
			).rowsWritten;
			if (placed > 0) {
				st.held += hold;
				st.openHolds++;
				this.ensureAlarm(expiresAt);
				return { ok: true, availableNanos: available - hold, holdNanos: hold, balanceNanos: st.balance };
			}
		}
		// One lookup for both replays: a request that already settled must not reopen a hold that
		// nothing would release, and a repeated authorize returns the hold it placed.
		const prior = this.prior(input.requestId);
		if (prior.settled) return { ok: true, availableNanos: available, holdNanos: 0, balanceNanos: st.balance };
		if (prior.hold !== null) {
			// A replay is a run picking up the hold placed for it (a queued background response):
			// the hold lives on for at least another TTL from now.
			this.sql.exec(
				"UPDATE holds SET expires_at = MAX(COALESCE(expires_at, created_at + ?2), ?3) WHERE request_id = ?1",
				input.requestId,
				HOLD_TTL_MS,
				expiresAt,
			);
			// And its concurrency slots' leases (slots.ts): the keep-alive is this replay.
			if (st.limitedHolds > 0) renewSlots(this.sql, input.requestId, now + (input.ttlMs ?? SLOT_LEASE_MS), now);
			this.ensureAlarm(expiresAt);
			return { ok: true, availableNanos: available, holdNanos: prior.hold, balanceNanos: st.balance };
		}
		if (revoked !== null) return { ok: false, refused: "revoked", scope: revoked };
		const tokens = input.tokens ?? 0;
		let rate: RateState | undefined;
		if (scopes.length) {
			const checked = this.limits.check(
				scopes,
				tokens,
				now,
				st.keyId ? { scope: st.keyId, spentNanos: st.spent } : undefined,
				reserve,
			);
			if (checked.refusal) return { ok: false, rate: checked.rate, ...checked.refusal };
			if (checked.rate.requests || checked.rate.tokens) rate = checked.rate;
		}
		if (available <= 0 || available < reserve) {
			const refusal = { ok: false as const, availableNanos: available, requiredNanos: Math.max(hold, reserve) };
			return rate ? { ...refusal, rate } : refusal;
		}
		const insertHold = () =>
			this.sql.exec(
				"INSERT INTO holds (request_id, amount, created_at, expires_at) VALUES (?, ?, ?, ?)",
				input.requestId,
				hold,
				now,
				expiresAt,
			);
		if (scopes.length === 0) insertHold();
		else {
			this.transaction(() => {
				insertHold();
				// A queued background response's slot lives as long as its hold: the queue, not an isolate, runs it.
				if (this.limits.admit(input.requestId, scopes, tokens, now, input.ttlMs ?? SLOT_LEASE_MS)) st.limitedHolds++;
			});
		}
		st.held += hold;
		st.openHolds++;
		this.ensureAlarm(expiresAt);
		const admitted = { ok: true as const, availableNanos: available - hold, holdNanos: hold, balanceNanos: st.balance };
		return rate ? { ...admitted, rate } : admitted;
	}

	/** Inserts the hold of a request that moves out of an allowance (adopt); the caller adjusts `held`. */
	insert(requestId: string, amount: number, now: number): number {
		const expiresAt = now + HOLD_TTL_MS;
		this.sql.exec(
			"INSERT INTO holds (request_id, amount, created_at, expires_at) VALUES (?, ?, ?, ?)",
			requestId,
			amount,
			now,
			expiresAt,
		);
		return expiresAt;
	}

	/** What the ledger knows of a request: its open hold (or null) and whether it settled. */
	prior(requestId: string): { hold: number | null; settled: number } {
		return this.sql
			.exec<{ hold: number | null; settled: number }>(
				"SELECT (SELECT amount FROM holds WHERE request_id = ?1) AS hold, EXISTS (SELECT 1 FROM settlements WHERE request_id = ?1) AS settled",
				requestId,
			)
			.one();
	}

	/** Voids holds past their expiry, each exactly once. Returns how many were voided. */
	expire(st: LedgerState, now: number): number {
		let voided = 0;
		for (const h of this.sql.exec<{ amount: number }>(
			"DELETE FROM holds WHERE COALESCE(expires_at, created_at + ?2) <= ?1 RETURNING amount",
			now,
			HOLD_TTL_MS,
		)) {
			st.held -= h.amount;
			voided++;
		}
		if (voided > 0) {
			// Counted again rather than lowered: exact even for a row stored by other means (an old ledger's).
			st.openHolds = this.count();
			if (st.limitedHolds > 0) st.limitedHolds = this.limits.pruneHolds();
		}
		return voided;
	}

	nextExpiry(): number | null {
		const sql = "SELECT MIN(COALESCE(expires_at, created_at + ?)) AS t FROM holds";
		return this.sql.exec<{ t: number | null }>(sql, HOLD_TTL_MS).one().t;
	}

	/** How many holds are open. */
	count(): number {
		return this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM holds").one().n;
	}

	/** Deletes a request's hold at its settlement; returns what it held, null when it held nothing. */
	release(requestId: string): number | null {
		let released: number | null = null;
		for (const h of this.sql.exec<{ amount: number }>("DELETE FROM holds WHERE request_id = ? RETURNING amount", requestId)) {
			released = (released ?? 0) + h.amount;
		}
		return released;
	}
}

/** The first key of a request that was revoked (the ledger's own, or the token that called), or null. */
function revokedScope(revoked: Set<string>, input: AuthorizeInput): string | null {
	if (revoked.has(input.payerKeyId)) return input.payerKeyId;
	for (const s of input.scopes ?? []) if (revoked.has(s.scope)) return s.scope;
	return null;
}
