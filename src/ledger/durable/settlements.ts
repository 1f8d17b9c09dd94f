/**
 * Settlement in one key's ledger: the hold released and the real cost debited, exactly once per
 * request id. The `settlements` row is the idempotency check (a replay writes nothing and gets the
 * stored result) and carries the usage record to the outbox. Synchronous SQLite work inside the
 * KeyLedger's RPC methods, in one storage transaction, so each settlement is atomic.
 */
import { assertSafeTotal } from "../../money/nanos";
import type { LedgerAllowances } from "./allowance-grants";
import { ledgerClock } from "./clock";
import type { LedgerHolds } from "./holds";
import type { LedgerLimits } from "./limits";
import type { AllowanceState, LedgerState, SettleInput, SettleResult } from "./rpc-types";

/** How soon after a settlement the outbox is flushed, batching whatever else settles meanwhile. */
const FLUSH_AFTER_MS = 200;

export class LedgerSettlements {
	constructor(
		private readonly sql: SqlStorage,
		private readonly holds: LedgerHolds,
		private readonly allowances: LedgerAllowances,
		private readonly limits: LedgerLimits,
		private readonly transaction: <T>(fn: () => T) => T,
		private readonly ensureAlarm: (at: number) => void,
	) {}

	/** Settles `input` at `cost` (integer nano-dollars, checked by the caller); `st` follows once stored. */
	settle(st: LedgerState, input: SettleInput, cost: number): SettleResult {
		const now = ledgerClock.now();
		const balanceAfter = st.balance - cost;
		const spentAfter = st.spent + cost;
		assertSafeTotal("settle", "balance", balanceAfter);
		assertSafeTotal("settle", "spend", spentAfter);
		let released = 0;
		let held = false;
		let allowance: { used: number; state: AllowanceState } | undefined;
		const applied = this.transaction(() => {
			if (!this.insert(input, cost, balanceAfter, now)) return false;
			// With no hold open (requests served from an allowance), there is none to release.
			const hold = st.openHolds > 0 ? this.holds.release(input.requestId) : null;
			if (hold !== null) {
				released = hold;
				held = true;
			}
			// Served from an allowance (no hold of its own, unless it adopted one): the reservation covered it.
			if (input.allowanceId !== undefined && !held) allowance = this.allowances.settle(input.allowanceId, cost, now);
			this.sql.exec(
				"INSERT INTO meta (k, v) VALUES ('balance', ?), ('spent', ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v",
				balanceAfter,
				spentAfter,
			);
			// Holds under a key without limits (the common case) have no limit rows to settle.
			if (
				st.limitedHolds > 0 &&
				this.limits.settle(input.requestId, cost, input.record.prompt_tokens + input.record.completion_tokens, now)
			) {
				st.limitedHolds--;
			}
			return true;
		});
		if (!applied) return this.replay(input, now);
		st.balance = balanceAfter;
		st.spent = spentAfter;
		st.held -= released + (allowance?.used ?? 0);
		if (held) st.openHolds--;
		this.ensureAlarm(now + FLUSH_AFTER_MS);
		const result = { requestId: input.requestId, costNanos: cost, balanceNanos: balanceAfter, applied: true };
		if (input.allowanceId === undefined) return result;
		return { ...result, allowance: allowance?.state ?? this.allowances.state(input.allowanceId, now) };
	}

	/** The insert is the idempotency check (a replay writes nothing) and puts the record in the outbox. */
	private insert(input: SettleInput, cost: number, balanceAfter: number, now: number): boolean {
		const record = { ...input.record, request_id: input.requestId, cost_nanos: cost, created_at: input.record.created_at ?? now };
		return (
			this.sql.exec(
				"INSERT INTO settlements (request_id, cost, balance_after, created_at, record) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
				input.requestId,
				cost,
				balanceAfter,
				now,
				JSON.stringify(record),
			).rowsWritten > 0
		);
	}

	/** A request settled before: its stored result, nothing debited this time. */
	private replay(input: SettleInput, now: number): SettleResult {
		const prior = this.sql
			.exec<{ cost: number; balance_after: number }>(
				"SELECT cost, balance_after FROM settlements WHERE request_id = ?",
				input.requestId,
			)
			.one();
		const replay = { requestId: input.requestId, costNanos: prior.cost, balanceNanos: prior.balance_after, applied: false };
		return input.allowanceId === undefined ? replay : { ...replay, allowance: this.allowances.state(input.allowanceId, now) };
	}
}
