/**
 * Reads of the `batches` table the store's own queries (db/batches.ts) do not make: a key's
 * Message Batches with Anthropic's cursors (`after_id` older, `before_id` newer, newest first
 * either way), deleting an ended batch's row, and every key's batches for the console.
 */
import { batchRow } from "./batches";
import type { BatchRow } from "./schema";

type Raw = Record<string, unknown>;

/** A page of rows and whether more lie beyond it in the direction asked. */
export interface RowPage {
	rows: BatchRow[];
	hasMore: boolean;
}

export const messageBatchesStore = (d1: D1Database) => ({
	/**
	 * A key's batches of one endpoint, newest first: those older than `afterId`, or those just newer
	 * than `beforeId`, or the newest. An unknown cursor gives an empty page.
	 */
	async list(
		keyId: string,
		endpoint: string,
		opts: { limit: number; afterId?: string | undefined; beforeId?: string | undefined },
	): Promise<RowPage> {
		const before = opts.beforeId !== undefined;
		const cursor = before ? opts.beforeId : opts.afterId;
		const rows = await d1
			.prepare(
				`SELECT * FROM batches WHERE key_id = ?1 AND endpoint = ?2
				AND (?3 IS NULL OR (created_at, id) ${before ? ">" : "<"} (SELECT created_at, id FROM batches WHERE id = ?3 AND key_id = ?1))
				ORDER BY created_at ${before ? "ASC" : "DESC"}, id ${before ? "ASC" : "DESC"} LIMIT ?4`,
			)
			.bind(keyId, endpoint, cursor ?? null, opts.limit + 1)
			.all<Raw>();
		const page = rows.results.slice(0, opts.limit).map(batchRow);
		return { rows: before ? page.reverse() : page, hasMore: rows.results.length > opts.limit };
	},

	/** Deletes a key's batch row; whether it was there. */
	async delete(keyId: string, id: string): Promise<boolean> {
		const r = await d1.prepare("DELETE FROM batches WHERE id = ? AND key_id = ?").bind(id, keyId).run();
		return r.meta.changes > 0;
	},

	/** Every key's batches, newest first, older than `after` (an id), optionally one status: the console's list. */
	async all(opts: { limit: number; after?: string | undefined; status?: string | undefined; keyId?: string | undefined }) {
		const rows = await d1
			.prepare(
				`SELECT * FROM batches WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR key_id = ?2)
				AND (?3 IS NULL OR (created_at, id) < (SELECT created_at, id FROM batches WHERE id = ?3))
				ORDER BY created_at DESC, id DESC LIMIT ?4`,
			)
			.bind(opts.status ?? null, opts.keyId ?? null, opts.after ?? null, opts.limit + 1)
			.all<Raw>();
		return { rows: rows.results.slice(0, opts.limit).map(batchRow), hasMore: rows.results.length > opts.limit };
	},

	/** Any key's batch (the console's cancel). */
	async byId(id: string): Promise<BatchRow | null> {
		const r = await d1.prepare("SELECT * FROM batches WHERE id = ?").bind(id).first<Raw>();
		return r ? batchRow(r) : null;
	},
});
