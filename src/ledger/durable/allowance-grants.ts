/**
 * The ledger's side of edge allowances (docs/allowances.md): an isolate's reservation of part of
 * the key's available balance, counted as held (like a hold) until it expires, is used up by the
 * settlements of the requests it served, or is given back. Everything here is synchronous SQLite
 * work on the ledger's storage, run inside the ledger's RPC methods, so each step is atomic.
 *
 * The money rule: a grant never reserves more than the available balance (balance − holds −
 * allowances) minus half the headroom, so reservations never exceed what is there; a request
 * served from an allowance is covered by it, and its settlement lowers the reservation by what it
 * debited. So allowances add nothing to the overspend bound of the synchronous path.
 */
import type { SqlExec } from "../../storage/migrations";
import type { AdoptInput, AllowanceState, GrantInput, GrantResult, LedgerState, RevokeInput } from "./rpc-types";

/** After an admin change (PATCH, DELETE), no allowance is granted for this long: the longest a key lookup stays cached (60 s at the edge + 10 s in an isolate), and a margin. */
export const ALLOWANCE_PAUSE_MS = 75_000;

/** Rows kept in memory at most (an isolate's allowance ids are fresh each time; old ones are rarely read again). */
const MAX_KNOWN_ROWS = 10_000;

type Row = {
	amount: number;
	expires_at: number;
	revoked: number;
};

export class LedgerAllowances {
	/**
	 * The rows read so far, kept equal to storage by every write below (null: known absent), so a
	 * settlement needs no read. A transaction that fails after changing one calls `forget`.
	 */
	private readonly rows = new Map<string, Row | null>();

	constructor(private readonly sql: SqlExec) {}

	/** Drops what is known of the rows (after a failed transaction): they are read again. */
	forget(): void {
		this.rows.clear();
	}

	/**
	 * Starts, or tops up and extends, an allowance. Refused while the key (or its ledger) is revoked,
	 * while grants are paused after an admin change, when extending one that is gone or revoked, and
	 * when the available balance is below `minHeadroom` holds.
	 */
	grant(st: LedgerState, input: GrantInput, now: number, ensureAlarm: (at: number) => void): GrantResult {
		const refuse = (reason: "headroom" | "revoked" | "gone" | "paused"): GrantResult => ({
			ok: false,
			reason,
			balanceNanos: st.balance,
		});
		if (st.revoked.has(input.payerKeyId)) return refuse("revoked");
		if (now < st.grantsPausedUntil) return refuse("paused");
		const row = this.row(input.allowanceId);
		if (input.extend) {
			if (!row || row.expires_at <= now) return refuse("gone");
			if (row.revoked) return refuse("revoked");
		} else if (row && (row.revoked || row.expires_at <= now)) {
			return refuse(row.revoked ? "revoked" : "gone");
		}
		const unit = Math.max(1, Math.round(input.holdNanos));
		const headroom = Math.max(2, Math.floor(input.minHeadroom));
		const available = st.balance - st.held;
		if (available < headroom * unit) return refuse("headroom");
		const current = row?.amount ?? 0;
		// Half the headroom always stays unreserved, for the synchronous path and other isolates.
		const room = available - Math.ceil(headroom / 2) * unit;
		const granted = Math.max(0, Math.min(Math.round(input.wantNanos) - current, room));
		if (!row && granted < unit) return refuse("headroom");
		const ttl = Math.max(1, Math.round(input.ttlMs));
		const expiresAt = now + ttl;
		this.sql.exec(
			"INSERT INTO allowances (id, amount, unit, expires_at) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (id) DO UPDATE SET amount = amount + ?2, unit = ?3, expires_at = MAX(expires_at, ?4)",
			input.allowanceId,
			granted,
			unit,
			expiresAt,
		);
		this.rows.set(input.allowanceId, {
			amount: current + granted,
			expires_at: Math.max(row?.expires_at ?? expiresAt, expiresAt),
			revoked: row?.revoked ?? 0,
		});
		st.held += granted;
		ensureAlarm(expiresAt);
		return { ok: true, grantedNanos: granted, amountNanos: current + granted, ttlMs: ttl, balanceNanos: st.balance };
	}

	/**
	 * At the settlement of a request served from the allowance (inside the settle transaction): the
	 * reservation goes down by what was debited. A settlement after the allowance is gone just debits.
	 */
	settle(id: string, cost: number, now: number): { used: number; state: AllowanceState } {
		const row = this.row(id);
		if (!row) return { used: 0, state: "gone" };
		const used = Math.min(row.amount, cost);
		if (used > 0) {
			this.sql.exec("UPDATE allowances SET amount = amount - ? WHERE id = ?", used, id);
			row.amount -= used;
		}
		// The caller lowers `held` by `used` once its transaction has committed.
		return { used, state: stateOf(row, now) };
	}

