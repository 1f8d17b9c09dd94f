/**
 * Chat Completions shapes the translating lanes (Messages, Gemini) share: the chat message they
 * build, a tool call's arguments as an object, the engine's reasoning under either field.
 */
type Json = Record<string, unknown>;

type ChatPart = { type: "text"; text: string } | { type: "image_url"; image_url: { url: string } };

interface ChatToolCall {
	id: string;
	type: "function";
	function: { name: string; arguments: string };
}

export type ChatMessage =
	| { role: "system"; content: string }
	| { role: "user"; content: string | ChatPart[] }
	| { role: "assistant"; content: string | null; tool_calls?: ChatToolCall[] }
	| { role: "tool"; tool_call_id: string; content: string };

function isRecord(v: unknown): v is Json {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** A tool call's JSON arguments as the object Anthropic's `input` and Gemini's `args` are; anything else is an empty object. */
export function toolInput(args: unknown): Json {
	if (typeof args !== "string" || args.trim() === "") return {};
	try {
		const v = JSON.parse(args);
		return isRecord(v) ? v : {};
	} catch {
		return {};
	}
}

/** The engine's reasoning text under either field engines use. */
export function reasoningOf(m: Json): string {
	const r = typeof m.reasoning_content === "string" ? m.reasoning_content : m.reasoning;
	return typeof r === "string" ? r : "";
}
