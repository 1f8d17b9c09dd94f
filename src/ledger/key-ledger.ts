import { DurableObject } from "cloudflare:workers";
import { isLimited, LedgerLimits, LIMITS_SCHEMA, type LimitRefusal, type RateState, type ScopeLimits } from "./limits";
import { flushOutboxJson, type UsageRecordInput } from "./outbox";

/** How long a hold lives without settlement before the alarm voids it. */
export const HOLD_TTL_MS = 15 * 60 * 1000;
/** Settled request ids are remembered this long so a replayed settle debits nothing. */
const SETTLED_TTL_MS = 7 * 24 * 60 * 60 * 1000;
const FLUSH_BATCH = 200;
/** How often the alarm prunes remembered settlements. */
const PRUNE_EVERY_MS = 60 * 60 * 1000;

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
	keyId: string | null;
	balanceNanos: number;
	spentNanos: number;
	heldNanos: number;
	openHolds: number;
	outboxSize: number;
}

/**
 * The ledger of one API key: its balance, open holds and usage outbox. It is the only writer
 * of the balance. Every mutation is synchronous SQLite work with no outbound call in between,
 * so the input gate makes each method atomic; every mutation is idempotent by request id.
 */
export class KeyLedger extends DurableObject<Env> {
	private readonly sql: SqlStorage;
	private readonly limits: LedgerLimits;
	/**
	 * Balance, spend, total held and the planned alarm, loaded once. This object is the only
	 * writer of these values, so memory stays equal to storage; it is updated only after the
	 * SQLite transaction that persists a change has committed.
	 */
	private state:
		| {
				balance: number;
				spent: number;
				held: number;
				/** Open holds with limit rows (rate windows or spend caps) to settle. */
				limitedHolds: number;
				keyId: string | null;
				alarmAt: number;
				prunedAt: number;
		  }
		| undefined;

	constructor(ctx: DurableObjectState, env: Env) {
		super(ctx, env);
		this.sql = ctx.storage.sql;
		this.limits = new LedgerLimits(this.sql);
		this.sql.exec(`
			CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v);
			CREATE TABLE IF NOT EXISTS holds (request_id TEXT PRIMARY KEY, amount INTEGER NOT NULL, created_at INTEGER NOT NULL);
			-- One row per settled request: the idempotency record and, until flushed to D1, the usage outbox.
			CREATE TABLE IF NOT EXISTS settlements (request_id TEXT PRIMARY KEY, cost INTEGER NOT NULL, balance_after INTEGER NOT NULL, created_at INTEGER NOT NULL, record TEXT, attempts INTEGER NOT NULL DEFAULT 0);
			CREATE INDEX IF NOT EXISTS settlements_created ON settlements (created_at);
			CREATE INDEX IF NOT EXISTS settlements_outbox ON settlements (request_id) WHERE record IS NOT NULL;
			CREATE TABLE IF NOT EXISTS credits (idempotency_key TEXT PRIMARY KEY, amount INTEGER NOT NULL, balance_after INTEGER NOT NULL, note TEXT, created_at INTEGER NOT NULL);
		`);
		this.sql.exec(LIMITS_SCHEMA);
		// Holds written before expires_at existed expire HOLD_TTL_MS after they were placed.
		const holdColumns = this.sql.exec<{ name: string }>("SELECT name FROM pragma_table_info('holds')").toArray();
		if (!holdColumns.some((c) => c.name === "expires_at")) this.sql.exec("ALTER TABLE holds ADD COLUMN expires_at INTEGER");
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
				this.ensureAlarm(expiresAt);
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
			this.ensureAlarm(expiresAt);
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
		this.ensureAlarm(expiresAt);
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
		this.ensureAlarm(now + 200);
		return { requestId: input.requestId, costNanos: cost, balanceNanos: balanceAfter, applied: true };
	}

