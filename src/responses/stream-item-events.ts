/**
 * The Responses events that open an output item, carry its deltas and close it, and those of a
 * finished web search: pure functions of the item, for the stream builder (stream-events.ts) to
 * number and send.
 */

import type { OutputItem, OutputTextPart, WebSearchCallItemValue } from "./item-schema";
import { outputTextPart } from "./output-items";
import type { Unnumbered } from "./stream-event-types";

interface At {
	item_id: string;
	output_index: number;
}

/** The content part an opened message or reasoning item starts with. */
export type OpeningPart = OutputTextPart | { type: "reasoning_text"; text: string };

/** output_item.added, then content_part.added for the item's one content part. */
export function openingEvents(item: OutputItem, at: At, part: OpeningPart): Unnumbered[] {
	return [
		{ type: "response.output_item.added", output_index: at.output_index, item },
		{ type: "response.content_part.added", ...at, content_index: 0, part } as Unnumbered,
	];
}

/** One delta of an open item; a custom tool's (`custom`) goes out whole when it closes. */
export function deltaEvents(
	kind: "reasoning" | "message" | "function_call",
	at: At,
	delta: string,
	summarize: boolean,
	custom: boolean,
): Unnumbered[] {
	switch (kind) {
		case "reasoning": {
			const out: Unnumbered[] = [{ type: "response.reasoning_text.delta", ...at, content_index: 0, delta }];
			if (summarize) out.push({ type: "response.reasoning_summary_text.delta", ...at, summary_index: 0, delta });
			return out;
		}
		case "message":
			return [{ type: "response.output_text.delta", ...at, content_index: 0, delta, logprobs: [] }];
		case "function_call":
			return custom ? [] : [{ type: "response.function_call_arguments.delta", ...at, delta }];
	}
}

/** What closes `item` (the output_item.done event excepted), whose text so far is `text`. */
export function closingEvents(item: OutputItem, at: At, text: string, summarize: boolean): Unnumbered[] {
	const out: Unnumbered[] = [];
	switch (item.type) {
		case "reasoning":
			if (summarize) {
				out.push({ type: "response.reasoning_summary_text.done", ...at, summary_index: 0, text });
				out.push({ type: "response.reasoning_summary_part.done", ...at, summary_index: 0, part: { type: "summary_text", text } });
			}
			out.push({ type: "response.reasoning_text.done", ...at, content_index: 0, text });
			out.push({ type: "response.content_part.done", ...at, content_index: 0, part: { type: "reasoning_text", text } });
			break;
		case "message": {
			const part = item.content[0] ?? outputTextPart(text, []);
			for (const [i, annotation] of part.annotations.entries()) {
				out.push({ type: "response.output_text.annotation.added", ...at, content_index: 0, annotation_index: i, annotation });
			}
			out.push({ type: "response.output_text.done", ...at, content_index: 0, text, logprobs: [] });
			out.push({ type: "response.content_part.done", ...at, content_index: 0, part });
			break;
		}
		case "function_call":
			out.push({ type: "response.function_call_arguments.done", ...at, arguments: text });
			break;
		case "custom_tool_call":
			// The input is read from the call's whole arguments, so it goes out in one piece.
			out.push({ type: "response.custom_tool_call_input.delta", ...at, delta: item.input });
			out.push({ type: "response.custom_tool_call_input.done", ...at, input: item.input });
			break;
		case "web_search_call":
			break;
	}
	return out;
}

/** Which of a search's events: all of them, those up to `searching` (the search under way), or the rest. */
export type SearchPart = "all" | "start" | "end";

/** A search the gateway ran for the hosted web_search tool, as OpenAI streams one: added, its three steps, done. */
export function searchEvents(item: WebSearchCallItemValue, outputIndex: number, part: SearchPart = "all"): Unnumbered[] {
	const at = { item_id: item.id, output_index: outputIndex };
	const start: Unnumbered[] = [
		{ type: "response.output_item.added", output_index: outputIndex, item: { ...item, status: "in_progress" } },
		{ type: "response.web_search_call.in_progress", ...at },
		{ type: "response.web_search_call.searching", ...at },
	];
	const end: Unnumbered[] = [
		// A search whose backend failed has no completed event: its done item says `failed`.
		...(item.status === "completed" ? [{ type: "response.web_search_call.completed" as const, ...at }] : []),
		{ type: "response.output_item.done", output_index: outputIndex, item },
	];
	return part === "start" ? start : part === "end" ? end : [...start, ...end];
}
