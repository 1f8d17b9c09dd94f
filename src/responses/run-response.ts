import { payerKeyId } from "../auth/scopes";
import { authorizeChat, type ChatResult, type ChatRun, runAuthorized } from "../chat/run-chat";
import type { SearchRound, SearchUnderWay } from "../chat/search-tool";
import type { GatewayConfig } from "../config";
import { GatewayError } from "../errors";
import { randomId } from "../ids";
import { errorText, logEvent } from "../observability/log-event";
import type { Source } from "../types";
import type { BackgroundJob } from "./background-job";
import { responseFromCompletion } from "./from-chat";
import { hostedSearchTool } from "./hosted-search";
import { type RequestedItem, referencedIds, referenceNotFound, resolveReferences } from "./item-references";
import type { ResponseInputItem } from "./item-schema";
import type { ResponsesRequest } from "./request-schema";
import {
	inProgressResponse,
	itemIds,
	queuedResponse,
	type ResponseMeta,
	type ResponseObject,
	servedMeta,
} from "./response-object";
import { type BeginResult, type HistoryResult, type ResponseStoreStub, responseStore } from "./store-api";
import { ResponsesStreamEncoder } from "./stream-encoder";
import { ResponsesEventBuilder } from "./stream-events";
import { inputItems, responsesToChat } from "./to-chat";

/**
 * The largest conversation a response may continue or store: earlier turns and this input, as
 * stored JSON characters. Rebuilding it crosses an RPC and is held in memory (twice, as items
 * and as the engine body), which bounds it well below the Worker's 128 MB. Larger is a 413,
 * before anything is held.
 */
export const MAX_CONVERSATION_CHARS = 8 * 1024 * 1024;
/**
 * A queued background response's hold lives this long (the ledger's default is 15 minutes):
 * it must last through the wait in the queue. When the run starts, the hold is extended by
 * another 15 minutes from then.
 */
export const QUEUED_HOLD_TTL_MS = 60 * 60 * 1000;
/** A full queue says when to try again. */
const QUEUE_RETRY_AFTER_S = 5;

const STORAGE_FAILED = { code: "storage_failed", message: "The response was generated but could not be stored." };

type Conversation = BeginResult;

/** The refusals of the store, as the errors the client gets. */
function conversationOf(result: Conversation | HistoryResult, req: ResponsesRequest, config: GatewayConfig): ResponseInputItem[] {
	if (result.ok) return result.history;
	switch (result.reason) {
		case "not_found":
			throw new GatewayError("not_found", `Previous response with id '${req.previous_response_id}' not found.`, {
				param: "previous_response_id",
			});
		case "too_large":
			throw new GatewayError(
				"request_too_large",
				`This conversation is too large to store: about ${result.chars} characters with this input, over the limit of ${MAX_CONVERSATION_CHARS}. Start a new conversation, or send less.`,
				{ param: req.previous_response_id ? "previous_response_id" : "input" },
			);
		case "in_progress":
			throw new GatewayError(
				"invalid_request",
				`Previous response with id '${req.previous_response_id}' is still ${result.status}: continue it once it has finished.`,
				{ param: "previous_response_id", code: "previous_response_in_progress" },
			);
		case "item_not_found":
			throw referenceNotFound(req.input, result.id);
		case "queue_full":
			throw new GatewayError(
				"rate_limited",
				`This key already has ${config.max_queued_responses} background responses queued or running. Please try again when one has finished.`,
				{ headers: { "retry-after": String(QUEUE_RETRY_AFTER_S) } },
			);
	}
}

/** The input's size as stored JSON; a reference counts as the item it names, which the store adds. */
function charsOf(items: RequestedItem[]): number {
	let n = 0;
	for (const item of items) if (item.type !== "item_reference") n += JSON.stringify(item).length;
	return n;
}

/** The chat body for this turn: the earlier turns, then this input with its references resolved. */
export function chatBody(req: ResponsesRequest, prior: ResponseInputItem[], items: ResponseInputItem[]): Record<string, unknown> {
	return responsesToChat({ ...req, input: [] }, [...prior, ...items]);
}

