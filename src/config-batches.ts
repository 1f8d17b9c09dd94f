/** The batch lane's settings (docs/batches.md): GATEWAY_CONFIG `batches` and a model's `pricing.batch_multiplier`. */
import { z } from "zod";

/** A batch price as a share of the interactive one: never above it. */
export const BatchMultiplier = z.number().positive().max(1);

/** The most lines one batch input file may hold (OpenAI's limit). */
export const MAX_BATCH_LINES = 50_000;

/**
 * The most bytes one batch line may hold: a line is a row of its model's BatchDispatcher's SQLite,
 * which holds at most 2 MB a row (its body while queued, its result once ended), so a line is
 * bounded by this as well as by `max_body_bytes`.
 */
export const MAX_BATCH_LINE_BYTES = 1024 * 1024;

/**
 * A line's result kept in its dispatcher's SQLite row: the row holds at most 2 MB, so a larger one
 * goes to R2 (finalize.ts `resultKey`), the row keeping where it is.
 */
export const MAX_INLINE_RESULT_BYTES = 1024 * 1024;

/**
 * The largest result a line may have (its `response` part as written to the output file): over it
 * the line is an error line `result_too_large`. It bounds what one line adds to a finalize's page.
 */
export const MAX_BATCH_RESULT_BYTES = 16 * 1024 * 1024;

/** A batch line's bound: the gateway's `max_body_bytes`, at most MAX_BATCH_LINE_BYTES. */
export function batchLineBytes(maxBodyBytes: number): number {
	return Math.min(maxBodyBytes, MAX_BATCH_LINE_BYTES);
}

export const BatchesSchema = z.strictObject({
	/** The batch lane (/v1/files, /v1/batches) for every model; false turns it off (404). */
	enabled: z.boolean().default(true),
	/** A batch line's price as a share of the model's, unless the model sets `pricing.batch_multiplier`. */
	price_multiplier: BatchMultiplier.default(0.5),
	/**
	 * Lines running at once on one node; a node gets lines only while its engine reports no waiting
	 * requests. Unset: a quarter of the node's `max_num_seqs` (or of the slots llama.cpp reports),
	 * else 4 (batches/schedule.ts `lineLimit`). Set, it is the limit whatever the engine.
	 */
	max_in_flight_per_node: z.number().int().min(1).max(1024).optional(),
	/** Largest input file (bytes). */
	max_file_bytes: z
		.number()
		.int()
		.positive()
		.max(200 * 1024 * 1024)
		.default(100 * 1024 * 1024),
	/** Files and results older than this are deleted by the maintenance job. */
	retention_days: z.number().int().min(1).max(3650).default(30),
});
