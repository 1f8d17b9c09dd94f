/**
 * Spend alerts in a key's ledger (docs/operations.md, "Alerts"). The ledger sees every change of
 * its balance, so it is where a rule crosses: right after a settlement or a credit, in the same
 * synchronous step (no await in between, so concurrent requests cannot both cross it), each
 * rule's armed flag is stepped (alerts/crossing.ts) and a crossing becomes one pending delivery
 * in the ledger's alert outbox (alerts/outbox.ts), which the ledger's alarm sends.
 * The rules are the key's own (pushed by the admin API with the key's name and spend limit:
 * `setProfile`) and the config's operator-wide `alerts`, which apply to every key's ledger.
 */
import { type AlertFacts, type AlertSource, ruleHolds, ruleId, step } from "../../alerts/crossing";
import { AlertOutbox, type SendDeps } from "../../alerts/outbox";
import { type AlertRule, webhookUrlProblem } from "../../alerts/rules";
import { loadConfig } from "../../config";
import { nanosToUsd } from "../../money/pricing";
import { errorText, logEvent } from "../../observability/log-event";
import { ledgerClock } from "./clock";
import type { LedgerLimits, SpendPeriod } from "./limits";
import type { LedgerState } from "./rpc-types";

/** What the admin API tells a key's ledger about its alerts (on create, and on every PATCH). */
export interface AlertProfile {
	keyId: string;
	name: string;
	rules: AlertRule[];
	spendLimitNanos: number | null;
	spendPeriod: SpendPeriod | null;
}

/** What the ledger reads of its env: the config (operator-wide rules), the default target, the secret. */
export interface AlertEnv {
	GATEWAY_CONFIG?: string;
	ALERT_WEBHOOK_URL?: string;
	ALERT_WEBHOOK_SECRET?: string;
	DB?: D1Database;
}

interface SourcedRule {
	source: AlertSource;
	rule: AlertRule;
}

export class LedgerAlerts {
	readonly #outbox: AlertOutbox;
	/** Loaded on first use; null when the admin API never sent one. */
	#profile: AlertProfile | null | undefined;
	#armed: Map<string, boolean> | undefined;

	constructor(
		private readonly sql: SqlStorage,
		private readonly limits: LedgerLimits,
		private readonly env: AlertEnv,
		private readonly ensureAlarm: (at: number) => void,
	) {
		this.#outbox = new AlertOutbox(sql);
	}

	/** Stores the key's own rules, name and spend limit. A new rule starts armed unless it already holds. */
	setProfile(st: LedgerState, profile: AlertProfile): void {
		this.sql.exec(
			"INSERT INTO meta (k, v) VALUES ('alert_profile', ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v",
			JSON.stringify(profile),
		);
		this.#profile = profile;
		const armed = this.#armedFlags();
		const facts = this.#facts(st, 0, 0, ledgerClock.now());
		for (const { source, rule } of this.#rules()) {
			const id = ruleId(source, rule);
			if (!armed.has(id)) this.#setArmed(id, !ruleHolds(rule, facts.after));
		}
	}

