import type { Principal } from "../app-env";
import { randomId } from "../auth/key-secret";
import { type ChatRun, runChat } from "../chat/run-chat";
import { GatewayError } from "../errors";
import { createSseParser } from "../stream/sse-parser";
import {
	failedResponse,
	inProgressResponse,
	queuedResponse,
	type ResponseMeta,
	type ResponseObject,
	responseFromCompletion,
} from "./from-chat";
import type { ResponseInputItem, ResponsesRequest } from "./request-schema";
import type { BackgroundJob, ResponseStore, ResponseStoreApi, StoredResponse } from "./response-store";
import { encodeEvent, type ResponseStreamEvent, ResponsesEventBuilder } from "./stream-events";
import { inputItems, responsesToChat } from "./to-chat";

export function responseStore(env: Env, keyId: string): DurableObjectStub<ResponseStore> {
	const ns = env.RESPONSES as DurableObjectNamespace<ResponseStore>;
	return ns.get(ns.idFromName(keyId));
}

function itemIds(): string {
	return randomId("", 12);
}

/** The conversation a `previous_response_id` continues; another key's id is as unknown as a made-up one. */
async function history(env: Env, keyId: string, previousId: string | null | undefined): Promise<ResponseInputItem[]> {
	if (!previousId) return [];
	const prior = (await responseStore(env, keyId).get(previousId)) as StoredResponse | null;
	if (!prior) {
		throw new GatewayError("not_found", `Previous response with id '${previousId}' not found.`, {
			param: "previous_response_id",
		});
	}
	return prior.contextItems as unknown as ResponseInputItem[];
}

function record(
	meta: ResponseMeta,
	response: ResponseObject,
	items: ResponseInputItem[],
	prior: ResponseInputItem[],
): StoredResponse {
	return {
		id: meta.id,
		response: response as unknown as Record<string, unknown>,
		inputItems: items as unknown as Record<string, unknown>[],
		contextItems: [...prior, ...items, ...response.output] as unknown as Record<string, unknown>[],
		createdAt: meta.createdAt * 1000,
	};
}

export type ResponseResult =
	| { kind: "json"; body: ResponseObject; headers: Record<string, string> }
	| { kind: "stream"; stream: ReadableStream<Uint8Array>; headers: Record<string, string> };

/** POST /v1/responses: translated to a chat completion and run through the same pipeline (billing included). */
export async function createResponse(run: ChatRun, req: ResponsesRequest): Promise<ResponseResult> {
	const prior = await history(run.env, run.keyId, req.previous_response_id);
	const meta: ResponseMeta = {
		id: randomId("resp_", 16),
		createdAt: Math.floor(Date.now() / 1000),
		model: req.model,
		request: req,
		ids: itemIds,
	};
	const items = inputItems(req, itemIds);
	const store = req.store !== false;
	const headers = { "x-venym-lane": "compat", "x-request-id": run.requestId };

	if (req.background) {
		const queued = queuedResponse(meta);
		const job: BackgroundJob = {
			id: meta.id,
			requestId: run.requestId,
			keyId: run.keyId,
			payload: { request: req, prior, items, createdAt: meta.createdAt, principal: run.principal ?? null },
		};
		await responseStore(run.env, run.keyId).enqueue(record(meta, queued, items, prior), job);
		return { kind: "json", body: queued, headers };
	}

	const chatBody = responsesToChat(req, prior);
	const result = await runChat(run, chatBody);
	if (result.kind === "completion") {
		const response = responseFromCompletion(result.body, meta);
		if (store) run.waitUntil(responseStore(run.env, run.keyId).put(record(meta, response, items, prior)));
		return { kind: "json", body: response, headers: { ...result.headers, ...headers } };
	}
	const stream = chatSseToResponseEvents(
		result.stream,
		new ResponsesEventBuilder(meta),
		(response) => {
			if (store) run.waitUntil(responseStore(run.env, run.keyId).put(record(meta, response, items, prior)));
		},
		run.clientSignal,
	);
	return { kind: "stream", stream, headers: { ...result.headers, ...headers } };
}

