/** The batch lane's objects exactly as OpenAI shows them: a File and a Batch (timestamps in unix seconds). */
import type { BatchFileRow, BatchRow } from "../db/schema";

const secs = (ms: number | undefined | null): number | null => (ms === undefined || ms === null ? null : Math.floor(ms / 1000));

export function fileObject(f: BatchFileRow) {
	return {
		id: f.id,
		object: "file" as const,
		bytes: f.bytes,
		created_at: secs(f.createdAt) as number,
		filename: f.filename,
		purpose: f.purpose,
		status: "processed" as const,
		status_details: null,
		expires_at: null,
	};
}

export function batchObject(b: BatchRow) {
	const t = b.times ?? {};
	return {
		id: b.id,
		object: "batch" as const,
		endpoint: b.endpoint,
		model: b.model,
		errors: b.errors?.length ? { object: "list" as const, data: b.errors } : null,
		input_file_id: b.inputFileId,
		completion_window: b.completionWindow,
		status: b.status,
		output_file_id: b.outputFileId,
		error_file_id: b.errorFileId,
		created_at: secs(b.createdAt) as number,
		in_progress_at: secs(t.in_progress),
		expires_at: secs(b.expiresAt),
		finalizing_at: secs(t.finalizing),
		completed_at: secs(t.completed),
		failed_at: secs(t.failed),
		expired_at: secs(t.expired),
		cancelling_at: secs(t.cancelling),
		cancelled_at: secs(t.cancelled),
		request_counts: { total: b.total, completed: b.completed, failed: b.failed },
		metadata: b.metadata ?? null,
		/** What the batch's lines have been billed so far (the gateway's addition). */
		cost_usd: b.costNanos / 1e9,
	};
}
