/**
 * A model's batch lines in its BatchDispatcher's SQLite: each line's state is written before it
 * runs (`running`, its node and attempt) and after (`ok` or `error` with its result line), so a
 * dispatcher that restarts finds the lines it was running and runs them again under the same
 * attempt's request id, whose hold and settlement the ledger keys by it: billed once.
 */
import { type Migration, migrate, type SqlExec } from "../storage/migrations";

export type LineState = "queued" | "running" | "ok" | "error";
/** `running`: lines go out; `cancelling`/`expiring`: none do, the running ones finish; then the batch ends. */
export type BatchState = "running" | "cancelling" | "expiring";

export type StoredBatch = {
	id: string;
	endpoint: string;
	principal: string;
	caller_key_id: string;
	expires_at: number;
	state: BatchState;
};

export type QueuedLine = {
	batch_id: string;
	idx: number;
	custom_id: string;
	body: string;
	grp: string;
	attempt: number;
	tried: string;
};

const MIGRATIONS: Migration[] = [
	{
		name: "batches and lines",
		up(sql: SqlExec) {
			sql.exec(`CREATE TABLE IF NOT EXISTS batch (id TEXT PRIMARY KEY, endpoint TEXT NOT NULL, principal TEXT NOT NULL,
				caller_key_id TEXT NOT NULL, expires_at INTEGER NOT NULL, state TEXT NOT NULL, seq INTEGER NOT NULL)`);
			sql.exec(`CREATE TABLE IF NOT EXISTS lines (batch_id TEXT NOT NULL, idx INTEGER NOT NULL, custom_id TEXT NOT NULL,
				body TEXT NOT NULL, grp TEXT NOT NULL, state TEXT NOT NULL, attempt INTEGER NOT NULL DEFAULT 0,
				tried TEXT NOT NULL DEFAULT '[]', node TEXT, result TEXT, cost INTEGER NOT NULL DEFAULT 0,
				PRIMARY KEY (batch_id, idx))`);
			sql.exec("CREATE INDEX IF NOT EXISTS lines_state ON lines (state, grp)");
		},
	},
	{
		name: "results in R2, and a finalize's progress",
		up(sql: SqlExec) {
			// A result too large for a row is in BATCH_FILES at `result_key` (its size `result_bytes`), `result` then null.
			sql.exec("ALTER TABLE lines ADD COLUMN result_key TEXT");
			sql.exec("ALTER TABLE lines ADD COLUMN result_bytes INTEGER");
			// Each result file a finalize writes: how far it got (finalize.ts), so a restart resumes it.
			sql.exec(`CREATE TABLE IF NOT EXISTS finalize_file (batch_id TEXT NOT NULL, kind TEXT NOT NULL, state TEXT NOT NULL,
				PRIMARY KEY (batch_id, kind))`);
		},
	},
];

/** A line's stored result as a finalize reads it: inline, or the R2 key of a large one. */
export type StoredResult = {
	idx: number;
	custom_id: string;
	result: string | null;
	result_key: string | null;
	result_bytes: number | null;
};

/** The result of a line that did not run (expired, cancelled), as OpenAI writes it: the part of its line after `custom_id`. */
export function unrunResult(code: string, message: string): string {
	return `"response":null,"error":${JSON.stringify({ code, message })}`;
}

export class LineStore {
	constructor(
		private readonly sql: SqlStorage,
		private readonly storage: DurableObjectStorage,
	) {
		migrate(storage, MIGRATIONS);
	}

	meta(k: string): string | null {
		const row = this.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = ?", k).toArray()[0];
		return row ? String(row.v) : null;
	}

	setMeta(k: string, v: string): void {
		this.sql.exec("INSERT INTO meta (k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v", k, v);
	}

	hasBatch(id: string): boolean {
		return this.sql.exec("SELECT 1 FROM batch WHERE id = ?", id).toArray().length > 0;
	}

	addBatch(b: Omit<StoredBatch, "state">): void {
		const seq = this.sql.exec<{ n: number }>("SELECT COALESCE(MAX(seq), 0) + 1 AS n FROM batch").one().n;
		this.sql.exec(
			"INSERT INTO batch (id, endpoint, principal, caller_key_id, expires_at, state, seq) VALUES (?, ?, ?, ?, ?, 'running', ?)",
			b.id,
			b.endpoint,
			b.principal,
			b.caller_key_id,
			b.expires_at,
			seq,
		);
	}

	addLines(batchId: string, lines: Array<{ idx: number; customId: string; body: string; grp: string }>): void {
		this.storage.transactionSync(() => {
			for (const l of lines) {
				this.sql.exec(
					"INSERT OR IGNORE INTO lines (batch_id, idx, custom_id, body, grp, state) VALUES (?, ?, ?, ?, ?, 'queued')",
					batchId,
					l.idx,
					l.customId,
					l.body,
					l.grp,
				);
			}
		});
	}

