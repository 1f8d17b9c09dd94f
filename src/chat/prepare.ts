import type { ModelConfig, ResolvedModel } from "../config";
import { CHAT_FIELDS, engineFields } from "../http/engine-fields";
import type { ChatRequest } from "./validate";

export const DEFAULT_SEARCH_RESULTS = 6;

export interface PreparedChat {
	/**
	 * The body the engine receives: the fields chat sends (http/engine-fields.ts) and the model's
	 * pass-through ones, picked from the client's body (values shared), with the gateway's rewrites.
	 */
	engineBody: Record<string, unknown>;
	stream: boolean;
	/** The output token cap the engine was given. */
	maxOutputTokens: number;
	webSearch: { enabled: boolean; results: number };
	/**
	 * The gateway's web search offered to the engine as a function tool under `name`, run when the
	 * engine calls it (chat/search-round.ts); set by authorize-chat.ts when a lane asks for it. With
	 * `deferred`, the gateway's tool search over those withheld tools instead (tool-search.ts).
	 */
	searchTool?: { name: string; results: number; deferred?: Record<string, unknown>[] };
	/** `venym.tool_call_repair`: false turns the model's repair off for this request. */
	toolCallRepair?: boolean;
}

/** The largest output the model may produce for this prompt: the model's cap, and what the context leaves. */
export function outputCap(model: ModelConfig, promptTokens: number): number {
	let cap = model.max_output_tokens;
	if (model.context_length !== undefined) cap = Math.min(cap, Math.max(1, model.context_length - promptTokens));
	return cap;
}

/**
 * The engine's body for a validated chat request on `resolved`: only the fields chat sends and the
 * model lets through (never the client's body as is), with the catalog's engine model, capped max
 * tokens (the cap is sent when the client sent none) and usage forced on streams. The client's
 * body is not changed.
 */
export function prepareChat(body: ChatRequest, resolved: ResolvedModel, promptTokens: number): PreparedChat {
	const cap = outputCap(resolved.model, promptTokens);
	const out = engineFields(body, CHAT_FIELDS, resolved.model.pass_through_fields);
	// Earlier reasoning goes back only to a model whose engine takes it (the `reasoning`
	// capability): a Responses turn stored or resealed for one model may be continued on another.
	if (!resolved.model.capabilities.includes("reasoning")) out.messages = withoutReasoning(out.messages);
	const venym = body.venym;
	out.model = resolved.model.engine_model;

	let maxOutputTokens = cap;
	let sawLimit = false;
	for (const field of ["max_tokens", "max_completion_tokens"] as const) {
		const v = body[field];
		if (typeof v === "number") {
			sawLimit = true;
			out[field] = Math.min(v, cap);
			maxOutputTokens = Math.min(maxOutputTokens, out[field] as number);
		} else if (v === null) {
			delete out[field];
		}
	}
	if (!sawLimit) out.max_tokens = cap;

	// The engine is always asked for a stream with usage, whatever the client asked: an engine
	// answers a non-stream request only when it is whole, so only a stream lets the first-byte
	// timeout tell a slow answer from a dead node. A non-stream client's answer is put together
	// from the stream (src/stream/assemble-answer.ts).
	const stream = body.stream === true;
	out.stream = true;
	out.stream_options = { include_usage: true };

	return {
		engineBody: out,
		stream,
		maxOutputTokens,
		webSearch: {
			enabled: resolved.online || venym?.web_search === true,
			results: venym?.search_results ?? DEFAULT_SEARCH_RESULTS,
		},
		...(venym?.tool_call_repair === false ? { toolCallRepair: false } : {}),
	};
}

/** The messages without `reasoning_content` (a new array; the candidates share the message objects). */
function withoutReasoning(messages: unknown): unknown {
	if (!Array.isArray(messages) || !messages.some((m) => m && typeof m === "object" && "reasoning_content" in m)) return messages;
	return messages.map((m) => {
		if (!m || typeof m !== "object" || !("reasoning_content" in m)) return m;
		const { reasoning_content: _, ...rest } = m as Record<string, unknown>;
		return rest;
	});
}
