/** The Responses stream's event types and wire encoding, and the builder's working state. */
import type { Response as SdkResponse, ResponseStreamEvent as SdkStreamEvent } from "openai/resources/responses/responses";
import type { Source } from "../types";
import type { ResponseObject } from "./response-object";

type WithOurResponse<E> = E extends { response: SdkResponse } ? Omit<E, "response"> & { response: ResponseObject } : E;
/** The openai SDK's event union, carrying our response object (no computed `output_text`). */
export type ResponseStreamEvent = WithOurResponse<SdkStreamEvent>;
/** An event before its sequence number is assigned. */
export type Unnumbered = ResponseStreamEvent extends infer E ? (E extends unknown ? Omit<E, "sequence_number"> : never) : never;

export type Json = Record<string, unknown>;

export function isRecord(v: unknown): v is Json {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

export function nonEmpty(v: unknown): string | undefined {
	return typeof v === "string" && v.length > 0 ? v : undefined;
}

export function isSource(v: unknown): v is Source {
	return isRecord(v) && typeof v.url === "string" && typeof v.title === "string";
}

export interface OpenItem {
	kind: "reasoning" | "message" | "function_call";
	outputIndex: number;
	id: string;
	/** Deltas kept as pieces and joined once at the end: repeated concatenation is O(n²). */
	pieces: string[];
	/** Only for function calls. */
	callId: string;
	name: string;
}

export interface ToolCallState {
	callId?: string;
	name?: string;
	/** Argument fragments that came before the call's name. */
	early: string[];
	item?: OpenItem;
}

/** One SSE frame: `event: <type>`, the JSON data line, a blank line. */
export function encodeEvent(e: ResponseStreamEvent): string {
	return `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`;
}