	/**
	 * After a change of `balanceDelta` to the balance and `spendDelta` to the spend (already in
	 * `st`): fires each armed rule it crosses, re-arms each it no longer holds.
	 */
	afterChange(st: LedgerState, balanceDelta: number, spendDelta: number): void {
		const rules = this.#rules();
		if (rules.length === 0) return;
		const now = ledgerClock.now();
		const armed = this.#armedFlags();
		const facts = this.#facts(st, balanceDelta, spendDelta, now);
		let fired = false;
		for (const { source, rule } of rules) {
			const id = ruleId(source, rule);
			const was = armed.get(id);
			const next = step(was, ruleHolds(rule, facts.before), ruleHolds(rule, facts.after));
			if (next.armed !== was) this.#setArmed(id, next.armed);
			if (!next.fire) continue;
			fired = true;
			this.#outbox.enqueue(
				{
					event: rule.when,
					keyId: st.keyId,
					subject: this.#profile?.name ?? null,
					target: this.#target(rule),
					payload: this.#payload(st, source, rule, facts.after, now),
				},
				now,
			);
		}
		if (fired) this.ensureAlarm(now);
	}

	/** The alarm's part: sends what is due; when it next has work (null: none). Never throws. */
	async run(fetcher: SendDeps["fetch"]): Promise<number | null> {
		const now = ledgerClock.now();
		try {
			return await this.#outbox.run(now, { fetch: fetcher, secret: this.env.ALERT_WEBHOOK_SECRET, d1: this.env.DB });
		} catch (err) {
			logEvent("error", "ledger: sending alerts failed, will retry", { error: errorText(err) });
			return now + 60_000;
		}
	}

	deliveries(limit: number) {
		return this.#outbox.list(Math.max(1, Math.min(200, Math.floor(limit))));
	}

	#rules(): SourcedRule[] {
		const own = this.#loadProfile()?.rules ?? [];
		const operator = operatorRules(this.env.GATEWAY_CONFIG);
		if (operator.length === 0) return own.map((rule) => ({ source: "key", rule }));
		return [
			...own.map((rule) => ({ source: "key" as const, rule })),
			...operator.map((rule) => ({ source: "operator" as const, rule })),
		];
	}

	#facts(st: LedgerState, balanceDelta: number, spendDelta: number, now: number): { before: AlertFacts; after: AlertFacts } {
		const p = this.#loadProfile();
		let spent: number | null = null;
		if (p?.spendLimitNanos) {
			spent = p.spendPeriod === null || st.keyId === null ? st.spent : this.limits.spent(st.keyId, p.spendPeriod, now);
		}
		const cap = (s: number | null) =>
			s === null || !p?.spendLimitNanos ? null : { limitNanos: p.spendLimitNanos, spentNanos: s };
		return {
			before: { balanceNanos: st.balance - balanceDelta, cap: cap(spent === null ? null : spent - spendDelta) },
			after: { balanceNanos: st.balance, cap: cap(spent) },
		};
	}

	#target(rule: AlertRule): string | null {
		if (rule.webhook_url) return rule.webhook_url;
		const fallback = this.env.ALERT_WEBHOOK_URL;
		return fallback && webhookUrlProblem(fallback) === null ? fallback : null;
	}

	#payload(st: LedgerState, source: AlertSource, rule: AlertRule, f: AlertFacts, now: number): Record<string, unknown> {
		const p = this.#profile;
		return {
			type: `key.${rule.when}`,
			key: { id: st.keyId, name: p?.name ?? null },
			alert: { when: rule.when, at: rule.at ?? null, source },
			balance_usd: nanosToUsd(f.balanceNanos),
			spent_usd: nanosToUsd(st.spent),
			cap:
				f.cap === null
					? null
					: {
							limit_usd: nanosToUsd(f.cap.limitNanos),
							period: p?.spendPeriod ?? null,
							spent_usd: nanosToUsd(f.cap.spentNanos),
							spent_pct: Math.round((f.cap.spentNanos / f.cap.limitNanos) * 1_000_000) / 10_000,
						},
			created: Math.floor(now / 1000),
			time: new Date(now).toISOString(),
		};
	}

	#loadProfile(): AlertProfile | null {
		if (this.#profile === undefined) {
			const raw = this.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'alert_profile'").toArray()[0]?.v;
			this.#profile = raw ? (JSON.parse(raw) as AlertProfile) : null;
		}
		return this.#profile;
	}

	#armedFlags(): Map<string, boolean> {
		if (this.#armed === undefined) {
			this.#armed = new Map();
			for (const r of this.sql.exec<{ rule: string; armed: number }>("SELECT rule, armed FROM alert_arms")) {
				this.#armed.set(r.rule, r.armed === 1);
			}
		}
		return this.#armed;
	}

	#setArmed(id: string, armed: boolean): void {
		this.sql.exec(
			"INSERT INTO alert_arms (rule, armed) VALUES (?, ?) ON CONFLICT(rule) DO UPDATE SET armed = excluded.armed",
			id,
			armed ? 1 : 0,
		);
		this.#armedFlags().set(id, armed);
	}
}

/** The config's operator-wide rules (none when the config does not parse: requests fail on it anyway). */
function operatorRules(raw: string | undefined): AlertRule[] {
	try {
		return loadConfig(raw).alerts;
	} catch {
		return [];
	}
}
