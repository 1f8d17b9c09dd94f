/**
 * The batch store's API for every surface (OpenAI's /v1/batches here; Anthropic's Message Batches
 * can be a thin translation on top): `createBatch` validates an input file and hands its lines to
 * the model's dispatcher, `cancelBatch` stops one, `getBatch`/`listBatches` read what D1 shows.
 * Nothing is stored for a batch (beyond its failed row) nor billed until every line is valid.
 */
import type { Principal } from "../app-env";
import { assertModelAllowed, callerKeyId } from "../auth/scopes";
import { type GatewayConfig, resolveModel } from "../config";
import { batchLineBytes } from "../config-batches";
import { EMBEDDINGS } from "../config-schema";
import { batchesStore, batchFilesStore } from "../db/batches";
import type { BatchRow } from "../db/schema";
import { GatewayError } from "../errors";
import { randomId } from "../ids";
import type { BatchDispatcher } from "./dispatcher";
import { fileKey } from "./finalize";
import { type BatchEndpoint, BatchInputCheck, type BatchInputError } from "./input";
import { jsonlLines, LineTooLong } from "./jsonl";

/** The one window OpenAI offers. */
export const COMPLETION_WINDOWS: Record<string, number> = { "24h": 24 * 60 * 60 * 1000 };

export function dispatcherFor(env: Env, model: string): DurableObjectStub<BatchDispatcher> {
	const ns = env.BATCHES as DurableObjectNamespace<BatchDispatcher>;
	return ns.get(ns.idFromName(model));
}

export interface CreateBatch {
	inputFileId: string;
	endpoint: BatchEndpoint;
	completionWindow: string;
	metadata?: Record<string, string> | null;
}

function notFound(id: string): GatewayError {
	return new GatewayError("not_found", `No such File object: ${id}`, { param: "input_file_id" });
}

/** Reads the file's lines once: the errors by line number, and its one model. */
async function validateFile(env: Env, config: GatewayConfig, id: string, endpoint: BatchEndpoint) {
	const object = await env.BATCH_FILES.get(fileKey(id));
	if (!object) throw notFound(id);
	const check = new BatchInputCheck(endpoint);
	try {
		for await (const { text, n } of jsonlLines(object.body, batchLineBytes(config.max_body_bytes))) check.line(text, n);
	} catch (err) {
		if (!(err instanceof LineTooLong)) throw err;
		check.errors.push({ code: "line_too_large", message: err.message, line: err.line, param: null });
	}
	return { errors: check.end(), model: check.model };
}

/** The model's own rules for a line set: it exists, the key may use it, it serves the endpoint. */
function modelErrors(config: GatewayConfig, principal: Principal, model: string, endpoint: BatchEndpoint): BatchInputError[] {
	try {
		const { model: m } = resolveModel(config, model);
		assertModelAllowed(principal, m.id);
		if ((endpoint === "/v1/embeddings") !== m.capabilities.includes(EMBEDDINGS))
			return [
				{ code: "invalid_model", message: `The model '${model}' does not serve ${endpoint}.`, line: null, param: "body.model" },
			];
		return [];
	} catch (err) {
		const message = err instanceof GatewayError ? err.message : `The model '${model}' is not available.`;
		return [{ code: "model_not_found", message, line: null, param: "body.model" }];
	}
}

export async function createBatch(env: Env, config: GatewayConfig, principal: Principal, input: CreateBatch): Promise<BatchRow> {
	const keyId = callerKeyId(principal);
	const window = COMPLETION_WINDOWS[input.completionWindow];
	if (window === undefined)
		throw new GatewayError("invalid_request", "completion_window must be '24h'.", { param: "completion_window" });
	const file = await batchFilesStore(env.DB).get(keyId, input.inputFileId);
	if (!file) throw notFound(input.inputFileId);
	if (file.purpose !== "batch")
		throw new GatewayError("invalid_request", "The input file's purpose must be 'batch'.", { param: "input_file_id" });
	const { errors, model: named } = await validateFile(env, config, file.id, input.endpoint);
	if (named && errors.length === 0) errors.push(...modelErrors(config, principal, named, input.endpoint));
	// The served model's id (an alias resolved): its dispatcher is the one whose fleet runs the lines.
	const model = named && errors.length === 0 ? resolveModel(config, named).model.id : named;
	const now = Date.now();
	const row: BatchRow = {
		id: randomId("batch_", 12),
		keyId,
		model: model ?? "",
		endpoint: input.endpoint,
		inputFileId: file.id,
		status: errors.length ? "failed" : "validating",
		completionWindow: input.completionWindow,
		metadata: input.metadata ?? null,
		errors: errors.length ? errors : null,
		outputFileId: null,
		errorFileId: null,
		total: 0,
		completed: 0,
		failed: 0,
		costNanos: 0,
		createdAt: now,
		expiresAt: now + window,
		times: errors.length ? { failed: now } : {},
	};
	const store = batchesStore(env.DB);
	await store.insert(row);
	if (errors.length) return row;
	try {
		await dispatcherFor(env, row.model).submit({
			id: row.id,
			model: row.model,
			endpoint: input.endpoint,
			inputFileId: file.id,
			principal,
			callerKeyId: keyId,
			expiresAt: row.expiresAt,
		});
	} catch (err) {
		// Never left `validating`: a hand-off that failed (the input file deleted meanwhile, the
		// dispatcher unreachable) ends the batch failed, nothing run or billed.
		await store.setStatus(row.id, "failed", Date.now());
		throw err;
	}
	return (await store.get(keyId, row.id)) ?? row;
}

export async function getBatch(env: Env, principal: Principal, id: string): Promise<BatchRow> {
	const row = await batchesStore(env.DB).get(callerKeyId(principal), id);
	if (!row) throw new GatewayError("not_found", `No such Batch object: ${id}`, { param: "batch_id" });
	return row;
}

/** Cancels a batch still running: `cancelling`, then `cancelled` once its running lines finish. */
export async function cancelBatch(env: Env, principal: Principal, id: string): Promise<BatchRow> {
	const row = await getBatch(env, principal, id);
	if (row.status !== "in_progress" && row.status !== "validating") {
		if (row.status === "cancelling" || row.status === "cancelled") return row;
		throw new GatewayError("conflict", `Cannot cancel a batch with status '${row.status}'.`, { param: "batch_id" });
	}
	await dispatcherFor(env, row.model).cancel(row.id, row.keyId);
	return getBatch(env, principal, id);
}