	batch(id: string): StoredBatch | null {
		return this.sql.exec<StoredBatch>("SELECT * FROM batch WHERE id = ?", id).toArray()[0] ?? null;
	}

	batches(): StoredBatch[] {
		return this.sql.exec<StoredBatch>("SELECT * FROM batch ORDER BY seq").toArray();
	}

	setState(id: string, state: BatchState): void {
		this.sql.exec("UPDATE batch SET state = ? WHERE id = ?", state, id);
	}

	/**
	 * The prefix groups with queued lines of running batches, oldest batch first. A line requeued after
	 * a restart (`node` set: its attempt may have been settled) runs again whatever its batch's state:
	 * its rerun replays that settlement, so what was billed is reported.
	 */
	queuedGroups(limit: number): string[] {
		return this.sql
			.exec<{ grp: string }>(
				`SELECT l.grp FROM lines l JOIN batch b ON b.id = l.batch_id WHERE l.state = 'queued' AND (b.state = 'running' OR l.node IS NOT NULL)
				GROUP BY l.grp ORDER BY MIN(b.seq), MIN(l.idx) LIMIT ?`,
				limit,
			)
			.toArray()
			.map((r) => r.grp);
	}

	/** The next queued lines of a group, oldest batch first. */
	nextInGroup(grp: string, limit: number): QueuedLine[] {
		return this.sql
			.exec<QueuedLine>(
				`SELECT l.batch_id, l.idx, l.custom_id, l.body, l.grp, l.attempt, l.tried FROM lines l JOIN batch b ON b.id = l.batch_id
				WHERE l.state = 'queued' AND (b.state = 'running' OR l.node IS NOT NULL) AND l.grp = ? ORDER BY b.seq, l.idx LIMIT ?`,
				grp,
				limit,
			)
			.toArray();
	}

	/** Stored before the line runs: a restart finds it running and runs it again under the same attempt. */
	markRunning(batchId: string, idx: number, node: string): void {
		this.sql.exec("UPDATE lines SET state = 'running', node = ? WHERE batch_id = ? AND idx = ?", node, batchId, idx);
	}

	/** Stored once its result is in (its settlement is written by then), its cost added to its earlier attempts'; its body, no longer needed, leaves the row room. */
	finish(batchId: string, idx: number, state: "ok" | "error", result: string, cost: number): void {
		this.sql.exec(
			"UPDATE lines SET state = ?, result = ?, cost = cost + ?, body = '' WHERE batch_id = ? AND idx = ?",
			state,
			result,
			cost,
			batchId,
			idx,
		);
	}

	/** As `finish`, for a result stored in R2 at `key` (`bytes` long): the row keeps only where it is. */
	finishStored(batchId: string, idx: number, state: "ok" | "error", key: string, bytes: number, cost: number): void {
		this.sql.exec(
			"UPDATE lines SET state = ?, result = NULL, result_key = ?, result_bytes = ?, cost = cost + ?, body = '' WHERE batch_id = ? AND idx = ?",
			state,
			key,
			bytes,
			cost,
			batchId,
			idx,
		);
	}

	/** The line goes back in the queue for another attempt (a new request id), the node it failed on noted in `tried`, what the failed attempt debited kept in its cost. */
	retry(batchId: string, idx: number, node: string, cost: number): void {
		this.sql.exec(
			"UPDATE lines SET state = 'queued', node = NULL, attempt = attempt + 1, cost = cost + ?, tried = json_insert(tried, '$[#]', ?) WHERE batch_id = ? AND idx = ?",
			cost,
			node,
			batchId,
			idx,
		);
	}

	/** Lines marked running that no run of this instance owns (it restarted): queued again, same attempt. */
	requeueOrphans(owned: ReadonlySet<string>): number {
		let n = 0;
		for (const r of this.sql.exec<{ batch_id: string; idx: number }>("SELECT batch_id, idx FROM lines WHERE state = 'running'")) {
			if (owned.has(`${r.batch_id}:${r.idx}`)) continue;
			this.sql.exec("UPDATE lines SET state = 'queued' WHERE batch_id = ? AND idx = ?", r.batch_id, r.idx);
			n++;
		}
		return n;
	}

	/** Ends every queued line of a batch unrun, with this error (expired, cancelled); one requeued after a restart runs again. */
	endQueued(batchId: string, error: string): void {
		this.sql.exec(
			"UPDATE lines SET state = 'error', result = ? WHERE batch_id = ? AND state = 'queued' AND node IS NULL",
			error,
			batchId,
		);
	}

