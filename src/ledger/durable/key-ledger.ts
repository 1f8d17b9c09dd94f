import { DurableObject } from "cloudflare:workers";
import type { AlertDeliveryRow } from "../../db/alert-deliveries";
import { assertSafeTotal, MAX_REQUEST_NANOS, nanosArg } from "../../money/nanos";
import { migrate } from "../../storage/migrations";
import { LedgerAlarm } from "./alarm";
import { type AlertProfile, LedgerAlerts } from "./alerts";
import { LedgerAllowances } from "./allowance-grants";
import { ledgerClock } from "./clock";
import { type CreditEntry, LedgerCredits } from "./credits";
import { LedgerHolds } from "./holds";
import { LedgerLimits } from "./limits";
import { LedgerOutbox } from "./outbox";
import type {
	AdoptInput,
	AllowanceState,
	AuthorizeInput,
	AuthorizeResult,
	CountRequestInput,
	CountRequestResult,
	CreditInput,
	CreditResult,
	GrantInput,
	GrantResult,
	LedgerInfo,
	LedgerState,
	RevokeInput,
	SettleInput,
	SettleManyAnswer,
	SettleResult,
} from "./rpc-types";
import { LEDGER_MIGRATIONS } from "./schema";
import { LedgerSettlements } from "./settlements";
import { loadLedgerState, rememberKey } from "./state";

export { HOLD_TTL_MS } from "./holds";
export type * from "./rpc-types";

/**
 * The ledger of one API key: its balance, open holds and usage outbox. It is the only writer
 * of the balance. Every mutation is synchronous SQLite work with no outbound call in between,
 * so the input gate makes each method atomic; every mutation is idempotent by request id.
 */
export class KeyLedger extends DurableObject<Env> {
	readonly #sql: SqlStorage;
	readonly #limits: LedgerLimits;
	readonly #outbox: LedgerOutbox;
	readonly #alarms: LedgerAlarm;
	readonly #allowances: LedgerAllowances;
	readonly #credits: LedgerCredits;
	readonly #holds: LedgerHolds;
	readonly #settlements: LedgerSettlements;
	readonly #alerts: LedgerAlerts;
	/** Loaded on first use (see LedgerState). */
	#state: LedgerState | undefined;

