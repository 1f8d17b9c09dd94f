/**
 * The refused requests' table (schema.ts `refused_requests`): one insert per recorded refusal,
 * the console's listing (newest first, filtered), and the retention's bounded delete.
 */
import type { PageCursor } from "./page-cursor";
import type { RefusedRow } from "./schema";

export type NewRefusal = Omit<RefusedRow, "suppressed"> & { suppressed: number };

/** A listing's filters; each one given narrows it. */
export interface RefusalFilter {
	status?: number;
	code?: string;
	keyId?: string;
	/** Only refusals at or after this instant (unix ms). */
	since?: number;
}

/** A listed refusal, with its key's name when it has a key. */
export interface ListedRefusal extends RefusedRow {
	keyName: string | null;
}

const INSERT = `INSERT OR IGNORE INTO refused_requests
	(request_id, created_at, status, code, message, lane, key_id, model, suppressed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`;

export async function insertRefusal(d1: D1Database, r: NewRefusal): Promise<void> {
	await d1
		.prepare(INSERT)
		.bind(r.requestId, r.createdAt, r.status, r.code, r.message, r.lane, r.keyId, r.model, r.suppressed)
		.run();
}

/** Newest first, ties broken by request id; `before` is the last row of the previous page. */
export async function listRefusals(
	d1: D1Database,
	filter: RefusalFilter,
	limit: number,
	before?: PageCursor,
): Promise<ListedRefusal[]> {
	const where: string[] = [];
	const args: unknown[] = [];
	const narrow = (clause: string, value: unknown) => {
		if (value === undefined) return;
		where.push(clause);
		args.push(value);
	};
	narrow("r.status = ?", filter.status);
	narrow("r.code = ?", filter.code);
	narrow("r.key_id = ?", filter.keyId);
	narrow("r.created_at >= ?", filter.since);
	if (before) {
		where.push("(r.created_at < ? OR (r.created_at = ? AND r.request_id < ?))");
		args.push(before.createdAt, before.createdAt, before.id);
	}
	const sql = `SELECT r.*, k.name AS key_name FROM refused_requests r LEFT JOIN api_keys k ON k.id = r.key_id
		${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY r.created_at DESC, r.request_id DESC LIMIT ?`;
	const { results } = await d1
		.prepare(sql)
		.bind(...args, limit)
		.all<Record<string, unknown>>();
	return results.map((r) => ({
		requestId: r.request_id as string,
		createdAt: r.created_at as number,
		status: r.status as number,
		code: (r.code as string | null) ?? null,
		message: (r.message as string | null) ?? null,
		lane: r.lane as string,
		keyId: (r.key_id as string | null) ?? null,
		model: (r.model as string | null) ?? null,
		suppressed: (r.suppressed as number | null) ?? 0,
		keyName: (r.key_name as string | null) ?? null,
	}));
}

const DELETE_OLD = `DELETE FROM refused_requests WHERE rowid IN
	(SELECT rowid FROM refused_requests WHERE created_at < ?1 ORDER BY created_at LIMIT ?2)`;

/** Deletes up to `limit` refusals older than `cutoff` (unix ms); returns how many went. */
export async function deleteRefusalsBefore(d1: D1Database, cutoff: number, limit: number): Promise<number> {
	const { meta } = await d1.prepare(DELETE_OLD).bind(cutoff, limit).run();
	return meta.changes;
}
