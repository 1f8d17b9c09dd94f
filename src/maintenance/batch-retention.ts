/**
 * The batch lane's retention: files (inputs, outputs, error files) older than
 * `batches.retention_days` are deleted from R2 and D1, in bounded chunks. A batch's row stays
 * (its history, its cost); its files then answer 404. A running batch never needs its input
 * file again: its lines were copied into its dispatcher when it was created.
 */
import { fileKey } from "../batches/finalize";
import { loadConfig } from "../config";
import { batchFilesStore } from "../db/batches";

const DAY_MS = 24 * 60 * 60 * 1000;
/** Files per chunk (one R2 delete call takes up to 1,000 keys) and chunks per run. */
const CHUNK = 1000;
const MAX_CHUNKS = 20;

export type BatchRetentionEnv = Pick<Env, "DB" | "GATEWAY_CONFIG"> & { BATCH_FILES?: R2Bucket };

/** Deletes the batch files past retention at `now`; how many. */
export async function deleteOldBatchFiles(env: BatchRetentionEnv, now: number): Promise<number> {
	const bucket = env.BATCH_FILES;
	if (!bucket) return 0;
	const cutoff = now - loadConfig(env.GATEWAY_CONFIG).batches.retention_days * DAY_MS;
	const files = batchFilesStore(env.DB);
	let deleted = 0;
	for (let i = 0; i < MAX_CHUNKS; i++) {
		const old = await files.olderThan(cutoff, CHUNK);
		if (old.length === 0) break;
		// The bytes first: a row is never left pointing at nothing, only bytes briefly without a row.
		await bucket.delete(old.map((f) => fileKey(f.id)));
		await files.deleteIds(old.map((f) => f.id));
		deleted += old.length;
		if (old.length < CHUNK) break;
	}
	return deleted;
}
