import { DurableObject } from "cloudflare:workers";
import { migrate } from "../storage/migrations";
import { LedgerAlarm } from "./ledger-alarm";
import { LedgerOutbox } from "./ledger-outbox";
import { LEDGER_MIGRATIONS } from "./ledger-schema";
import type {
	AuthorizeInput,
	AuthorizeResult,
	CreditInput,
	CreditResult,
	LedgerInfo,
	LedgerState,
	SettleInput,
	SettleResult,
} from "./ledger-types";
import { isLimited, LedgerLimits, type RateState } from "./limits";

export type * from "./ledger-types";

/** How long a hold lives without settlement before the alarm voids it. */
export const HOLD_TTL_MS = 15 * 60 * 1000;

/**
 * The ledger of one API key: its balance, open holds and usage outbox. It is the only writer
 * of the balance. Every mutation is synchronous SQLite work with no outbound call in between,
 * so the input gate makes each method atomic; every mutation is idempotent by request id.
 */
export class KeyLedger extends DurableObject<Env> {
	private readonly sql: SqlStorage;
	private readonly limits: LedgerLimits;
	private readonly outbox: LedgerOutbox;
	private readonly alarms: LedgerAlarm;
	/** Loaded on first use (see LedgerState). */
	private state: LedgerState | undefined;

	constructor(ctx: DurableObjectState, env: Env) {
		super(ctx, env);
		this.sql = ctx.storage.sql;
		migrate(ctx.storage, LEDGER_MIGRATIONS);
		this.limits = new LedgerLimits(this.sql);
		this.outbox = new LedgerOutbox(this.sql);
		// setAlarm is a storage write covered by the output gate, not an outbound call.
		this.alarms = new LedgerAlarm(this.sql, (at) => void ctx.storage.setAlarm(at));
	}

