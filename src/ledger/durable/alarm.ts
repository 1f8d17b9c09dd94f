/**
 * The KeyLedger's alarm: what it does and when it runs next. A run voids expired holds (and deletes
 * expired edge allowances, allowance-grants.ts), drops
 * rate events that left their window, forgets old settlements (hourly) and flushes the usage
 * outbox to D1, backing off while D1 fails; then the alarm is planned for the next work there
 * is (outbox records, the earliest hold expiry), or not at all. Planning it is a storage write
 * covered by the output gate, not an outbound call.
 */
import type { SqlExec } from "../../storage/migrations";
import type { LedgerOutbox } from "./outbox";

/** How often a run forgets old settlements. */
const PRUNE_EVERY_MS = 60 * 60 * 1000;

/** What a run works on: the ledger's holds and limits, its outbox and D1. */
export interface AlarmWork {
	expireHolds(now: number): void;
	pruneWindows(now: number): void;
	/** Hourly: forgets what only mattered on an earlier day (end users' daily spend). */
	pruneDays(now: number): void;
	/** When the earliest open hold expires (unix ms), or null when none is open. */
	nextHoldExpiry(): number | null;
	outbox: LedgerOutbox;
	d1: D1Database;
	/** Sends due alert webhooks (alerts.ts); returns when it next has work, or null. Never throws. */
	alerts?: { run(): Promise<number | null> };
}

export class LedgerAlarm {
	/** When the alarm is planned (unix ms; 0: not planned), as meta `alarm_at` stores it; read on first use. */
	private plannedAt: number | undefined;
	private prunedAt = 0;

	constructor(
		private readonly sql: SqlExec,
		private readonly setAlarm: (at: number) => void,
	) {}

	/** Moves the alarm earlier when needed; a no-op (no storage write) when one is already planned in time. */
	ensure(at: number): void {
		this.plannedAt ??= Number(
			this.sql.exec<{ v: SqlStorageValue }>("SELECT v FROM meta WHERE k = 'alarm_at'").toArray()[0]?.v ?? 0,
		);
		if (this.plannedAt > 0 && this.plannedAt <= at) return;
		this.plannedAt = at;
		this.sql.exec("INSERT INTO meta (k, v) VALUES ('alarm_at', ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v", at);
		this.setAlarm(at);
	}

	/** Plans the alarm for the alerts' next work, once their run is over. */
	private async afterAlerts(run: Promise<number | null> | undefined): Promise<void> {
		const at = run ? await run : null;
		if (at !== null) this.ensure(at);
	}

	/** One alarm run, rescheduling itself while work remains. */
	async run(now: number, work: AlarmWork): Promise<void> {
		this.plannedAt = 0;
		this.sql.exec("UPDATE meta SET v = 0 WHERE k = 'alarm_at'");
		work.expireHolds(now);
		work.pruneWindows(now);
		if (now - this.prunedAt >= PRUNE_EVERY_MS) {
			work.outbox.pruneSettled(now);
			work.pruneDays(now);
			this.prunedAt = now;
		}
		// Alert webhooks go out beside the usage flush: a slow receiver never holds usage back.
		const alerts = work.alerts?.run();
		let pending: boolean;
		try {
			pending = await work.outbox.flush(work.d1);
		} catch (err) {
			console.error("ledger: usage flush failed, will retry", err);
			this.ensure(now + work.outbox.failed());
			await this.afterAlerts(alerts);
			return;
		}
		await this.afterAlerts(alerts);
		// A backlog drains back to back; otherwise the next alarm is for whatever work is left.
		if (pending) this.ensure(Date.now());
		else if (work.outbox.size() > 0) this.ensure(Date.now() + 1000);
		else {
			const next = work.nextHoldExpiry();
			if (next !== null) this.ensure(next);
		}
	}
}