	/**
	 * Moves a running request's share out of the allowance into a hold of its own (the caller inserts
	 * the hold): the reservation goes down by at most the hold. Returns how much left the allowance.
	 */
	adopt(input: AdoptInput, now: number): { moved: number; state: AllowanceState } {
		const row = this.row(input.allowanceId);
		if (!row) return { moved: 0, state: "gone" };
		const moved = Math.min(row.amount, Math.max(0, Math.round(input.holdNanos)));
		if (moved > 0) {
			this.sql.exec("UPDATE allowances SET amount = amount - ? WHERE id = ?", moved, input.allowanceId);
			row.amount -= moved;
		}
		// The caller lowers `held` by `moved` (and adds the hold) once its transaction has committed.
		return { moved, state: stateOf(row, now) };
	}

	/** The isolate gives back what it does not need: the reservation shrinks to `keepNanos` (what its running requests hold). */
	release(st: LedgerState, id: string, keepNanos: number): void {
		const row = this.row(id);
		if (!row) return;
		const keep = Math.max(0, Math.round(keepNanos));
		if (row.amount <= keep) return;
		this.sql.exec("UPDATE allowances SET amount = ? WHERE id = ?", keep, id);
		st.held -= row.amount - keep;
		row.amount = keep;
	}

	/**
	 * An admin change (PATCH, DELETE of the ledger's key or of a token it pays for), inside the
	 * caller's transaction: every allowance is revoked (isolates drop it at their next call), none is
	 * granted for a while, and a revoked key gets no new hold from now on. `st` follows.
	 */
	revoke(st: LedgerState, input: RevokeInput, now: number): { allowancesRevoked: number } {
		const until = now + (input.pauseMs ?? ALLOWANCE_PAUSE_MS);
		if (input.change === "revoked") {
			this.sql.exec("INSERT OR IGNORE INTO revoked_scopes (scope, at) VALUES (?, ?)", input.scope, now);
		}
		if (until > st.grantsPausedUntil) {
			this.sql.exec(
				"INSERT INTO meta (k, v) VALUES ('grants_paused_until', ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v",
				until,
			);
		}
		const revoked = this.revokeAll();
		if (input.change === "revoked") st.revoked.add(input.scope);
		st.grantsPausedUntil = Math.max(st.grantsPausedUntil, until);
		return { allowancesRevoked: revoked };
	}

	/** Marks every allowance revoked: isolates stop using them at their next call. Their reservations stay until released or expired. */
	revokeAll(): number {
		const revoked = this.sql.exec("UPDATE allowances SET revoked = 1 WHERE revoked = 0").rowsWritten;
		for (const row of this.rows.values()) if (row) row.revoked = 1;
		return revoked;
	}

	/** Deletes allowances past their expiry; returns what they still reserved. */
	expire(st: LedgerState, now: number): number {
		let freed = 0;
		for (const r of this.sql.exec<{ id: string; amount: number }>(
			"DELETE FROM allowances WHERE expires_at <= ? RETURNING id, amount",
			now,
		)) {
			freed += r.amount;
			this.rows.delete(r.id);
		}
		st.held -= freed;
		return freed;
	}

	nextExpiry(): number | null {
		return this.sql.exec<{ t: number | null }>("SELECT MIN(expires_at) AS t FROM allowances").one().t;
	}

	/** How many allowances exist and what they reserve (expired ones until the alarm deletes them). */
	totals(): { count: number; amount: number } {
		return this.sql
			.exec<{ count: number; amount: number }>("SELECT COUNT(*) AS count, COALESCE(SUM(amount), 0) AS amount FROM allowances")
			.one();
	}

	/** How the allowance stands now, for a caller that changed nothing. */
	state(id: string, now: number): AllowanceState {
		const row = this.row(id);
		return row ? stateOf(row, now) : "gone";
	}

	private row(id: string): Row | undefined {
		const known = this.rows.get(id);
		if (known !== undefined) return known ?? undefined;
		const row = this.sql.exec<Row>("SELECT amount, expires_at, revoked FROM allowances WHERE id = ?", id).toArray()[0];
		if (this.rows.size >= MAX_KNOWN_ROWS) this.rows.clear();
		this.rows.set(id, row ?? null);
		return row;
	}
}

function stateOf(row: Row, now: number): AllowanceState {
	if (row.revoked) return "revoked";
	return row.expires_at > now ? "live" : "gone";
}
