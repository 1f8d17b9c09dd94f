/**
 * Alert webhook deliveries kept in a Durable Object's own SQLite (a key's ledger, the fleet's
 * NodeHealth): a crossing is written as a `pending` row in the same synchronous step that
 * detects it, and the object's alarm sends it (`run`): one signed POST per attempt, with a
 * timeout, the answer's body never read, retried with exponential backoff until it is answered
 * 2xx or a day has passed. After each run the rows' state is written to D1 for the admin API.
 */
import { type AlertDeliveryRow, upsertAlertDeliveries } from "../db/alert-deliveries";
import { randomId } from "../ids";
import { errorText, logEvent } from "../observability/log-event";
import { SIGNATURE_HEADER, signAlert } from "./signature";

/** The table, for the object's migrations. */
export const ALERT_OUTBOX_SQL = `
	CREATE TABLE IF NOT EXISTS alert_deliveries (id TEXT PRIMARY KEY, event TEXT NOT NULL, key_id TEXT, subject TEXT, target TEXT,
		body TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, next_at INTEGER, created_at INTEGER NOT NULL,
		last_code INTEGER, last_error TEXT, delivered_at INTEGER, updated_at INTEGER NOT NULL, synced INTEGER NOT NULL DEFAULT 0);
	CREATE INDEX IF NOT EXISTS alert_deliveries_due ON alert_deliveries (next_at) WHERE status = 'pending';
	CREATE INDEX IF NOT EXISTS alert_deliveries_unsynced ON alert_deliveries (id) WHERE synced = 0;
`;

/** Retries stop once a delivery is this old: it is then `failed`. */
export const RETRY_FOR_MS = 24 * 60 * 60 * 1000;
const FIRST_BACKOFF_MS = 30_000;
const MAX_BACKOFF_MS = 60 * 60 * 1000;
/** Each POST's bound: connection and answer's status line. */
export const SEND_TIMEOUT_MS = 10_000;
/** Deliveries sent per run, and at once (a Durable Object has six outbound connections). */
const PER_RUN = 20;
const AT_ONCE = 4;
const SYNC_RETRY_MS = 30_000;
/** Rows written to D1 per statement. */
const SYNC_BATCH = 50;
/** Delivered or failed rows are forgotten this long after they were made (D1 keeps its copy). */
const KEEP_MS = 7 * 24 * 60 * 60 * 1000;
const MAX_ERROR_CHARS = 200;

/** The wait before attempt `attempts + 1` after `attempts` failed ones: 30 s, doubling, at most an hour. */
export function backoffMs(attempts: number): number {
	return Math.min(MAX_BACKOFF_MS, FIRST_BACKOFF_MS * 2 ** Math.max(0, Math.min(attempts - 1, 20)));
}

/** One alert to send: `payload` is the JSON body without its `id`, which the delivery adds. */
export interface AlertEvent {
	event: string;
	keyId: string | null;
	subject: string | null;
	/** The webhook URL, already validated; null when no target is configured (recorded as failed). */
	target: string | null;
	payload: Record<string, unknown>;
}

export interface SendDeps {
	fetch: (req: Request) => Promise<Response>;
	/** ALERT_WEBHOOK_SECRET; without it nothing is sent (an attempt fails, and is retried). */
	secret: string | undefined;
	d1: D1Database | undefined;
	/** Real time, for the signature's timestamp (the receiver's clock is real). */
	wallClock?: () => number;
}

type DueRow = {
	id: string;
	target: string | null;
	body: string;
	attempts: number;
	created_at: number;
	event: string;
};

export class AlertOutbox {
	constructor(private readonly sql: SqlStorage) {}