/** Stores the final response; a failure is logged and shows on the stored response, which is marked failed. */
async function finish(env: Env, callerKeyId: string, response: ResponseObject): Promise<void> {
	try {
		await responseStore(env, callerKeyId).finish(response.id, response);
	} catch (err) {
		console.error(`response ${response.id}: storing its output failed`, err);
		try {
			// A fresh stub: after an exception a stub may be broken.
			await responseStore(env, callerKeyId).markFailed(response.id, STORAGE_FAILED);
		} catch (again) {
			console.error(`response ${response.id}: marking it failed failed too`, again);
		}
	}
}

export type ResponseResult =
	| { kind: "json"; body: ResponseObject; headers: Record<string, string> }
	| { kind: "stream"; stream: ReadableStream<Uint8Array>; headers: Record<string, string> };

/**
 * POST /v1/responses: translated to a chat completion and run through the same pipeline
 * (billing included). Nothing is stored before the request is authorized (a refused request
 * writes nothing); a stored response is written with its input before the engine runs, so
 * whatever is answered with a 200 can be read back.
 */
export async function createResponse(run: ChatRun, req: ResponsesRequest): Promise<ResponseResult> {
	const meta: ResponseMeta = {
		id: randomId("resp_", 16),
		createdAt: Math.floor(Date.now() / 1000),
		model: req.model,
		request: req,
		ids: itemIds,
	};
	const requested = inputItems(req, itemIds);
	const headers = { "x-venym-lane": "compat", "x-request-id": run.requestId };
	if (req.background && req.store === false) {
		throw new GatewayError("invalid_request", "Background responses are stored: 'store' must not be false with 'background'.", {
			param: "store",
		});
	}
	const stub = responseStore(run.env, run.callerKeyId);
	// The conversation so far and the items the input references, read (not written) before anything is held.
	const { prior, items } = await conversationBefore(stub, req, requested, run.config);
	if (req.background) return enqueue(run, req, meta, items, prior, headers);

	const store = req.store !== false;
	const authorized = await authorizeChat(run, chatBody(req, prior, items), { searchTool: hostedSearchTool(req, run.config) });
	// Streams are encoded as Responses events straight from the engine's chunks. The encoder is
	// made once the engine answered, so it names the model that serves (a fallback, maybe).
	let encoder: ResponsesStreamEncoder | undefined;
	const chatRun: ChatRun = {
		...run,
		streamEncoder: (sources: Source[], round?: SearchRound, underWay?: SearchUnderWay) => {
			encoder = new ResponsesStreamEncoder(new ResponsesEventBuilder(servedMeta(meta, authorized)), sources, round, underWay);
			return encoder;
		},
	};
	if (store) {
		let begun: Conversation;
		try {
			begun = await stub.begin(beginInput(meta, req, items, inProgressResponse(meta)));
		} catch (err) {
			void authorized.settlement.release();
			throw err;
		}
		if (!begun.ok) {
			// Refused by the store: the hold (and a share of an edge allowance) goes back unused.
			void authorized.settlement.release();
			conversationOf(begun, req, run.config);
		}
	}

	let result: ChatResult;
	try {
		result = await runAuthorized(chatRun, authorized);
	} catch (err) {
		if (store) run.waitUntil(stub.abandon(meta.id));
		throw err;
	}
	if (result.kind === "completion") {
		const response = responseFromCompletion(result.body, servedMeta(meta, authorized), result.search);
		// Awaited, so the response can be read back (or continued) as soon as it is answered.
		if (store) await finish(run.env, run.callerKeyId, response);
		return { kind: "json", body: response, headers: { ...result.headers, ...headers } };
	}
	const streamed = encoder as ResponsesStreamEncoder;
	if (store)
		run.waitUntil(
			result.done.then((end) => finish(run.env, run.callerKeyId, streamed.finalResponse(end, run.clientSignal.aborted))),
		);
	return { kind: "stream", stream: result.stream, headers: { ...result.headers, ...headers } };
}

/**
 * The earlier turns a request continues and its input with item references resolved, in one
 * store round trip, with the store's checks (unknown, unfinished, too large, an unknown item),
 * storing nothing.
 */