/**
 * The gateway's own chat SSE (rewritten model, one usage chunk, an error frame on failure) as
 * Responses events. `onEnd` receives the final response once, whether it completed or failed.
 */
export function chatSseToResponseEvents(
	chat: ReadableStream<Uint8Array>,
	builder: ResponsesEventBuilder,
	onEnd: (response: ResponseObject) => void,
	/** When it has fired, an ending is the client leaving (the engine was aborted for it), not a failure. */
	clientSignal?: AbortSignal,
): ReadableStream<Uint8Array> {
	const reader = chat.getReader();
	const decoder = new TextDecoder();
	const encoder = new TextEncoder();
	let pending: ResponseStreamEvent[] = builder.start();
	let ended = false;
	const end = (events: ResponseStreamEvent[]) => {
		ended = true;
		if (clientSignal?.aborted) {
			onEnd({ ...builder.response(), status: "cancelled" });
			return;
		}
		pending.push(...events);
		onEnd(builder.response());
	};
	const parser = createSseParser((e) => {
		if (ended) return;
		if (e.data === "[DONE]") return end(builder.finish());
		let json: Record<string, unknown>;
		try {
			json = JSON.parse(e.data);
		} catch {
			return;
		}
		if (json.error) {
			const err = json.error as { message?: string; code?: string };
			return end(builder.fail({ code: "server_error", message: err.message ?? "The model engine failed." }));
		}
		pending.push(...builder.chunk(json));
	});
	return new ReadableStream<Uint8Array>({
		async pull(controller) {
			while (pending.length === 0 && !ended) {
				const { done, value } = await reader.read();
				if (done) {
					parser.end();
					if (!ended) end(builder.fail({ code: "server_error", message: "The response stream ended early." }));
					break;
				}
				parser.feed(decoder.decode(value, { stream: true }));
			}
			if (pending.length) {
				controller.enqueue(encoder.encode(pending.map(encodeEvent).join("")));
				pending = [];
			}
			if (ended && pending.length === 0) controller.close();
		},
		async cancel(reason) {
			// The client left: what was produced so far is kept, marked cancelled.
			if (!ended) {
				ended = true;
				onEnd({ ...builder.response(), status: "cancelled" });
			}
			await reader.cancel(reason);
		},
	});
}

/** Runs a background response inside the ResponseStore Durable Object (registered from index.ts). */
export async function runBackground(
	env: Env,
	job: BackgroundJob,
	signal: AbortSignal,
	store: ResponseStoreApi,
	run: Omit<ChatRun, "clientSignal" | "waitUntil" | "env" | "keyId" | "requestId">,
): Promise<void> {
	const p = job.payload as {
		request: ResponsesRequest;
		prior: ResponseInputItem[];
		items: ResponseInputItem[];
		createdAt: number;
		/** The caller's scopes, so a background run is held to them like any other. */
		principal: Principal | null;
	};
	const meta: ResponseMeta = { id: job.id, createdAt: p.createdAt, model: p.request.model, request: p.request, ids: itemIds };
	store.put(record(meta, inProgressResponse(meta), p.items, p.prior));
	const settlements: Promise<unknown>[] = [];
	let response: ResponseObject;
	try {
		const result = await runChat(
			{
				...run,
				env,
				keyId: job.keyId,
				principal: p.principal ?? undefined,
				requestId: job.requestId,
				clientSignal: signal,
				waitUntil: (q) => settlements.push(q),
			},
			responsesToChat({ ...p.request, stream: false }, p.prior),
		);
		if (result.kind !== "completion") throw new Error("background run streamed");
		response = responseFromCompletion(result.body, meta);
	} catch (err) {
		const message = err instanceof GatewayError ? err.message : "The response failed.";
		response = failedResponse(meta, { code: err instanceof GatewayError ? err.kind : "server_error", message });
	}
	await Promise.all(settlements);
	store.put(record(meta, response, p.items, p.prior));
}