	/** Adds credit (or removes it, with a negative amount); idempotent by key. */
	credit(input: { keyId: string; amountNanos: number; idempotencyKey: string; note?: string; now?: number }): {
		balanceNanos: number;
		applied: boolean;
		/** Set when nothing was applied because the balance would leave its range (below zero, or past 2^53 nanos). */
		refused?: "below_zero" | "too_large" | "idempotency_mismatch";
	} {
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
		const outbox = this.outboxSize();
		return {
			keyId: st.keyId,
			balanceNanos: st.balance,
			spentNanos: st.spent,
			heldNanos: st.held,
			openHolds,
			outboxSize: outbox,
		};
	}

	/** Voids expired holds and flushes the usage outbox to D1, rescheduling itself while work remains. */
	override async alarm(): Promise<void> {
		const now = Date.now();
		const st = this.load();
		st.alarmAt = 0;
		this.sql.exec("UPDATE meta SET v = 0 WHERE k = 'alarm_at'");
		this.expireHolds(now);
		this.limits.pruneWindows(now);
		if (now - st.prunedAt >= PRUNE_EVERY_MS) {
			this.sql.exec("DELETE FROM settlements WHERE created_at < ? AND record IS NULL", now - SETTLED_TTL_MS);
			st.prunedAt = now;
		}
		let pending = true;
		try {
			pending = await this.flush();
		} catch (err) {
			console.error("ledger: usage flush failed, will retry", err);
			const attempts = this.sql
				.exec<{ a: number }>("SELECT COALESCE(MAX(attempts), 0) AS a FROM settlements WHERE record IS NOT NULL")
				.one().a;
			this.sql.exec("UPDATE settlements SET attempts = attempts + 1 WHERE record IS NOT NULL");
			this.scheduleNext(now + Math.min(60_000, 200 * 2 ** Math.min(attempts, 8)));
			return;
		}
		// A backlog drains back to back; otherwise the next alarm is for whatever work is left.
		this.scheduleNext(pending ? Date.now() : undefined);
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

	/** Sends one batch of the outbox to D1; true when more remain. */
	private async flush(): Promise<boolean> {
		const rows = this.sql
			.exec<{ request_id: string; record: string }>(
				"SELECT request_id, record FROM settlements WHERE record IS NOT NULL LIMIT ?",
				FLUSH_BATCH,
			)
			.toArray();
		if (rows.length === 0) return false;
		await flushOutboxJson(
			this.env.DB,
			rows.map((r) => r.record),
		);
		// Flushed records leave the outbox; the row stays as the idempotency record.
		this.sql.exec(
			"UPDATE settlements SET record = NULL WHERE request_id IN (SELECT value FROM json_each(?))",
			JSON.stringify(rows.map((r) => r.request_id)),
		);
		return rows.length === FLUSH_BATCH;
	}

	/** After an alarm run: the next time there is work (outbox, open holds), or none. */
	private scheduleNext(soon: number | undefined): void {
		if (soon !== undefined) {
			this.ensureAlarm(soon);
			return;
		}
		if (this.outboxSize() > 0) {
			this.ensureAlarm(Date.now() + 1000);
			return;
		}
		const next = this.sql
			.exec<{ t: number | null }>("SELECT MIN(COALESCE(expires_at, created_at + ?)) AS t FROM holds", HOLD_TTL_MS)
			.one().t;
		if (next !== null) this.ensureAlarm(next);
	}

	/** Moves the alarm earlier when needed; a no-op (no storage write) when one is already planned in time. */
	private ensureAlarm(at: number): void {
		const st = this.load();
		if (st.alarmAt > 0 && st.alarmAt <= at) return;
		st.alarmAt = at;
		this.sql.exec("INSERT INTO meta (k, v) VALUES ('alarm_at', ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v", at);
		// setAlarm is a storage write covered by the output gate, not an outbound call.
		void this.ctx.storage.setAlarm(at);
	}

	private outboxSize(): number {
		return this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM settlements WHERE record IS NOT NULL").one().n;
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
			alarmAt: Number(meta.get("alarm_at") ?? 0),
			prunedAt: 0,
		};
		return this.state;
	}
}
