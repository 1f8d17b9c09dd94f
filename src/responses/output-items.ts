/**
 * Responses output items built from chat pieces (key order as OpenAI sends them), and chat
 * usage and annotations in their Responses shape. Shared by the one-piece conversion
 * (from-chat.ts) and the stream event builder, so both end up with the same items.
 */
import type { ResponseUsage } from "openai/resources/responses/responses";
import { estimateTokens } from "../estimate";
import { citationAnnotations } from "../search/grounding";
import type { Source } from "../types";
import type {
	FunctionCallItemValue,
	OutputItem,
	OutputMessageItem,
	OutputTextPart,
	ReasoningItemValue,
	UrlCitationAnnotation,
} from "./item-schema";
import type { ResponsesRequest } from "./request-schema";

type Json = Record<string, unknown>;

function isRecord(v: unknown): v is Json {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

function count(v: unknown): number | undefined {
	return typeof v === "number" && Number.isFinite(v) && v >= 0 ? v : undefined;
}

// ---- item builders (key order as OpenAI sends them) ----

export function outputTextPart(text: string, annotations: UrlCitationAnnotation[]): OutputTextPart {
	return { type: "output_text", annotations, logprobs: [], text };
}

/**
 * A reasoning item: the engine's reasoning as its content and, when the request asked for a
 * `reasoning.summary`, as its one summary part too (open engines have no summarizer: the
 * reasoning is its own summary). Clients that read only summaries (the AI SDK, the Agents SDK)
 * see the reasoning that way.
 */
export function reasoningItem(id: string, text: string, summarize = false): ReasoningItemValue {
	return {
		id,
		type: "reasoning",
		summary: summarize && text ? [{ type: "summary_text", text }] : [],
		content: [{ type: "reasoning_text", text }],
	};
}

/** Whether the request asked for reasoning summaries (`reasoning.summary`: auto, concise or detailed). */
export function wantsSummary(request: ResponsesRequest): boolean {
	return request.reasoning?.summary != null;
}

export function messageItem(
	id: string,
	text: string,
	annotations: UrlCitationAnnotation[],
	status: OutputMessageItem["status"],
): OutputMessageItem {
	return { id, type: "message", status, content: [outputTextPart(text, annotations)], role: "assistant" };
}

export function functionCallItem(
	id: string,
	callId: string,
	name: string,
	args: string,
	status: FunctionCallItemValue["status"],
): FunctionCallItemValue {
	return { id, type: "function_call", status, arguments: args, call_id: callId, name };
}

// ---- conversions ----

/**
 * Chat usage → Responses usage; null when the engine's numbers are missing. `reasoning` (given
 * when the request asked for a summary) is the reasoning text: without the engine's own
 * `completion_tokens_details.reasoning_tokens`, the reasoning tokens are estimated from it
 * (about 4 characters a token, at most the output tokens).
 */
export function usageFromChat(usage: unknown, reasoning?: string): ResponseUsage | null {
	if (!isRecord(usage)) return null;
	const input = count(usage.prompt_tokens);
	const output = count(usage.completion_tokens);
	if (input === undefined || output === undefined) return null;
	const promptDetails = isRecord(usage.prompt_tokens_details) ? usage.prompt_tokens_details : {};
	const completionDetails = isRecord(usage.completion_tokens_details) ? usage.completion_tokens_details : {};
	return {
		input_tokens: input,
		input_tokens_details: { cached_tokens: count(promptDetails.cached_tokens) ?? 0, cache_write_tokens: 0 },
		output_tokens: output,
		output_tokens_details: {
			reasoning_tokens:
				count(completionDetails.reasoning_tokens) ?? (reasoning ? Math.min(estimateTokens(reasoning.length), output) : 0),
		},
		total_tokens: count(usage.total_tokens) ?? input + output,
	};
}

/** Chat's nested `{type, url_citation: {…}}` annotations → the Responses flat shape. */
export function annotationsFromChat(annotations: unknown): UrlCitationAnnotation[] {
	if (!Array.isArray(annotations)) return [];
	const out: UrlCitationAnnotation[] = [];
	for (const a of annotations) {
		if (!isRecord(a) || a.type !== "url_citation") continue;
		const c = isRecord(a.url_citation) ? a.url_citation : a;
		const start = count(c.start_index);
		const end = count(c.end_index);
		if (start === undefined || end === undefined || typeof c.url !== "string") continue;
		out.push({
			type: "url_citation",
			start_index: start,
			end_index: end,
			url: c.url,
			title: typeof c.title === "string" ? c.title : "",
		});
	}
	return out;
}

/** url_citation annotations for each [n] in `text` that names one of the web-search sources. */
export function annotationsFromSources(text: string, sources: Source[]): UrlCitationAnnotation[] {
	return sources.length ? annotationsFromChat(citationAnnotations(text, sources)) : [];
}
/** The item that was being generated when the output was cut short is incomplete. */
export function markLastIncomplete(output: OutputItem[]): void {
	const last = output.at(-1);
	if (last && last.type !== "reasoning") last.status = "incomplete";
}
/** The reasoning of an output, all its reasoning items' text. */
export function reasoningText(output: OutputItem[]): string {
	let text = "";
	for (const item of output) if (item.type === "reasoning") for (const c of item.content ?? []) text += c.text;
	return text;
}
