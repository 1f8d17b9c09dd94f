/** The batch lane's rows in D1 (schema.ts `batch_files`, `batches`): who owns each file and batch, and what the API shows. */
import type { BatchFileRow, BatchRow } from "./schema";

type Raw = Record<string, unknown>;

function fileRow(r: Raw): BatchFileRow {
	return {
		id: r.id as string,
		keyId: r.key_id as string,
		purpose: r.purpose as string,
		filename: r.filename as string,
		bytes: r.bytes as number,
		createdAt: r.created_at as number,
	};
}

function json<T>(v: unknown): T | null {
	return typeof v === "string" ? (JSON.parse(v) as T) : null;
}

/** A `batches` row as D1 returns it, typed (db/message-batches.ts reads the same table). */
export function batchRow(r: Raw): BatchRow {
	return {
		id: r.id as string,
		keyId: r.key_id as string,
		model: r.model as string,
		endpoint: r.endpoint as string,
		inputFileId: r.input_file_id as string,
		status: r.status as string,
		completionWindow: r.completion_window as string,
		metadata: json(r.metadata),
		errors: json(r.errors),
		outputFileId: (r.output_file_id as string | null) ?? null,
		errorFileId: (r.error_file_id as string | null) ?? null,
		total: r.total as number,
		completed: r.completed as number,
		failed: r.failed as number,
		costNanos: r.cost_nanos as number,
		createdAt: r.created_at as number,
		expiresAt: r.expires_at as number,
		times: json(r.times),
	};
}

export const batchFilesStore = (d1: D1Database) => ({
	/** Inserts a file row; a repeated insert of the same id (a finalize run again) replaces it. */
	async put(f: BatchFileRow): Promise<void> {
		await d1
			.prepare("INSERT OR REPLACE INTO batch_files (id, key_id, purpose, filename, bytes, created_at) VALUES (?, ?, ?, ?, ?, ?)")
			.bind(f.id, f.keyId, f.purpose, f.filename, f.bytes, f.createdAt)
			.run();
	},
	/** The key's file, or null (another key's file is null too). */
	async get(keyId: string, id: string): Promise<BatchFileRow | null> {
		const r = await d1.prepare("SELECT * FROM batch_files WHERE id = ? AND key_id = ?").bind(id, keyId).first<Raw>();
		return r ? fileRow(r) : null;
	},
	/** The key's files, newest first, after the file `after` (its id), at most `limit`+1 (to tell has_more). */
	async list(keyId: string, opts: { after?: string; limit: number; purpose?: string }): Promise<BatchFileRow[]> {
		const rows = await d1
			.prepare(
				`SELECT * FROM batch_files WHERE key_id = ?1 AND (?2 IS NULL OR purpose = ?2)
				AND (?3 IS NULL OR (created_at, id) < (SELECT created_at, id FROM batch_files WHERE id = ?3 AND key_id = ?1))
				ORDER BY created_at DESC, id DESC LIMIT ?4`,
			)
			.bind(keyId, opts.purpose ?? null, opts.after ?? null, opts.limit + 1)
			.all<Raw>();
		return rows.results.map(fileRow);
	},
	async delete(keyId: string, id: string): Promise<boolean> {
		const r = await d1.prepare("DELETE FROM batch_files WHERE id = ? AND key_id = ?").bind(id, keyId).run();
		return r.meta.changes > 0;
	},
	/** Files created before `cutoff`, oldest first (the retention job). */
	async olderThan(cutoff: number, limit: number): Promise<Array<{ id: string }>> {
		const rows = await d1
			.prepare("SELECT id FROM batch_files WHERE created_at < ? ORDER BY created_at LIMIT ?")
			.bind(cutoff, limit)
			.all<{ id: string }>();
		return rows.results;
	},
	async deleteIds(ids: string[]): Promise<void> {
		await d1.prepare("DELETE FROM batch_files WHERE id IN (SELECT value FROM json_each(?))").bind(JSON.stringify(ids)).run();
	},
});

export const batchesStore = (d1: D1Database) => ({
	async insert(b: BatchRow): Promise<void> {
		await d1
			.prepare(
				`INSERT INTO batches (id, key_id, model, endpoint, input_file_id, status, completion_window, metadata, errors,
				output_file_id, error_file_id, total, completed, failed, cost_nanos, created_at, expires_at, times)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			)
			.bind(
				b.id,
				b.keyId,
				b.model,
				b.endpoint,
				b.inputFileId,
				b.status,
				b.completionWindow,
				b.metadata ? JSON.stringify(b.metadata) : null,
				b.errors ? JSON.stringify(b.errors) : null,
				b.outputFileId,
				b.errorFileId,
				b.total,
				b.completed,
				b.failed,
				b.costNanos,
				b.createdAt,
				b.expiresAt,
				b.times ? JSON.stringify(b.times) : null,
			)
			.run();
	},
	async get(keyId: string, id: string): Promise<BatchRow | null> {
		const r = await d1.prepare("SELECT * FROM batches WHERE id = ? AND key_id = ?").bind(id, keyId).first<Raw>();
		return r ? batchRow(r) : null;
	},
	async list(keyId: string, opts: { after?: string; limit: number }): Promise<BatchRow[]> {
		const rows = await d1
			.prepare(
				`SELECT * FROM batches WHERE key_id = ?1
				AND (?2 IS NULL OR (created_at, id) < (SELECT created_at, id FROM batches WHERE id = ?2 AND key_id = ?1))
				ORDER BY created_at DESC, id DESC LIMIT ?3`,
			)
			.bind(keyId, opts.after ?? null, opts.limit + 1)
			.all<Raw>();
		return rows.results.map(batchRow);
	},
	/** The dispatcher's progress: counts and cost so far, and the status with the time it was reached (kept once set). */
	async progress(
		id: string,
		p: { status?: string; total?: number; completed: number; failed: number; costNanos: number; at?: number },
	): Promise<void> {
		await d1
			.prepare(
				`UPDATE batches SET status = COALESCE(?2, status), total = COALESCE(?3, total), completed = ?4, failed = ?5, cost_nanos = ?6,
				times = CASE WHEN ?2 IS NULL OR json_extract(COALESCE(times, '{}'), '$.' || ?2) IS NOT NULL THEN times
					ELSE json_set(COALESCE(times, '{}'), '$.' || ?2, ?7) END
				WHERE id = ?1`,
			)
			.bind(id, p.status ?? null, p.total ?? null, p.completed, p.failed, p.costNanos, p.at ?? Date.now())
			.run();
	},
	async ended(id: string, status: string, files: { outputFileId: string | null; errorFileId: string | null }, at: number) {
		await d1
			.prepare(
				`UPDATE batches SET status = ?2, output_file_id = ?3, error_file_id = ?4,
				times = json_set(COALESCE(times, '{}'), '$.' || ?2, ?5) WHERE id = ?1`,
			)
			.bind(id, status, files.outputFileId, files.errorFileId, at)
			.run();
	},
	async setStatus(id: string, status: string, at: number): Promise<void> {
		await d1
			.prepare("UPDATE batches SET status = ?2, times = json_set(COALESCE(times, '{}'), '$.' || ?2, ?3) WHERE id = ?1")
			.bind(id, status, at)
			.run();
	},
});