	/** Writes the delivery; synchronous, so it lands in the same atomic step as what detected it. */
	enqueue(e: AlertEvent, now: number): string {
		const id = randomId("alrt_");
		const body = JSON.stringify({ id, ...e.payload });
		const status = e.target === null ? "failed" : "pending";
		this.sql.exec(
			`INSERT INTO alert_deliveries (id, event, key_id, subject, target, body, status, next_at, created_at, last_error, updated_at)
			 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			id,
			e.event,
			e.keyId,
			e.subject,
			e.target,
			body,
			status,
			e.target === null ? null : now,
			now,
			e.target === null ? "no webhook target: set the rule's webhook_url or ALERT_WEBHOOK_URL" : null,
			now,
		);
		return id;
	}

	/** When the next run has work (unix ms), or null. */
	nextAt(now: number): number | null {
		const r = this.sql
			.exec<{ due: number | null; unsynced: number }>(
				"SELECT (SELECT MIN(next_at) FROM alert_deliveries WHERE status = 'pending') AS due, (SELECT COUNT(*) FROM alert_deliveries WHERE synced = 0) AS unsynced",
			)
			.one();
		// Rows D1 did not take (it failed) are written again after a while, not at every turn.
		const sync = r.unsynced > 0 ? now + SYNC_RETRY_MS : null;
		if (r.due === null) return sync;
		return sync === null ? r.due : Math.min(r.due, sync);
	}

	/** Sends what is due at `now`, writes the state to D1, forgets old rows; returns when to run next. */
	async run(now: number, deps: SendDeps): Promise<number | null> {
		const due = this.sql
			.exec<DueRow>(
				"SELECT id, target, body, attempts, created_at, event FROM alert_deliveries WHERE status = 'pending' AND next_at <= ? ORDER BY next_at LIMIT ?",
				now,
				PER_RUN,
			)
			.toArray();
		const queue = [...due];
		const worker = async () => {
			for (let row = queue.shift(); row; row = queue.shift()) this.record(row, now, await send(row, deps));
		};
		await Promise.all(Array.from({ length: Math.min(AT_ONCE, queue.length) }, worker));
		if (deps.d1) await this.sync(deps.d1);
		this.sql.exec("DELETE FROM alert_deliveries WHERE status != 'pending' AND synced = 1 AND created_at < ?", now - KEEP_MS);
		return this.nextAt(now);
	}

	/** The newest deliveries, as D1 gets them. */
	list(limit: number): AlertDeliveryRow[] {
		return this.sql
			.exec<RowOut>(`SELECT ${ROW_COLUMNS} FROM alert_deliveries ORDER BY created_at DESC, id DESC LIMIT ?`, limit)
			.toArray()
			.map(toRow);
	}

	private record(row: DueRow, now: number, sent: { code: number | null; error: string | null }): void {
		if (sent.error === null) {
			this.sql.exec(
				"UPDATE alert_deliveries SET status = 'delivered', attempts = attempts + 1, last_code = ?, last_error = NULL, next_at = NULL, delivered_at = ?, updated_at = ?, synced = 0 WHERE id = ?",
				sent.code,
				now,
				now,
				row.id,
			);
			return;
		}
		const attempts = row.attempts + 1;
		const next = now + backoffMs(attempts);
		const giveUp = next > row.created_at + RETRY_FOR_MS;
		this.sql.exec(
			"UPDATE alert_deliveries SET status = ?, attempts = ?, last_code = ?, last_error = ?, next_at = ?, updated_at = ?, synced = 0 WHERE id = ?",
			giveUp ? "failed" : "pending",
			attempts,
			sent.code,
			sent.error,
			giveUp ? null : next,
			now,
			row.id,
		);
	}

	private async sync(d1: D1Database): Promise<void> {
		const rows = this.sql
			.exec<RowOut>(`SELECT ${ROW_COLUMNS} FROM alert_deliveries WHERE synced = 0 LIMIT ?`, SYNC_BATCH)
			.toArray()
			.map(toRow);
		if (rows.length === 0) return;
		try {
			await upsertAlertDeliveries(d1, rows);
		} catch (err) {
			logEvent("warn", "writing alert deliveries to D1 failed, will retry", { error: errorText(err) });
			return;
		}
		// Only rows not changed since they were read (run() is the only writer of existing rows, one run at a time).
		this.sql.exec(
			"UPDATE alert_deliveries SET synced = 1 WHERE id IN (SELECT value FROM json_each(?))",
			JSON.stringify(rows.map((r) => r.id)),
		);
	}
}

const ROW_COLUMNS =
	"id, event, key_id, subject, target, status, attempts, last_code, last_error, body, created_at, next_at, delivered_at, updated_at";
type RowOut = Omit<AlertDeliveryRow, "payload" | "target"> & { body: string; target: string | null };

function toRow(r: RowOut): AlertDeliveryRow {
	const { body, target, ...rest } = r;
	return { ...rest, target: originOf(target), payload: body };
}

/** A webhook shown as its origin only: a path or query may carry the receiver's token. */
function originOf(target: string | null): string | null {
	if (target === null) return null;
	try {
		return new URL(target).origin;
	} catch {
		return null;
	}
}

/** One attempt: the status, or why it failed (bounded, no URL: it may hold a token). */
async function send(row: DueRow, deps: SendDeps): Promise<{ code: number | null; error: string | null }> {
	if (!deps.secret) return { code: null, error: "ALERT_WEBHOOK_SECRET is not set: nothing is sent unsigned" };
	if (row.target === null) return { code: null, error: "no webhook target" };
	const t = Math.floor((deps.wallClock ?? Date.now)() / 1000);
	try {
		const res = await deps.fetch(
			new Request(row.target, {
				method: "POST",
				headers: {
					"content-type": "application/json",
					"user-agent": "venym-alerts/1",
					"x-venym-delivery": row.id,
					"x-venym-event": row.event,
					[SIGNATURE_HEADER]: await signAlert(deps.secret, row.body, t),
				},
				body: row.body,
				// A redirect is not followed (it could point anywhere): it counts as a failed attempt.
				redirect: "manual",
				signal: AbortSignal.timeout(SEND_TIMEOUT_MS),
			}),
		);
		// The answer's body is never read: only its status counts.
		await res.body?.cancel().catch(() => {});
		if (res.status >= 200 && res.status < 300) return { code: res.status, error: null };
		return { code: res.status, error: `status ${res.status}` };
	} catch (err) {
		const timedOut = err instanceof Error && (err.name === "TimeoutError" || err.name === "AbortError");
		return { code: null, error: timedOut ? "timeout" : `connection failed: ${errorText(err)}`.slice(0, MAX_ERROR_CHARS) };
	}
}
