/**
 * One SSE event as a typed engine event, and which events are the model's first token: what the
 * engine event reader (engine-events.ts) and the first-token wait are built on.
 */
import { engineErrorIn } from "../engine/classify";
import type { SseEvent } from "./sse-parser";

type Json = Record<string, unknown>;

/** What went wrong with an engine stream, for logs; the client only sees a generic error frame. */
export interface StreamError {
	message: string;
	type: string;
	code: string | null;
}

export type EngineEvent =
	/** A chat chunk: the parsed object and the exact JSON text it came from. */
	| { type: "chunk"; chunk: Json; data: string }
	/** `data: [DONE]`. */
	| { type: "done" }
	/** The engine failed: an error payload, malformed data, an oversized event, a broken or idle connection. */
	| { type: "error"; error: StreamError; idle?: boolean }
	/** The engine closed the stream without `[DONE]`. */
	| { type: "closed" };

/** A chunk with something the model produced, or `[DONE]`: what first-token timing waits for. */
export function isFirstToken(e: EngineEvent): boolean {
	if (e.type !== "chunk") return true;
	const chunk = e.chunk;
	if (chunk.usage !== undefined && chunk.usage !== null) return true;
	if (!Array.isArray(chunk.choices)) return false;
	for (const c of chunk.choices) {
		if (typeof c !== "object" || c === null) continue;
		const choice = c as Json;
		if (choice.finish_reason !== undefined && choice.finish_reason !== null) return true;
		if (typeof choice.text === "string" && choice.text !== "") return true;
		const delta = choice.delta as Json | undefined;
		if (typeof delta !== "object" || delta === null) continue;
		if (typeof delta.content === "string" && delta.content !== "") return true;
		if (typeof delta.reasoning_content === "string" && delta.reasoning_content !== "") return true;
		if (typeof delta.reasoning === "string" && delta.reasoning !== "") return true;
		if (typeof delta.refusal === "string" && delta.refusal !== "") return true;
		if (Array.isArray(delta.tool_calls) && delta.tool_calls.length > 0) return true;
	}
	return false;
}

export function failure(message: string): EngineEvent {
	return { type: "error", error: { message, type: "server_error", code: null } };
}

/** One SSE event as a typed engine event; blank data is nothing. */
export function classifyEvent(e: SseEvent): EngineEvent | null {
	const data = e.data.trim();
	if (data === "") return null;
	if (data === "[DONE]") return { type: "done" };
	let payload: unknown;
	try {
		payload = JSON.parse(data);
	} catch {
		// Forwarding it would make the client's SDK throw a parse error instead of an API error.
		return failure("upstream sent an event that is not JSON");
	}
	if (typeof payload !== "object" || payload === null || Array.isArray(payload)) {
		return failure("upstream sent an event that is not a JSON object");
	}
	const error = engineErrorIn(payload, e.event, data.slice(0, 300));
	if (error) {
		return { type: "error", error: { message: error.message, type: error.type ?? "server_error", code: error.code } };
	}
	return { type: "chunk", chunk: payload as Json, data };
}