	/**
	 * Places a hold when balance minus open holds is positive and no limit of `scopes` is reached
	 * (requests and tokens per minute, then spend caps). A repeated call for the same request is a no-op.
	 */
	authorize(input: AuthorizeInput): AuthorizeResult {
		const now = input.now ?? Date.now();
		const st = this.load();
		this.rememberKey(input.keyId);
		const available = st.balance - st.held;
		const hold = Math.max(0, Math.round(input.holdNanos));
		const reserve = Math.max(0, Math.round(input.reserveNanos ?? 0));
		const expiresAt = now + (input.ttlMs ?? HOLD_TTL_MS);
		// Scopes without any limit need no checks and no limit rows (the common case).
		const scopes = (input.scopes ?? []).filter(isLimited);
		if (scopes.length === 0 && available > 0 && available >= reserve) {
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
				this.alarms.ensure(expiresAt);
				return { ok: true, availableNanos: available - hold, holdNanos: hold, balanceNanos: st.balance };
			}
		}
		// One lookup for both replays: a request that already settled must not reopen a hold that
		// nothing would release, and a repeated authorize returns the hold it placed.
		const prior = this.sql
			.exec<{ hold: number | null; settled: number }>(
				"SELECT (SELECT amount FROM holds WHERE request_id = ?1) AS hold, EXISTS (SELECT 1 FROM settlements WHERE request_id = ?1) AS settled",
				input.requestId,
			)
			.one();
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
			this.alarms.ensure(expiresAt);
			return { ok: true, availableNanos: available, holdNanos: prior.hold, balanceNanos: st.balance };
		}
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
			this.ctx.storage.transactionSync(() => {
				insertHold();
				if (this.limits.admit(input.requestId, scopes, tokens, now)) st.limitedHolds++;
			});
		}
		st.held += hold;
		this.alarms.ensure(expiresAt);
		const admitted = { ok: true as const, availableNanos: available - hold, holdNanos: hold, balanceNanos: st.balance };
		return rate ? { ...admitted, rate } : admitted;
	}

	/** Releases the hold and debits the real cost, once per request id; a replay returns the stored result. */
	settle(input: SettleInput): SettleResult {
		const now = input.now ?? Date.now();
		const st = this.load();
		const cost = Math.max(0, Math.round(input.costNanos));
		const balanceAfter = st.balance - cost;
		const spentAfter = st.spent + cost;
		let released = 0;
		const applied = this.ctx.storage.transactionSync(() => {
			// The insert is the idempotency check (a replay writes nothing) and puts the record in the outbox.
			const record = {
				...input.record,
				request_id: input.requestId,
				cost_nanos: cost,
				created_at: input.record.created_at ?? now,
			};
			const inserted = this.sql.exec(
				"INSERT INTO settlements (request_id, cost, balance_after, created_at, record) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
				input.requestId,
				cost,
				balanceAfter,
				now,
				JSON.stringify(record),
			).rowsWritten;
			if (inserted === 0) return false;
			for (const h of this.sql.exec<{ amount: number }>(
				"DELETE FROM holds WHERE request_id = ? RETURNING amount",
				input.requestId,
			)) {
				released += h.amount;
			}
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
		if (!applied) {
			const prior = this.sql
				.exec<{ cost: number; balance_after: number }>(
					"SELECT cost, balance_after FROM settlements WHERE request_id = ?",
					input.requestId,
				)
				.one();
			return { requestId: input.requestId, costNanos: prior.cost, balanceNanos: prior.balance_after, applied: false };
		}
		st.balance = balanceAfter;
		st.spent = spentAfter;
		st.held -= released;
		// Flush soon, batching whatever else settles in the meantime.
		this.alarms.ensure(now + 200);
		return { requestId: input.requestId, costNanos: cost, balanceNanos: balanceAfter, applied: true };
	}

	/** Adds credit (or removes it, with a negative amount); idempotent by key. */
	credit(input: CreditInput): CreditResult {
		const st = this.load();
		this.rememberKey(input.keyId);
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
		this.ctx.storage.transactionSync(() => {
			this.sql.exec("INSERT INTO meta (k, v) VALUES ('balance', ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v", after);
			this.sql.exec(
				"INSERT INTO credits (idempotency_key, amount, balance_after, note, created_at) VALUES (?, ?, ?, ?, ?)",
				input.idempotencyKey,
				amount,
				after,
				input.note ?? null,
				input.now ?? Date.now(),
			);
		});
		st.balance = after;
		return { balanceNanos: after, applied: true };
	}

	info(): LedgerInfo {
		const st = this.load();
		const openHolds = this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM holds").one().n;
		const outbox = this.outbox.size();
		return {
			keyId: st.keyId,
			balanceNanos: st.balance,
			spentNanos: st.spent,
			heldNanos: st.held,
			openHolds,
			outboxSize: outbox,
		};
	}

	/** Voids expired holds and flushes the usage outbox to D1 (ledger-alarm.ts). */
	override async alarm(): Promise<void> {
		this.load();
		await this.alarms.run(Date.now(), {
			expireHolds: (now) => this.expireHolds(now),
			pruneWindows: (now) => this.limits.pruneWindows(now),
			nextHoldExpiry: () => this.nextHoldExpiry(),
			outbox: this.outbox,
			d1: this.env.DB,
		});
	}

	/** Voids holds past their expiry, each exactly once. Returns how many were voided. */
	expireHolds(now: number = Date.now()): number {
		const st = this.load();
		let voided = 0;
		for (const h of this.sql.exec<{ amount: number }>(
			"DELETE FROM holds WHERE COALESCE(expires_at, created_at + ?2) <= ?1 RETURNING amount",
			now,
			HOLD_TTL_MS,
		)) {
			st.held -= h.amount;
			voided++;
		}
		if (voided > 0 && st.limitedHolds > 0) st.limitedHolds = this.limits.pruneHolds();
		return voided;
	}

	/** Spend of one scope in the period containing `now` (lifetime when `period` is null). */
	spend(input: { scope: string; period?: "daily" | "weekly" | "monthly" | null; now?: number }): { spentNanos: number } {
		const st = this.load();
		if (!input.period && input.scope === st.keyId) return { spentNanos: st.spent };
		return { spentNanos: this.limits.spent(input.scope, input.period ?? "total", input.now ?? Date.now()) };
	}

	private nextHoldExpiry(): number | null {
		const sql = "SELECT MIN(COALESCE(expires_at, created_at + ?)) AS t FROM holds";
		return this.sql.exec<{ t: number | null }>(sql, HOLD_TTL_MS).one().t;
	}

	private rememberKey(keyId: string): void {
		const st = this.load();
		if (st.keyId !== null) return;
		this.sql.exec("INSERT OR IGNORE INTO meta (k, v) VALUES ('key_id', ?)", keyId);
		st.keyId = keyId;
	}

	private load() {
		if (this.state) return this.state;
		const meta = new Map<string, unknown>();
		for (const row of this.sql.exec<{ k: string; v: SqlStorageValue }>("SELECT k, v FROM meta")) meta.set(row.k, row.v);
		const held = this.sql.exec<{ t: number }>("SELECT COALESCE(SUM(amount), 0) AS t FROM holds").one().t;
		this.state = {
			balance: Number(meta.get("balance") ?? 0),
			spent: Number(meta.get("spent") ?? 0),
			held,
			limitedHolds: this.limits.openLimitedHolds(),
			keyId: (meta.get("key_id") as string | undefined) ?? null,
		};
		return this.state;
	}
}
