/**
 * A batch's end: its output file (the lines that succeeded) and error file (the others), in
 * input order, written to R2 with their D1 rows, and the batch's final status.
 *
 * Memory is bounded by one page of lines and one part, never the file: the lines are read from
 * the dispatcher's SQLite a page at a time (at most `pageRows` lines and `pageBytes` of inline
 * results, a large result streamed from R2) into an R2 multipart upload of fixed-size parts
 * (r2-writer.ts). After each part the upload id, its parts and where the next part starts (a
 * line and a byte in it) are stored, so a finalize cut short (the object restarted) resumes where
 * it was on the watchdog alarm; a file is visible (its R2 object, its D1 row) only once complete.
 * The file ids follow from the batch id and a line's text from its stored row, so any rerun
 * writes the same bytes.
 */
import { batchesStore, batchFilesStore } from "../db/batches";
import type { LineStore, StoredResult } from "./line-store";
import { MAX_PARTS, MIN_PART_BYTES, R2PartWriter, type UploadState } from "./r2-writer";

/** Where a file's bytes are in the BATCH_FILES bucket. */
export function fileKey(id: string): string {
	return `files/${id}`;
}

/** Where a line's result too large for the dispatcher's SQLite is kept until its batch ends. */
export function resultKey(batchId: string, idx: number): string {
	return `results/${batchId}/${idx}`;
}

/** The id of a line's result (`batch_req_…`), stable across attempts. */
export function lineResultId(batchId: string, idx: number): string {
	return `batch_req_${batchId.replace(/^batch_/, "")}_${idx}`;
}

export interface FinalizeOptions {
	/** Lines a page (default 256). */
	pageRows?: number;
	/** Inline result bytes a page, past its first line (default 4 MiB). */
	pageBytes?: number;
	/** The smallest part (default 8 MiB; R2 wants at least 5 MiB); larger when the file would need more than 10,000. */
	partBytes?: number;
	/** Told after each part is stored (a test stops a finalize there). */
	afterPart?: (kind: FileKind, parts: number) => void;
}

const PAGE_ROWS = 256;
const PAGE_BYTES = 4 * 1024 * 1024;
const PART_BYTES = 8 * 1024 * 1024;
const MIB = 1024 * 1024;

type FileKind = "output" | "error";

/** How far a file got: a finished one's id (null: no line), or the upload and the next part's start. */
type FileState =
	| { done: true; id: string | null }
	| { done: false; partBytes: number; upload: UploadState; idx: number; skip: number };

const encoder = new TextEncoder();

export async function finalizeBatch(
	env: Env,
	lines: LineStore,
	batch: { id: string; keyId: string },
	status: "completed" | "cancelled" | "expired",
	opts: FinalizeOptions = {},
): Promise<void> {
	const d1 = batchesStore(env.DB);
	const c = lines.counts(batch.id);
	await d1.progress(batch.id, {
		status: "finalizing",
		completed: c.completed,
		failed: c.failed,
		costNanos: c.cost,
		at: Date.now(),
	});
	const outputFileId = await writeFile(env, lines, batch, "output", opts);
	const errorFileId = await writeFile(env, lines, batch, "error", opts);
	await d1.ended(batch.id, status, { outputFileId, errorFileId }, Date.now());
	// The large results are in the files now.
	for (let after = -1; ; ) {
		const keys = lines.resultKeys(batch.id, after, 1000);
		if (keys.length === 0) break;
		await env.BATCH_FILES.delete(keys.map((k) => k.key));
		after = (keys[keys.length - 1] as { idx: number }).idx;
	}
	lines.drop(batch.id);
}

function partSize(boundBytes: number, min: number): number {
	return Math.max(min, Math.ceil(boundBytes / (MAX_PARTS - 1) / MIB) * MIB);
}

/** Writes (or resumes, or finds written) one of the batch's files; its id, or null when it has no line. */
async function writeFile(
	env: Env,
	lines: LineStore,
	batch: { id: string; keyId: string },
	kind: FileKind,
	opts: FinalizeOptions,
): Promise<string | null> {
	const saved = lines.finalizeState<FileState>(batch.id, kind);
	if (saved?.done) return saved.id;
	const state = kind === "output" ? "ok" : "error";
	const id = `file-${batch.id.replace(/^batch_/, "")}-${kind}`;
	const key = fileKey(id);
	const done = async (bytes: number): Promise<string | null> => {
		if (bytes > 0) {
			await batchFilesStore(env.DB).put({
				id,
				keyId: batch.keyId,
				purpose: "batch_output",
				filename: `${batch.id}_${kind}.jsonl`,
				bytes,
				createdAt: Date.now(),
			});
		}
		lines.setFinalizeState(batch.id, kind, { done: true, id: bytes > 0 ? id : null });
		return bytes > 0 ? id : null;
	};
	if (saved) {
		// Completed before the restart, its state not yet stored: the key is this batch's alone.
		const head = await env.BATCH_FILES.head(key);
		if (head) return done(head.size);
	}
	const partBytes = saved?.partBytes ?? partSize(lines.resultBytes(batch.id, state), opts.partBytes ?? PART_BYTES);
	let idx = saved?.idx ?? 0;
	let skip = saved?.skip ?? 0;
	let lineStart = 0;
	const writer = new R2PartWriter(env.BATCH_FILES, key, Math.max(partBytes, MIN_PART_BYTES), saved?.upload ?? null, (upload) => {
		lines.setFinalizeState(batch.id, kind, { done: false, partBytes, upload, idx, skip: writer.uploaded - lineStart });
		opts.afterPart?.(kind, upload.parts.length);
	});
	/** A line's bytes; those a previous run uploaded already (`skip`) are dropped. */
	const emit = async (bytes: Uint8Array): Promise<void> => {
		if (skip >= bytes.length) {
			skip -= bytes.length;
			return;
		}
		const rest = skip > 0 ? bytes.subarray(skip) : bytes;
		skip = 0;
		await writer.write(rest);
	};
	try {
		for (;;) {
			const page = lines.resultsPage(batch.id, state, idx, opts.pageRows ?? PAGE_ROWS, opts.pageBytes ?? PAGE_BYTES);
			if (page.length === 0) break;
			for (const r of page) {
				idx = r.idx;
				lineStart = writer.written - skip;
				await emitLine(env, batch.id, r, emit);
			}
			idx += 1;
		}
		return await done(await writer.finish());
	} catch (err) {
		// A resumed upload that fails (R2 let it expire) starts over next time rather than failing forever.
		if (saved) {
			await writer.abort();
			lines.setFinalizeState(batch.id, kind, null);
		}
		throw err;
	}
}

async function emitLine(env: Env, batchId: string, r: StoredResult, emit: (b: Uint8Array) => Promise<void>): Promise<void> {
	const head = `{"id":${JSON.stringify(lineResultId(batchId, r.idx))},"custom_id":${JSON.stringify(r.custom_id)},`;
	if (r.result !== null || r.result_key === null) {
		await emit(encoder.encode(`${head}${r.result ?? ""}}\n`));
		return;
	}
	await emit(encoder.encode(head));
	const object = await env.BATCH_FILES.get(r.result_key);
	if (object) {
		for await (const chunk of object.body as unknown as AsyncIterable<Uint8Array>) await emit(chunk);
	} else {
		const error = { code: "result_lost", message: "This request's result could not be read back." };
		await emit(encoder.encode(`"response":null,"error":${JSON.stringify(error)}`));
	}
	await emit(encoder.encode("}\n"));
}
