/**
 * The ledger's side of the usage outbox: settlements whose usage record is not in D1 yet
 * (`settlements.record` set). The ledger's alarm sends them in batches (outbox.ts writes them
 * to D1) and backs off while D1 fails; a flushed row stays as the request's idempotency record
 * until it is old enough to forget.
 */
import type { SqlExec } from "../../storage/migrations";
import { flushOutboxJson } from "./usage-flush";

const FLUSH_BATCH = 200;
/** Settled request ids are remembered this long so a replayed settle debits nothing. */
export const SETTLED_TTL_MS = 7 * 24 * 60 * 60 * 1000;
/** The longest wait between two flush attempts while D1 fails. */
const MAX_BACKOFF_MS = 60_000;

export class LedgerOutbox {
	constructor(private readonly sql: SqlExec) {}

	size(): number {
		return this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM settlements WHERE record IS NOT NULL").one().n;
	}

	/** Sends one batch to D1; true when more remain. */
	async flush(d1: D1Database): Promise<boolean> {
		const rows = this.sql
			.exec<{ request_id: string; record: string }>(
				"SELECT request_id, record FROM settlements WHERE record IS NOT NULL LIMIT ?",
				FLUSH_BATCH,
			)
			.toArray();
		if (rows.length === 0) return false;
		// A record's `request_id` is its row's (settle writes both): one list serves D1's rollup and the update below.
		const ids = JSON.stringify(rows.map((r) => r.request_id));
		await flushOutboxJson(
			d1,
			rows.map((r) => r.record),
			ids,
		);
		// Flushed records leave the outbox; the row stays as the idempotency record.
		this.sql.exec("UPDATE settlements SET record = NULL WHERE request_id IN (SELECT value FROM json_each(?))", ids);
		return rows.length === FLUSH_BATCH;
	}

	/** After a failed flush: counts the attempt and returns how long to wait before the next (doubling, up to a minute). */
	failed(): number {
		const attempts = this.sql
			.exec<{ a: number }>("SELECT COALESCE(MAX(attempts), 0) AS a FROM settlements WHERE record IS NOT NULL")
			.one().a;
		this.sql.exec("UPDATE settlements SET attempts = attempts + 1 WHERE record IS NOT NULL");
		return Math.min(MAX_BACKOFF_MS, 200 * 2 ** Math.min(attempts, 8));
	}

	/** Forgets flushed settlements older than SETTLED_TTL_MS. */
	pruneSettled(now: number): void {
		this.sql.exec("DELETE FROM settlements WHERE created_at < ? AND record IS NULL", now - SETTLED_TTL_MS);
	}
}
