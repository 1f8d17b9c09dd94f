/**
 * A batch's end: its output file (the lines that succeeded) and error file (the others), in
 * input order, written to R2 with their D1 rows, and the batch's final status. The file ids
 * follow from the batch id, so a finalize run again after a restart rewrites the same files.
 */
import { batchesStore, batchFilesStore } from "../db/batches";
import type { LineStore } from "./line-store";

/** Where a file's bytes are in the BATCH_FILES bucket. */
export function fileKey(id: string): string {
	return `files/${id}`;
}

/** The id of a line's result (`batch_req_…`), stable across attempts. */
export function lineResultId(batchId: string, idx: number): string {
	return `batch_req_${batchId.replace(/^batch_/, "")}_${idx}`;
}

export async function finalizeBatch(
	env: Env,
	lines: LineStore,
	batch: { id: string; keyId: string },
	status: "completed" | "cancelled" | "expired",
): Promise<void> {
	const d1 = batchesStore(env.DB);
	const now = Date.now();
	const c = lines.counts(batch.id);
	await d1.progress(batch.id, { status: "finalizing", completed: c.completed, failed: c.failed, costNanos: c.cost, at: now });
	const output: string[] = [];
	const errors: string[] = [];
	for (const r of lines.results(batch.id)) {
		const line = `{"id":${JSON.stringify(lineResultId(batch.id, r.idx))},"custom_id":${JSON.stringify(r.custom_id)},${r.result}}`;
		(r.state === "ok" ? output : errors).push(line);
	}
	const files = batchFilesStore(env.DB);
	const write = async (suffix: string, rows: string[]): Promise<string | null> => {
		if (rows.length === 0) return null;
		const id = `file-${batch.id.replace(/^batch_/, "")}-${suffix}`;
		const text = `${rows.join("\n")}\n`;
		const bytes = new TextEncoder().encode(text);
		await env.BATCH_FILES.put(fileKey(id), bytes);
		await files.put({
			id,
			keyId: batch.keyId,
			purpose: "batch_output",
			filename: `${batch.id}_${suffix}.jsonl`,
			bytes: bytes.length,
			createdAt: now,
		});
		return id;
	};
	const outputFileId = await write("output", output);
	const errorFileId = await write("error", errors);
	await d1.ended(batch.id, status, { outputFileId, errorFileId }, Date.now());
	lines.drop(batch.id);
}
