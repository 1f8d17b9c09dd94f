/**
 * The ResponseStore's boundary: the stub that reaches a key's store and the types of its RPC
 * methods, and what a background run sees of it from inside the object. Kept apart from the
 * class, so the lane code that calls the store does not import the Durable Object (which runs
 * that same lane code for background responses): the stub is typed by the generated `Env`.
 * Items are typed both ways as the items the request schema and the output builders made (the
 * store keeps only those), so callers need no cast to write or to read them.
 */
import type { BackgroundJob } from "./background-job";
import type { ResponseInputItem } from "./item-schema";
import type { ResponseObject } from "./response-object";
import type { ConversationRefusal } from "./turns";

/** The ResponseStore of a key: the caller's own, a paying key's, or a token's that queued a job. */
export function responseStore(env: Env, keyId: string) {
	return env.RESPONSES.get(env.RESPONSES.idFromName(keyId));
}

export type ResponseStoreStub = ReturnType<typeof responseStore>;

export interface BeginInput {
	id: string;
	previousId: string | null;
	/** Unix milliseconds. */
	createdAt: number;
	/** The response object so far (queued or in_progress, no output yet). */
	response: ResponseObject;
	/** This turn's input items. */
	input: ResponseInputItem[];
	/** The largest conversation (earlier turns and this input, as JSON characters) accepted. */
	maxChars: number;
	/** A background response: reserves a queue slot, when fewer than `cap` are reserved, queued or running. */
	job?: { cap: number; job: BackgroundJob };
}

export type BeginResult = { ok: true; history: ResponseInputItem[] } | ConversationRefusal | { ok: false; reason: "queue_full" };

/** The conversation a request continues and the items its input references, in the order referenced. */
export type HistoryResult =
	| { ok: true; history: ResponseInputItem[]; referenced: ResponseInputItem[] }
	| ConversationRefusal
	/** No input or output item the client can see has this id. */
	| { ok: false; reason: "item_not_found"; id: string };

/** What a background run sees of the store: direct calls, it runs inside the object. */
export interface ResponseStoreApi {
	/** The earlier turns and this response's own input; null when it is gone. */
	conversation(id: string): { history: ResponseInputItem[]; input: ResponseInputItem[] } | null;
	/** Marks a queued response in progress; false when it was cancelled or deleted meanwhile. */
	start(id: string): boolean;
	finish(id: string, response: ResponseObject): void;
}
