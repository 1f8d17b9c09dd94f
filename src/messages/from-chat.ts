/**
 * Chat Completions answer → Anthropic `message`, pure: content blocks in Anthropic's order
 * (thinking from the engine's reasoning, text, tool_use with its input as an object), the stop
 * reason, and usage as Anthropic counts it (input without the cached prefix, which is
 * `cache_read_input_tokens`). The stream encoder uses the same pieces.
 */
import { reasoningOf, toolInput } from "../chat/chat-shapes";
import type { SearchRound } from "../chat/search-tool";
import { randomId } from "../ids";
import { type SearchBlockOut, searchBlocks, serverToolUsage } from "./web-search";

export { reasoningOf, toolInput };

type Json = Record<string, unknown>;

export type StopReason = "end_turn" | "max_tokens" | "stop_sequence" | "tool_use" | "refusal";

/**
 * Engines have no signature for their reasoning; Anthropic clients expect a string and send it
 * back with the block, which the translation drops.
 */
export const THINKING_SIGNATURE = "venym-unsigned";

export type ContentBlockOut =
	| { type: "thinking"; thinking: string; signature: string }
	| { type: "text"; text: string }
	| { type: "tool_use"; id: string; name: string; input: Json }
	| SearchBlockOut;

export interface AnthropicUsage {
	input_tokens: number;
	output_tokens: number;
	cache_read_input_tokens: number;
	cache_creation_input_tokens: number;
	/** The gateway's web search the model ran (src/messages/web-search.ts). */
	server_tool_use?: { web_search_requests: number };
}

export interface AnthropicMessageOut {
	id: string;
	type: "message";
	role: "assistant";
	model: string;
	content: ContentBlockOut[];
	stop_reason: StopReason | null;
	stop_sequence: string | null;
	usage: AnthropicUsage;
	venym?: unknown;
}

function isRecord(v: unknown): v is Json {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

export function messageId(): string {
	return randomId("msg_", 12);
}

/**
 * The chat finish reason as Anthropic's stop reason. vLLM names the stop string that matched in
 * the choice's `stop_reason`; without it a stop is an end of turn.
 */
export function stopReasonOf(
	finish: unknown,
	matched: unknown,
	stopSequences: readonly string[],
	sawToolCall: boolean,
): { stop_reason: StopReason; stop_sequence: string | null } {
	if (finish === "tool_calls" || finish === "function_call" || (sawToolCall && finish !== "length")) {
		return { stop_reason: "tool_use", stop_sequence: null };
	}
	if (finish === "length") return { stop_reason: "max_tokens", stop_sequence: null };
	if (finish === "content_filter") return { stop_reason: "refusal", stop_sequence: null };
	if (typeof matched === "string" && stopSequences.includes(matched))
		return { stop_reason: "stop_sequence", stop_sequence: matched };
	return { stop_reason: "end_turn", stop_sequence: null };
}

/** Billed chat usage as Anthropic's: the cached prefix (engine's `cached_tokens`) apart from the rest of the input. */
export function anthropicUsage(usage: unknown, round?: SearchRound): AnthropicUsage {
	const u = isRecord(usage) ? usage : {};
	const prompt = typeof u.prompt_tokens === "number" ? u.prompt_tokens : 0;
	const output = typeof u.completion_tokens === "number" ? u.completion_tokens : 0;
	const details = isRecord(u.prompt_tokens_details) ? u.prompt_tokens_details : {};
	const raw = details.cached_tokens;
	const cached = typeof raw === "number" && Number.isSafeInteger(raw) ? Math.min(Math.max(raw, 0), prompt) : 0;
	const out: AnthropicUsage = {
		input_tokens: prompt - cached,
		output_tokens: output,
		cache_read_input_tokens: cached,
		cache_creation_input_tokens: 0,
	};
	const server = serverToolUsage(round);
	if (server) out.server_tool_use = server;
	return out;
}

/**
 * A chat completion (already rewritten by the chat pipeline: gateway model id, billed usage) as an
 * Anthropic message; after a search round (`round`) its two blocks come first.
 */
export function messageFromCompletion(
	completion: Json,
	stopSequences: readonly string[],
	round?: SearchRound,
): AnthropicMessageOut {
	const choice = Array.isArray(completion.choices) && isRecord(completion.choices[0]) ? completion.choices[0] : {};
	const m = isRecord(choice.message) ? choice.message : {};
	const content: ContentBlockOut[] = round ? searchBlocks(round) : [];
	const reasoning = reasoningOf(m);
	if (reasoning) content.push({ type: "thinking", thinking: reasoning, signature: THINKING_SIGNATURE });
	if (typeof m.content === "string" && m.content) content.push({ type: "text", text: m.content });
	const calls = Array.isArray(m.tool_calls) ? m.tool_calls.filter(isRecord) : [];
	for (const call of calls) {
		const fn = isRecord(call.function) ? call.function : {};
		content.push({
			type: "tool_use",
			id: typeof call.id === "string" && call.id ? call.id : randomId("toolu_", 12),
			name: typeof fn.name === "string" ? fn.name : "",
			input: toolInput(fn.arguments),
		});
	}
	const stop = stopReasonOf(choice.finish_reason, choice.stop_reason, stopSequences, calls.length > 0);
	const message: AnthropicMessageOut = {
		id: messageId(),
		type: "message",
		role: "assistant",
		model: typeof completion.model === "string" ? completion.model : "",
		content,
		...stop,
		usage: anthropicUsage(completion.usage, round),
	};
	// Web-search sources, where chat puts them.
	if (completion.venym !== undefined) message.venym = completion.venym;
	return message;
}
