/**
 * Chat Completions answer → Responses `response` object. The item builders here are
 * shared with the stream event builder, so a streamed response ends up identical to the
 * one built from the same completion in one piece.
 */
import type { ResponseStatus, ResponseUsage, Response as SdkResponse } from "openai/resources/responses/responses";
import { citationAnnotations, type Source } from "../search/grounding";
import { estimateTokens } from "../stream/estimate";
import { searchItem } from "./hosted-search";
import type { OutputItem, OutputMessageItem, OutputTextPart, ReasoningItemValue, UrlCitationAnnotation } from "./item-schema";
import type { ResponsesRequest } from "./request-schema";
import { callItem, echoTool, toolOrigins } from "./tools";

/** The response object on the wire. `output_text` is left out: the SDKs compute it. */
export type ResponseObject = Omit<SdkResponse, "output_text" | "access_programs" | "output" | "usage" | "error"> & {
	output: OutputItem[];
	usage: ResponseUsage | null;
	error: { code: string; message: string } | null;
	store: boolean;
};

export interface StatusMeta {
	id: string;
	/** Unix seconds. */
	createdAt: number;
	/** The gateway model id: the one the client asked for, until a model serves (servedMeta). */
	model: string;
	request: ResponsesRequest;
}

export interface ResponseMeta extends StatusMeta {
	/** A fresh random suffix per call; item ids are `rs_…`, `msg_…`, `fc_…`. */
	ids: () => string;
}

/**
 * The meta naming the model that served: after the engine answered, the chat pipeline's request
 * names it (a fallback model, when one served; `:online` kept), as it does in chat's answer.
 */
export function servedMeta<T extends StatusMeta>(meta: T, authorized: { req: { requestedModel: string } }): T {
	const model = authorized.req.requestedModel;
	return model === meta.model ? meta : { ...meta, model };
}

/** Any chat.completion body; read defensively because engines differ. */
export interface ChatCompletionLike {
	choices?: unknown;
	usage?: unknown;
	/** The gateway's own report: `sources` when a web search ran. */
	venym?: unknown;
}

export interface PartialOutput {
	output?: OutputItem[];
	usage?: ResponseUsage | null;
}

type Json = Record<string, unknown>;

function isRecord(v: unknown): v is Json {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

function count(v: unknown): number | undefined {
	return typeof v === "number" && Number.isFinite(v) && v >= 0 ? v : undefined;
}

function nonEmpty(v: unknown): string | undefined {
	return typeof v === "string" && v.length > 0 ? v : undefined;
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

export interface Ending {
	status: "completed" | "incomplete";
	incomplete_details: { reason: "max_output_tokens" | "content_filter" } | null;
}

export function endingOf(finishReason: unknown): Ending {
	if (finishReason === "length") return { status: "incomplete", incomplete_details: { reason: "max_output_tokens" } };
	if (finishReason === "content_filter") return { status: "incomplete", incomplete_details: { reason: "content_filter" } };
	return { status: "completed", incomplete_details: null };
}

/** The item that was being generated when the output was cut short is incomplete. */
export function markLastIncomplete(output: OutputItem[]): void {
	const last = output.at(-1);
	if (last && last.type !== "reasoning") last.status = "incomplete";
}

/** A response with no output yet: the request's settings echoed as OpenAI does. */
export function responseShell(meta: StatusMeta, status: ResponseStatus): ResponseObject {
	const r = meta.request;
	const text: ResponseObject["text"] = { format: r.text?.format ?? { type: "text" } };
	if (r.text?.verbosity) text.verbosity = r.text.verbosity;
	const out: ResponseObject = {
		id: meta.id,
		object: "response",
		created_at: meta.createdAt,
		status,
		background: r.background ?? false,
		error: null,
		incomplete_details: null,
		instructions: r.instructions ?? null,
		max_output_tokens: r.max_output_tokens ?? null,
		metadata: { ...r.metadata },
		model: meta.model,
		output: [],
		parallel_tool_calls: r.parallel_tool_calls ?? true,
		previous_response_id: r.previous_response_id ?? null,
		reasoning: { effort: r.reasoning?.effort ?? null, summary: r.reasoning?.summary ?? null },
		store: r.store,
		temperature: r.temperature ?? null,
		text,
		tool_choice: r.tool_choice ?? "auto",
		tools: (r.tools ?? []).map(echoTool) as unknown as ResponseObject["tools"],
		top_p: r.top_p ?? null,
		truncation: r.truncation ?? "disabled",
		usage: null,
	};
	if (r.user !== undefined) out.user = r.user;
	return out;
}

function textOf(content: unknown): string {
	if (typeof content === "string") return content;
	if (!Array.isArray(content)) return "";
	// A few engines answer with content parts rather than a string.
	return content.map((p) => (isRecord(p) && typeof p.text === "string" ? p.text : "")).join("");
}

export function responseFromCompletion(completion: ChatCompletionLike, meta: ResponseMeta): ResponseObject {
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
	const search = searchItem(meta.request, () => `ws_${meta.ids()}`, sources);
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

/** The reasoning of an output, all its reasoning items' text. */
export function reasoningText(output: OutputItem[]): string {
	let text = "";
	for (const item of output) if (item.type === "reasoning") for (const c of item.content ?? []) text += c.text;
	return text;
}

export function queuedResponse(meta: StatusMeta): ResponseObject {
	return responseShell(meta, "queued");
}

export function inProgressResponse(meta: StatusMeta): ResponseObject {
	return responseShell(meta, "in_progress");
}

export function failedResponse(
	meta: StatusMeta,
	error: { code: string; message: string },
	partial: PartialOutput = {},
): ResponseObject {
	return {
		...responseShell(meta, "failed"),
		error: { code: error.code, message: error.message },
		output: partial.output ?? [],
		usage: partial.usage ?? null,
	};
}

export function cancelledResponse(meta: StatusMeta, partial: PartialOutput = {}): ResponseObject {
	return { ...responseShell(meta, "cancelled"), output: partial.output ?? [], usage: partial.usage ?? null };
}