export async function conversationBefore(
	stub: ResponseStoreStub,
	req: ResponsesRequest,
	requested: RequestedItem[],
	config: GatewayConfig,
): Promise<{ prior: ResponseInputItem[]; items: ResponseInputItem[] }> {
	const chars = charsOf(requested);
	const refs = referencedIds(requested);
	if (req.previous_response_id || refs.length > 0) {
		// Items are JSON objects (`Record<string, unknown>`), which the RPC types cannot express.
		const result = (await stub.history(req.previous_response_id ?? null, chars, MAX_CONVERSATION_CHARS, refs)) as HistoryResult;
		const prior = conversationOf(result, req, config);
		const referenced = result.ok ? result.referenced : [];
		return { prior, items: resolveReferences(requested, referenced) };
	}
	if (chars > MAX_CONVERSATION_CHARS) conversationOf({ ok: false, reason: "too_large", chars }, req, config);
	return { prior: [], items: resolveReferences(requested, []) };
}

function beginInput(meta: ResponseMeta, req: ResponsesRequest, items: ResponseInputItem[], shell: ResponseObject) {
	return {
		id: meta.id,
		previousId: req.previous_response_id ?? null,
		createdAt: meta.createdAt * 1000,
		response: shell,
		input: items,
		maxChars: MAX_CONVERSATION_CHARS,
	};
}

/**
 * A background response is checked like any other when it is queued: the hold is placed
 * (402/403/429 here, nothing stored), then a slot in the key's queue is taken with the input
 * (a full queue gives the hold back), then filled. The run later finds its hold by request id.
 * The cap counts per paying key: a `vk-tmp-` token's job first claims a slot in its parent's
 * store (payer-slots.ts), given back when the job leaves the token's queue.
 */
async function enqueue(
	run: ChatRun,
	req: ResponsesRequest,
	meta: ResponseMeta,
	items: ResponseInputItem[],
	prior: ResponseInputItem[],
	headers: Record<string, string>,
): Promise<ResponseResult> {
	const stub = responseStore(run.env, run.callerKeyId);
	const payer = payerKeyId(run.principal);
	const payerStore = payer === run.callerKeyId ? null : responseStore(run.env, payer);
	const cap = run.config.max_queued_responses;
	// Cheap first: a full queue is refused before a hold is placed (begin checks again, atomically).
	if (await (payerStore ?? stub).queueFull(cap)) conversationOf({ ok: false, reason: "queue_full" }, req, run.config);
	const authorized = await authorizeChat(run, chatBody({ ...req, stream: false }, prior, items), {
		holdTtlMs: QUEUED_HOLD_TTL_MS,
		searchTool: hostedSearchTool(req, run.config),
	});
	const { settlement } = authorized;
	let claimed = false;
	const giveBack = () => {
		void settlement.release();
		if (claimed && payerStore) run.waitUntil(payerStore.releaseSlot(meta.id));
	};
	if (payerStore) {
		try {
			claimed = await payerStore.claimSlot(meta.id, run.callerKeyId, cap);
		} catch (err) {
			void settlement.release();
			throw err;
		}
		if (!claimed) {
			giveBack();
			conversationOf({ ok: false, reason: "queue_full" }, req, run.config);
		}
	}
	const queued = queuedResponse(meta);
	const job: BackgroundJob = {
		id: meta.id,
		requestId: run.requestId,
		callerKeyId: run.callerKeyId,
		// The input is stored once, as the response's input items.
		payload: { request: { ...req, input: [] }, createdAt: meta.createdAt, principal: run.principal },
	};
	let committed = false;
	try {
		const begun = await stub.begin({ ...beginInput(meta, req, items, queued), job: { cap, job } });
		if (!begun.ok) {
			giveBack();
			conversationOf(begun, req, run.config);
		}
		committed = await stub.commit(meta.id, settlement.storedHold());
	} catch (err) {
		if (err instanceof GatewayError) throw err;
		logEvent("error", "background response: queueing failed", {
			request_id: run.requestId,
			response_id: meta.id,
			error: errorText(err),
		});
	}
	if (!committed) {
		giveBack();
		run.waitUntil(responseStore(run.env, run.callerKeyId).abandon(meta.id));
		throw new GatewayError("internal", "The background response could not be queued. Please retry.");
	}
	// The queued job's run settles the hold (or the queue releases it when the job never runs).
	settlement.handOff();
	return { kind: "json", body: queued, headers: { ...authorized.rateHeaders, ...headers } };
}