	counts(batchId: string): { total: number; completed: number; failed: number; pending: number; running: number; cost: number } {
		const c = { total: 0, completed: 0, failed: 0, pending: 0, running: 0, cost: 0 };
		for (const r of this.sql.exec<{ state: LineState; n: number; cost: number }>(
			"SELECT state, COUNT(*) AS n, SUM(cost) AS cost FROM lines WHERE batch_id = ? GROUP BY state",
			batchId,
		)) {
			c.total += r.n;
			c.cost += r.cost;
			if (r.state === "ok") c.completed += r.n;
			else if (r.state === "error") c.failed += r.n;
			else if (r.state === "running") c.running += r.n;
			else c.pending += r.n;
		}
		return c;
	}

	/**
	 * One page of a batch's ended lines in `state`, from line `fromIdx` on, in input order: at most
	 * `maxRows` lines and, past the first, at most `maxBytes` of inline results (a finalize holds one
	 * page). The sizes are read first (small), then the page's rows.
	 */
	resultsPage(batchId: string, state: "ok" | "error", fromIdx: number, maxRows: number, maxBytes: number): StoredResult[] {
		const sizes = this.sql
			.exec<{ idx: number; n: number }>(
				"SELECT idx, COALESCE(length(CAST(result AS BLOB)), 0) AS n FROM lines WHERE batch_id = ? AND state = ? AND idx >= ? ORDER BY idx LIMIT ?",
				batchId,
				state,
				fromIdx,
				maxRows,
			)
			.toArray();
		if (sizes.length === 0) return [];
		let last = (sizes[0] as { idx: number }).idx;
		let total = 0;
		for (const s of sizes) {
			total += s.n;
			if (total > maxBytes && s.idx !== last) break;
			last = s.idx;
		}
		return this.sql
			.exec<StoredResult>(
				"SELECT idx, custom_id, result, result_key, result_bytes FROM lines WHERE batch_id = ? AND state = ? AND idx >= ? AND idx <= ? ORDER BY idx",
				batchId,
				state,
				fromIdx,
				last,
			)
			.toArray();
	}

	/** An upper bound on the bytes of a batch's results in `state` (finalize.ts sizes its parts by it). */
	resultBytes(batchId: string, state: "ok" | "error"): number {
		return (
			this.sql
				.exec<{ n: number | null }>(
					`SELECT SUM(COALESCE(result_bytes, length(CAST(result AS BLOB)), 0) + 6 * length(CAST(custom_id AS BLOB)) + 128) AS n
				FROM lines WHERE batch_id = ? AND state = ?`,
					batchId,
					state,
				)
				.one().n ?? 0
		);
	}

	/** R2 keys of a batch's large results, after line `afterIdx`, at most `limit`. */
	resultKeys(batchId: string, afterIdx: number, limit: number): Array<{ idx: number; key: string }> {
		return this.sql
			.exec<{ idx: number; key: string }>(
				"SELECT idx, result_key AS key FROM lines WHERE batch_id = ? AND idx > ? AND result_key IS NOT NULL ORDER BY idx LIMIT ?",
				batchId,
				afterIdx,
				limit,
			)
			.toArray();
	}

	/** How far a finalize got with one of a batch's files (finalize.ts), or null. */
	finalizeState<T>(batchId: string, kind: string): T | null {
		const row = this.sql
			.exec<{ state: string }>("SELECT state FROM finalize_file WHERE batch_id = ? AND kind = ?", batchId, kind)
			.toArray()[0];
		return row ? (JSON.parse(row.state) as T) : null;
	}

	setFinalizeState(batchId: string, kind: string, state: unknown): void {
		this.sql.exec(
			"INSERT INTO finalize_file (batch_id, kind, state) VALUES (?, ?, ?) ON CONFLICT(batch_id, kind) DO UPDATE SET state = excluded.state",
			batchId,
			kind,
			JSON.stringify(state),
		);
	}

	drop(batchId: string): void {
		this.storage.transactionSync(() => {
			this.sql.exec("DELETE FROM lines WHERE batch_id = ?", batchId);
			this.sql.exec("DELETE FROM finalize_file WHERE batch_id = ?", batchId);
			this.sql.exec("DELETE FROM batch WHERE id = ?", batchId);
		});
	}

	hasQueued(): boolean {
		return (
			this.sql
				.exec(
					"SELECT 1 FROM lines l JOIN batch b ON b.id = l.batch_id WHERE l.state = 'queued' AND (b.state = 'running' OR l.node IS NOT NULL) LIMIT 1",
				)
				.toArray().length > 0
		);
	}
}
