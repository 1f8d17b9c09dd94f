/**
 * Chat Completions answer → Responses `response` object, built from the same item builders
 * as the stream event builder, so a streamed response ends up identical to the one built
 * from the same completion in one piece.
 */

import type { SearchRound } from "../chat/search-tool";
import { searchItem } from "./hosted-search";
import type { OutputItem } from "./item-schema";
import {
	annotationsFromChat,
	markLastIncomplete,
	messageItem,
	reasoningItem,
	reasoningText,
	usageFromChat,
	wantsSummary,
} from "./output-items";
import { endingOf, type ResponseMeta, type ResponseObject, responseShell } from "./response-object";
import { callItem, toolOrigins } from "./tools";

/** Any chat.completion body; read defensively because engines differ. */
export interface ChatCompletionLike {
	choices?: unknown;
	usage?: unknown;
	/** The gateway's own report: `sources` when a web search ran. */
	venym?: unknown;
}
type Json = Record<string, unknown>;

function isRecord(v: unknown): v is Json {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

function nonEmpty(v: unknown): string | undefined {
	return typeof v === "string" && v.length > 0 ? v : undefined;
}

function textOf(content: unknown): string {
	if (typeof content === "string") return content;
	if (!Array.isArray(content)) return "";
	// A few engines answer with content parts rather than a string.
	return content.map((p) => (isRecord(p) && typeof p.text === "string" ? p.text : "")).join("");
}

/** `round`: the search the model called (chat/search-round.ts), shown as a `web_search_call` item first. */
export function responseFromCompletion(completion: ChatCompletionLike, meta: ResponseMeta, round?: SearchRound): ResponseObject {
	const choices = Array.isArray(completion.choices) ? completion.choices : [];
	const choice: Json = choices.find((c) => isRecord(c) && (c.index ?? 0) === 0) ?? {};
	const message = isRecord(choice.message) ? choice.message : {};

	const output: OutputItem[] = [];
	const reasoning = nonEmpty(message.reasoning_content) ?? nonEmpty(message.reasoning);
	const summarize = wantsSummary(meta.request);
	if (reasoning) output.push(reasoningItem(`rs_${meta.ids()}`, reasoning, summarize));

	const content = textOf(message.content);
	const calls = Array.isArray(message.tool_calls) ? message.tool_calls.filter(isRecord) : [];
	// An answer with nothing in it still gets its (empty) message, as the stream does.
	const sources = isRecord(completion.venym) && Array.isArray(completion.venym.sources) ? completion.venym.sources : [];
	const search = searchItem(meta.request, () => `ws_${meta.ids()}`, sources, round);
	if (search) output.unshift(search);
	if (content || (calls.length === 0 && output.length === 0)) {
		output.push(messageItem(`msg_${meta.ids()}`, content, annotationsFromChat(message.annotations), "completed"));
	}
	const origins = toolOrigins(meta.request.tools);
	for (const call of calls) {
		const fn = isRecord(call.function) ? call.function : {};
		const id = `fc_${meta.ids()}`;
		const callId = nonEmpty(call.id) ?? `call_${meta.ids()}`;
		const args = typeof fn.arguments === "string" ? fn.arguments : "";
		output.push(callItem(origins, id, callId, typeof fn.name === "string" ? fn.name : "", args, "completed"));
	}

	const ending = endingOf(choice.finish_reason);
	if (ending.status === "incomplete") markLastIncomplete(output);
	return {
		...responseShell(meta, ending.status),
		incomplete_details: ending.incomplete_details,
		output,
		usage: usageFromChat(completion.usage, summarize ? reasoningText(output) : undefined),
	};
}
