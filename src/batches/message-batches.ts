/**
 * Anthropic's Message Batches over the batch store (batches/create.ts): a create body becomes
 * the store's input file (one `/v1/messages` line a request) and a batch of the same lines, run
 * by the model's dispatcher through the Messages lane's own runner at the batch price; the
 * store's output and error files are read back as Anthropic's results. Everything a batch stores
 * (its input, output and error files and its row) belongs to the key that created it; DELETE
 * removes all of it once the batch has ended.
 */
import type { Principal } from "../app-env";
import { assertModelAllowed, callerKeyId } from "../auth/scopes";
import { type GatewayConfig, resolveModel } from "../config";
import { batchLineBytes } from "../config-batches";
import { EMBEDDINGS } from "../config-schema";
import { batchFilesStore } from "../db/batches";
import { messageBatchesStore } from "../db/message-batches";
import type { BatchRow } from "../db/schema";
import { GatewayError } from "../errors";
import { randomId } from "../ids";
import { messageBatchInput } from "./anthropic-input";
import {
	MESSAGES_ENDPOINT,
	processingStatus,
	type RequestCounts,
	requestCounts,
	resultOf,
	storeBatchId,
	type Unsucceeded,
} from "./anthropic-objects";
import { cancelBatch, createBatch, getBatch } from "./create";
import { fileKey } from "./finalize";
import { jsonlLines } from "./jsonl";

/** A result line's bound when read back (a line holds a whole Message). */
const MAX_RESULT_LINE_BYTES = 32 * 1024 * 1024;

function notFound(id: string): GatewayError {
	return new GatewayError("not_found", `No such Message Batch: ${id}`, { param: "message_batch_id" });
}

/** The model's own rules: it exists, the key may use it, it answers Messages (not embeddings). */
function checkModel(config: GatewayConfig, principal: Principal, requested: string): void {
	const { model } = resolveModel(config, requested);
	assertModelAllowed(principal, model.id);
	if (model.capabilities.includes(EMBEDDINGS))
		throw new GatewayError("invalid_request", `The model '${requested}' does not serve /v1/messages.`, { param: "model" });
}

/** Validates the whole body (nothing is stored for a refused one), stores the input file, submits the batch. */
export async function createMessageBatch(
	env: Env,
	config: GatewayConfig,
	principal: Principal,
	body: unknown,
): Promise<BatchRow> {
	const input = messageBatchInput(body, {
		maxLineBytes: batchLineBytes(config.max_body_bytes),
		maxFileBytes: config.batches.max_file_bytes,
	});
	checkModel(config, principal, input.model);
	const file = {
		id: randomId("file-", 12),
		keyId: callerKeyId(principal),
		purpose: "batch",
		filename: "message_batch_requests.jsonl",
		bytes: input.bytes.length,
		createdAt: Date.now(),
	};
	await env.BATCH_FILES.put(fileKey(file.id), input.bytes);
	await batchFilesStore(env.DB).put(file);
	const row = await createBatch(env, config, principal, {
		inputFileId: file.id,
		endpoint: MESSAGES_ENDPOINT,
		completionWindow: "24h",
		metadata: null,
	});
	// Checked above already; the store's own check is the last word.
	if (row.status === "failed") {
		const first = row.errors?.[0] as { message?: string } | undefined;
		throw new GatewayError("invalid_request", first?.message ?? "The batch was refused.", { param: "requests" });
	}
	return row;
}

/** The key's Message Batch (another key's, an OpenAI batch or an unknown id: 404). */
export async function getMessageBatch(env: Env, principal: Principal, id: string): Promise<BatchRow> {
	const storeId = storeBatchId(id);
	if (!storeId) throw notFound(id);
	const row = await getBatch(env, principal, storeId).catch((err) => {
		throw err instanceof GatewayError && err.kind === "not_found" ? notFound(id) : err;
	});
	if (row.endpoint !== MESSAGES_ENDPOINT) throw notFound(id);
	return row;
}

export async function cancelMessageBatch(env: Env, principal: Principal, id: string): Promise<BatchRow> {
	const row = await getMessageBatch(env, principal, id);
	// Cancelling a batch that is finalizing, cancelling or has ended changes nothing: it is shown as it is.
	if (row.status !== "in_progress" && row.status !== "validating") return row;
	return cancelBatch(env, principal, row.id);
}

/** Deletes an ended batch, its row and its files; a batch still processing must be canceled first. */
export async function deleteMessageBatch(env: Env, principal: Principal, id: string): Promise<void> {
	const row = await getMessageBatch(env, principal, id);
	if (processingStatus(row.status) !== "ended")
		throw new GatewayError(
			"invalid_request",
			`Batch ${id} cannot be deleted while it is processing: cancel it and wait until it has ended.`,
			{ param: "message_batch_id" },
		);
	const files = batchFilesStore(env.DB);
	for (const fileId of [row.inputFileId, row.outputFileId, row.errorFileId]) {
		if (!fileId) continue;
		await env.BATCH_FILES.delete(fileKey(fileId));
		await files.delete(row.keyId, fileId);
	}
	await messageBatchesStore(env.DB).delete(row.keyId, row.id);
}

async function* resultsOf(body: ReadableStream<Uint8Array>) {
	for await (const { text } of jsonlLines(body, MAX_RESULT_LINE_BYTES)) {
		if (text.trim() !== "") yield resultOf(text);
	}
}

/** The lines of a result file as Anthropic's result lines (a file gone, or none: nothing). */
async function* resultLines(env: Env, fileId: string | null) {
	if (!fileId) return;
	const object = await env.BATCH_FILES.get(fileKey(fileId));
	if (object) yield* resultsOf(object.body);
}

/** An ended batch's counts; only a cancelled or expired one has lines that never ran, counted from its error file. */
export async function countsOf(env: Env, row: BatchRow): Promise<RequestCounts> {
	if ((row.status !== "cancelled" && row.status !== "expired") || !row.errorFileId) return requestCounts(row);
	const object = await env.BATCH_FILES.get(fileKey(row.errorFileId));
	// Archived (its files past retention): the failed lines can no longer be told apart.
	if (!object) return requestCounts(row);
	const u: Unsucceeded = { errored: 0, canceled: 0, expired: 0 };
	for await (const { result } of resultsOf(object.body)) {
		if (result.type === "canceled") u.canceled++;
		else if (result.type === "expired") u.expired++;
		else if (result.type === "errored") u.errored++;
	}
	return requestCounts(row, u);
}

/** An ended batch's results, JSONL, read from its files as the client reads them (never held whole). */
export function resultsStream(env: Env, row: BatchRow, archived: number | null): ReadableStream<Uint8Array> {
	if (processingStatus(row.status) !== "ended")
		throw new GatewayError("invalid_request", `Batch msg${row.id} has not ended yet: its results are not available.`, {
			param: "message_batch_id",
		});
	if (archived !== null)
		throw new GatewayError("not_found", `Batch msg${row.id}'s results were deleted after batches.retention_days.`, {
			param: "message_batch_id",
		});
	const encoder = new TextEncoder();
	async function* all() {
		yield* resultLines(env, row.outputFileId);
		yield* resultLines(env, row.errorFileId);
	}
	const lines = all();
	return new ReadableStream<Uint8Array>({
		async pull(controller) {
			const next = await lines.next();
			if (next.done) controller.close();
			else controller.enqueue(encoder.encode(`${JSON.stringify(next.value)}\n`));
		},
		async cancel() {
			await lines.return(undefined);
		},
	});
}
