/**
 * The batch store's rows and result lines as Anthropic's Message Batches API shows them (pure):
 * a `message_batch` object (RFC 3339 times, `processing_status`, `request_counts`) and a result
 * line `{custom_id, result}` from the store's OpenAI-style output or error line. A Message Batch's
 * id is its store id with `msg` in front: `batch_…` is `msgbatch_…`.
 */
import type { BatchRow } from "../db/schema";
import { refusalType } from "../errors";

/** The store endpoint of every Message Batch's lines. */
export const MESSAGES_ENDPOINT = "/v1/messages";

export function messageBatchId(storeId: string): string {
	return `msg${storeId}`;
}

/** The store id behind a Message Batch id, or null when it is none. */
export function storeBatchId(id: string): string | null {
	return /^msgbatch_[A-Za-z0-9]{1,64}$/.test(id) ? id.slice(3) : null;
}

export type ProcessingStatus = "in_progress" | "canceling" | "ended";

export function processingStatus(status: string): ProcessingStatus {
	if (status === "cancelling") return "canceling";
	if (status === "completed" || status === "cancelled" || status === "expired" || status === "failed") return "ended";
	return "in_progress";
}

export interface RequestCounts {
	processing: number;
	succeeded: number;
	errored: number;
	canceled: number;
	expired: number;
}

/** The kinds of the lines that did not succeed, read from an ended batch's error file. */
export type Unsucceeded = Pick<RequestCounts, "errored" | "canceled" | "expired">;

/**
 * The counts from the row; `unsucceeded` splits an ended batch's failed lines (only a cancelled or
 * expired batch has lines that never ran). While it runs, the lines not yet ended are `processing`.
 */
export function requestCounts(row: BatchRow, unsucceeded?: Unsucceeded): RequestCounts {
	const ended = processingStatus(row.status) === "ended";
	return {
		processing: ended ? 0 : Math.max(0, row.total - row.completed - row.failed),
		succeeded: row.completed,
		errored: unsucceeded?.errored ?? row.failed,
		canceled: unsucceeded?.canceled ?? 0,
		expired: unsucceeded?.expired ?? 0,
	};
}

const iso = (ms: number | null | undefined): string | null =>
	ms === null || ms === undefined ? null : new Date(ms).toISOString();

/** The time the batch ended (its final status's), if it has. */
export function endedAt(row: BatchRow): number | null {
	const t = row.times ?? {};
	return t.completed ?? t.cancelled ?? t.expired ?? t.failed ?? null;
}

const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * When an ended batch's results are gone (unix ms), or null while they are kept: the retention job
 * deletes its result files `retentionDays` after they were written, when it ended.
 */
export function archivedAt(row: BatchRow, retentionDays: number, now: number): number | null {
	const ended = endedAt(row);
	if (ended === null) return null;
	const at = ended + retentionDays * DAY_MS;
	return now >= at ? at : null;
}

/** `origin` is the gateway's as the client called it: `results_url` points back at it (until the results are archived). */
export function messageBatchObject(row: BatchRow, counts: RequestCounts, origin: string, archived: number | null = null) {
	const id = messageBatchId(row.id);
	const status = processingStatus(row.status);
	return {
		id,
		type: "message_batch" as const,
		processing_status: status,
		request_counts: counts,
		ended_at: iso(endedAt(row)),
		created_at: iso(row.createdAt) as string,
		expires_at: iso(row.expiresAt) as string,
		archived_at: iso(archived),
		cancel_initiated_at: iso(row.times?.cancelling),
		results_url: status === "ended" && archived === null ? `${origin}/v1/messages/batches/${id}/results` : null,
	};
}

/** One line of the store's output or error file (batches/finalize.ts). */
interface StoreLine {
	custom_id: string;
	response: { status_code: number; request_id: string; body: unknown } | null;
	error: { code: string; message: string } | null;
}

export type MessageBatchResult =
	| { type: "succeeded"; message: unknown }
	| { type: "errored"; error: { type: "error"; error: { type: string; message: string }; request_id: string | null } }
	| { type: "canceled" }
	| { type: "expired" };

function errored(type: string, message: string, requestId: string | null): MessageBatchResult {
	return { type: "errored", error: { type: "error", error: { type, message }, request_id: requestId } };
}

/** A store result line as Anthropic's `{custom_id, result}`. */
export function resultOf(line: string): { custom_id: string; result: MessageBatchResult } {
	const l = JSON.parse(line) as StoreLine;
	const r = l.response;
	if (r && r.status_code === 200) return { custom_id: l.custom_id, result: { type: "succeeded", message: r.body } };
	if (r) {
		const body = r.body as { error?: { message?: unknown } } | null;
		const message = typeof body?.error?.message === "string" ? body.error.message : `The request failed (${r.status_code}).`;
		return { custom_id: l.custom_id, result: errored(refusalType(r.status_code), message, r.request_id) };
	}
	const code = l.error?.code;
	if (code === "batch_cancelled") return { custom_id: l.custom_id, result: { type: "canceled" } };
	if (code === "batch_expired") return { custom_id: l.custom_id, result: { type: "expired" } };
	const type = code === "insufficient_quota" ? "billing_error" : "api_error";
	return { custom_id: l.custom_id, result: errored(type, l.error?.message ?? "The request failed.", null) };
}