	constructor(ctx: DurableObjectState, env: Env) {
		super(ctx, env);
		this.#sql = ctx.storage.sql;
		migrate(ctx.storage, LEDGER_MIGRATIONS);
		this.#limits = new LedgerLimits(this.#sql);
		this.#outbox = new LedgerOutbox(this.#sql);
		this.#allowances = new LedgerAllowances(this.#sql);
		this.#holds = new LedgerHolds(
			this.#sql,
			this.#limits,
			(fn) => ctx.storage.transactionSync(fn),
			(at) => this.#alarms.ensure(at),
		);
		this.#credits = new LedgerCredits(this.#sql, (fn) => ctx.storage.transactionSync(fn));
		this.#settlements = new LedgerSettlements(
			this.#sql,
			this.#holds,
			this.#allowances,
			this.#limits,
			(fn) => this.#transaction(fn),
			(at) => this.#alarms.ensure(at),
		);
		// setAlarm is a storage write covered by the output gate, not an outbound call.
		this.#alarms = new LedgerAlarm(this.#sql, (at) => void ctx.storage.setAlarm(at));
		this.#alerts = new LedgerAlerts(this.#sql, this.#limits, env, (at) => this.#alarms.ensure(at));
	}

	/**
	 * Places a hold when balance minus open holds is positive and no limit of `scopes` is reached
	 * (requests and tokens per minute, then spend caps). A repeated call for the same request is a no-op.
	 */
	authorize(input: AuthorizeInput): AuthorizeResult {
		const hold = nanosArg("authorize", "holdNanos", input.holdNanos, MAX_REQUEST_NANOS);
		if (input.reserveNanos !== undefined) nanosArg("authorize", "reserveNanos", input.reserveNanos, MAX_REQUEST_NANOS);
		if (input.tokens !== undefined) nanosArg("authorize", "tokens", input.tokens, Number.MAX_SAFE_INTEGER);
		const st = this.#load();
		assertSafeTotal("authorize", "amount held", st.held + hold);
		this.#rememberKey(input.payerKeyId);
		return this.#holds.authorize(st, input);
	}

	/**
	 * A request that holds nothing (count_tokens: the engine tokenizes, nothing is billed) still
	 * counts against the requests per minute of its scopes, so a key cannot have its engines work
	 * past its rate for free. Writes one rate event per rpm-limited scope, or nothing when refused.
	 */
	countRequest(input: CountRequestInput): CountRequestResult {
		const now = Date.now();
		const scopes = input.scopes.filter((s) => s.rpm).map((s) => ({ scope: s.scope, rpm: s.rpm }));
		const { refusal, rate } = this.#limits.check(scopes, 0, now);
		if (refusal) return { ok: false, rate, ...refusal };
		this.#limits.countRequest(input.requestId, scopes, now);
		return { ok: true, rate };
	}

	/** Releases the hold and debits the real cost, once per request id; a replay returns the stored result. */
	settle(input: SettleInput): SettleResult {
		const cost = nanosArg("settle", "costNanos", input.costNanos, MAX_REQUEST_NANOS);
		const st = this.#load();
		const result = this.#settlements.settle(st, input, cost);
		if (result.applied && cost > 0) this.#alerts.afterChange(st, -cost, cost); // same synchronous step: one crossing, one delivery
		return result;
	}

	/**
	 * Several requests' settlements in one call (an isolate's batch, settle-batch.ts): each exactly as
	 * `settle` would, in order, and one that fails leaves the others standing.
	 */
	settleMany(inputs: SettleInput[]): SettleManyAnswer[] {
		return inputs.map((input) => {
			try {
				return this.settle(input);
			} catch (err) {
				return { failed: err instanceof Error ? err.message : String(err) };
			}
		});
	}

	/** Adds credit (or removes it, with a negative amount); idempotent by key (credits.ts). */
	credit(input: CreditInput): CreditResult {
		nanosArg("credit", "amountNanos", input.amountNanos, Number.MAX_SAFE_INTEGER, true);
		const st = this.#load();
		this.#rememberKey(input.keyId);
		const result = this.#credits.apply(st, input);
		// A top-up re-arms the rules it lifts the balance out of; a debit may cross one.
		if (result.applied) this.#alerts.afterChange(st, Math.round(input.amountNanos), 0);
		// Credit taken back (or refused for what is held) may leave less than the isolates reserved:
		// they stop using their allowances at their next call and give back what they do not need.
		if ((result.applied && input.amountNanos < 0) || result.refused === "held") this.#allowances.revokeAll();
		return result;
	}

	/** The key's own alert rules, name and spend limit, from the admin API (alerts.ts). */
	setAlerts(profile: AlertProfile): void {
		this.#rememberKey(profile.keyId);
		this.#alerts.setProfile(this.#load(), profile);
	}

	/** This key's alert deliveries, newest first, as they stand (D1 gets a copy after each alarm run). */
	alertDeliveries(limit: number): AlertDeliveryRow[] {
		return this.#alerts.deliveries(limit);
	}

	/** The key's credit history, newest first. */
	creditHistory(limit: number): CreditEntry[] {
		return this.#credits.history(limit);
	}

	info(): LedgerInfo {
		const st = this.#load();
		const openHolds = this.#holds.count();
		const outbox = this.#outbox.size();
		return {
			keyId: st.keyId,
			balanceNanos: st.balance,
			spentNanos: st.spent,
			heldNanos: st.held,
			reservedNanos: this.#allowances.totals().amount,
			openHolds,
			outboxSize: outbox,
		};
	}

	/** The allowances isolates hold (docs/allowances.md): how many, and what they reserve (part of `heldNanos`). */
	allowanceInfo(): { allowances: number; allowanceNanos: number } {
		this.#load();
		const t = this.#allowances.totals();
		return { allowances: t.count, allowanceNanos: t.amount };
	}

	/**
	 * Reserves part of the available balance for an isolate (an edge allowance, docs/allowances.md),
	 * or tops up and extends one it has; counted as held until it expires.
	 */
	grant(input: GrantInput): GrantResult {
		nanosArg("grant", "holdNanos", input.holdNanos, MAX_REQUEST_NANOS);
		// A want past the safe range only asks for as much as there is room for.
		nanosArg("grant", "wantNanos", Math.min(input.wantNanos, Number.MAX_SAFE_INTEGER), Number.MAX_SAFE_INTEGER);
		const st = this.#load();
		this.#rememberKey(input.payerKeyId);
		return this.#allowances.grant(st, input, ledgerClock.now(), (at) => this.#alarms.ensure(at));
	}

	/**
	 * Moves a running request's share of an allowance into a hold of its own, so a request that
	 * outlives its allowance stays covered (its keep-alive then extends that hold). A no-op for a
	 * request that already settled or already holds.
	 */
	adopt(input: AdoptInput): { adopted: boolean; allowance: AllowanceState } {
		const hold = nanosArg("adopt", "holdNanos", input.holdNanos, MAX_REQUEST_NANOS);
		const now = ledgerClock.now();
		const st = this.#load();
		const prior = this.#holds.prior(input.requestId);
		if (prior.settled || prior.hold !== null) {
			return { adopted: prior.hold !== null, allowance: this.#allowances.state(input.allowanceId, now) };
		}
		assertSafeTotal("adopt", "amount held", st.held + hold);
		const { moved, expiresAt } = this.#transaction(() => {
			const m = this.#allowances.adopt(input, now);
			return { moved: m, expiresAt: this.#holds.insert(input.requestId, hold, now) };
		});
		st.held += hold - moved.moved;
		st.openHolds++;
		this.#alarms.ensure(expiresAt);
		return { adopted: true, allowance: moved.state };
	}

	/** An isolate gives back the part of its allowance its running requests do not need. */
	release(input: { allowanceId: string; keepNanos: number }): void {
		nanosArg("release", "keepNanos", input.keepNanos, Number.MAX_SAFE_INTEGER);
		this.#allowances.release(this.#load(), input.allowanceId, input.keepNanos);
	}

	/**
	 * An admin change (PATCH, DELETE of this ledger's key or of a token it pays for): every allowance
	 * is revoked (isolates drop it at their next call), none is granted for a while, and a revoked
	 * key gets no new hold from now on.
	 */
	revoke(input: RevokeInput): { allowancesRevoked: number } {
		const now = ledgerClock.now();
		return this.#transaction(() => this.#allowances.revoke(this.#load(), input, now));
	}

	/** Voids expired holds and flushes the usage outbox to D1 (alarm.ts). */
	override async alarm(): Promise<void> {
		this.#load();
		await this.#alarms.run(Date.now(), {
			expireHolds: (now) => {
				this.#holds.expire(this.#load(), now);
				this.#allowances.expire(this.#load(), now);
			},
			pruneWindows: (now) => this.#limits.pruneWindows(now),
			pruneDays: (now) => this.#limits.pruneUserDays(now),
			nextHoldExpiry: () => minOf(this.#holds.nextExpiry(), this.#allowances.nextExpiry()),
			outbox: this.#outbox,
			d1: this.env.DB,
			alerts: { run: () => this.#alerts.run((req) => fetch(req)) },
		});
	}

	/** Voids holds past their expiry, each exactly once. Returns how many were voided. */
	expireHolds(): number {
		return this.#holds.expire(this.#load(), ledgerClock.now());
	}

	/** Deletes allowances past their expiry (the alarm runs at the earliest); returns what they still reserved. */
	expireAllowances(): number {
		return this.#allowances.expire(this.#load(), ledgerClock.now());
	}

	/** Spend of one scope in the period containing the present (lifetime when `period` is null). */
	spend(input: { scope: string; period?: "daily" | "weekly" | "monthly" | null }): { spentNanos: number } {
		const st = this.#load();
		if (!input.period && input.scope === st.keyId) return { spentNanos: st.spent };
		return { spentNanos: this.#limits.spent(input.scope, input.period ?? "total", ledgerClock.now()) };
	}

	/**
	 * A storage transaction that may change allowance rows: if it fails, what the ledger keeps of
	 * them in memory is dropped (storage rolled back; they are read again).
	 */
	#transaction<T>(fn: () => T): T {
		try {
			return this.ctx.storage.transactionSync(fn);
		} catch (err) {
			this.#allowances.forget();
			throw err;
		}
	}

	#rememberKey(keyId: string): void {
		rememberKey(this.#sql, this.#load(), keyId);
	}

	#load(): LedgerState {
		this.#state ??= loadLedgerState(this.#sql, this.#allowances, this.#limits);
		return this.#state;
	}
}

function minOf(a: number | null, b: number | null): number | null {
	if (a === null) return b;
	if (b === null) return a;
	return Math.min(a, b);
}
