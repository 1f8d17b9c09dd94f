/**
 * The operator's copy of alert deliveries in D1 (`alert_deliveries`): each Durable Object that
 * sends alerts (a key's ledger, the fleet's NodeHealth) keeps its own deliveries and writes their
 * state here after every attempt (alerts/outbox.ts), so the admin API lists them across keys.
 */
import { and, desc, eq, lt, or, type SQL } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import type { PageCursor } from "./page-cursor";
import { alertDeliveries } from "./schema";

/** A delivery as a Durable Object writes it (snake_case: one JSON object per row). */
export interface AlertDeliveryRow {
	id: string;
	event: string;
	key_id: string | null;
	subject: string | null;
	target: string | null;
	status: "pending" | "delivered" | "failed";
	attempts: number;
	last_code: number | null;
	last_error: string | null;
	payload: string;
	created_at: number;
	next_at: number | null;
	delivered_at: number | null;
	updated_at: number;
}

// One statement per sync whatever its size (the rows as one JSON array, unpacked by json_each).
const UPSERT = `INSERT INTO alert_deliveries
	(id, event, key_id, subject, target, status, attempts, last_code, last_error, payload, created_at, next_attempt_at, delivered_at, updated_at)
SELECT json_extract(value, '$.id'), json_extract(value, '$.event'), json_extract(value, '$.key_id'), json_extract(value, '$.subject'),
	json_extract(value, '$.target'), json_extract(value, '$.status'), json_extract(value, '$.attempts'), json_extract(value, '$.last_code'),
	json_extract(value, '$.last_error'), json_extract(value, '$.payload'), json_extract(value, '$.created_at'),
	json_extract(value, '$.next_at'), json_extract(value, '$.delivered_at'), json_extract(value, '$.updated_at')
FROM json_each(?1) WHERE true
ON CONFLICT (id) DO UPDATE SET status = excluded.status, attempts = excluded.attempts, last_code = excluded.last_code,
	last_error = excluded.last_error, next_attempt_at = excluded.next_attempt_at, delivered_at = excluded.delivered_at,
	updated_at = excluded.updated_at`;

export async function upsertAlertDeliveries(d1: D1Database, rows: AlertDeliveryRow[]): Promise<void> {
	if (rows.length === 0) return;
	await d1.prepare(UPSERT).bind(JSON.stringify(rows)).run();
}

export interface AlertDeliveryQuery {
	keyId?: string;
	status?: "pending" | "delivered" | "failed";
	/** `node` (node down/back) or a key rule's `when`. */
	event?: string;
	/** The last row of the previous page (newest first, ties on created_at broken by id). */
	before?: PageCursor;
	limit: number;
}

/** Newest first. */
export function listAlertDeliveries(d1: D1Database, q: AlertDeliveryQuery) {
	const where: SQL[] = [];
	if (q.keyId !== undefined) where.push(eq(alertDeliveries.keyId, q.keyId));
	if (q.status !== undefined) where.push(eq(alertDeliveries.status, q.status));
	if (q.event !== undefined) where.push(eq(alertDeliveries.event, q.event));
	const b = q.before;
	if (b !== undefined) {
		const older = or(
			lt(alertDeliveries.createdAt, b.createdAt),
			and(eq(alertDeliveries.createdAt, b.createdAt), lt(alertDeliveries.id, b.id)),
		);
		if (older) where.push(older);
	}
	return drizzle(d1)
		.select()
		.from(alertDeliveries)
		.where(and(...where))
		.orderBy(desc(alertDeliveries.createdAt), desc(alertDeliveries.id))
		.limit(q.limit);
}
