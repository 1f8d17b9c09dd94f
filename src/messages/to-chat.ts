/**
 * Anthropic Messages request → Chat Completions body, pure. The body is built from the known
 * Anthropic fields only (nothing of the client's passes through untranslated, so no engine
 * internal can reach the engine this way) and keeps the client's model id: the chat pipeline
 * resolves the catalog, caps `max_tokens` and reads `models`/`venym` as it does for chat.
 */
import type { ChatMessage } from "../chat/chat-shapes";
import { GatewayError } from "../errors";

export type { ChatMessage };

import { isServerToolSearch, offeredTools, referenceText } from "./deferred-tools";
import type { AnthropicMessage, ContentBlock, CustomToolInput, MessagesRequest } from "./request-schema";
import { isServerSearch, searchName, searchResultReplay } from "./web-search";

type ChatPart = { type: "text"; text: string } | { type: "image_url"; image_url: { url: string } };

interface ChatToolCall {
	id: string;
	type: "function";
	function: { name: string; arguments: string };
}

export interface TranslateOptions {
	/** The model has the `reasoning` capability: `thinking` turns the engine's reasoning on or off. */
	reasoning: boolean;
	/**
	 * The gateway has a search backend: a web search server tool is accepted and left out of the
	 * chat tools (the search round offers its own, src/messages/web-search.ts).
	 */
	webSearch?: boolean;
}

function invalid(message: string, param: string): GatewayError {
	return new GatewayError("invalid_request", message, { param });
}

function imageUrl(block: Extract<ContentBlock, { type: "image" }>): string {
	const s = block.source;
	// A data URL is what chat engines take for inline images; a URL is passed on, never fetched here.
	return s.type === "base64" ? `data:${s.media_type};base64,${s.data}` : s.url;
}

function documentText(block: { title?: string | null; source: { data: string } }): string {
	return block.title ? `${block.title}\n\n${block.source.data}` : block.source.data;
}

/** A search result as the model reads it: its title and source, then its text. */
function searchResultText(block: { title: string; source: string; content: { text: string }[] }): string {
	return `${block.title}\n${block.source}\n\n${block.content.map((c) => c.text).join("\n")}`;
}

/** A user turn's parts: text only becomes a plain string (what every engine accepts). */
function userContent(parts: ChatPart[]): string | ChatPart[] {
	if (parts.every((p) => p.type === "text")) return parts.map((p) => (p as { text: string }).text).join("\n");
	return parts;
}

function toolResultText(block: Extract<ContentBlock, { type: "tool_result" }>, images: ChatPart[]): string {
	let text: string;
	if (typeof block.content === "string") text = block.content;
	else {
		const texts: string[] = [];
		for (const b of block.content ?? []) {
			if (b.type === "text") texts.push(b.text);
			else if (b.type === "document") texts.push(documentText(b));
			else if (b.type === "search_result") texts.push(searchResultText(b));
			else if (b.type === "tool_reference") texts.push(referenceText(b.tool_name));
			else images.push({ type: "image_url", image_url: { url: imageUrl(b) } });
		}
		text = texts.join("\n");
	}
	// Chat has no error flag on a tool message: the model reads it in the text.
	return block.is_error ? `Error: ${text}` : text;
}

/** A user turn: its tool results first (chat wants them right after the assistant's calls), then what the user said. */
function userTurn(content: ContentBlock[], at: string, out: ChatMessage[]): void {
	const parts: ChatPart[] = [];
	const images: ChatPart[] = [];
	for (const [j, block] of content.entries()) {
		switch (block.type) {
			case "text":
				parts.push({ type: "text", text: block.text });
				break;
			case "image":
				parts.push({ type: "image_url", image_url: { url: imageUrl(block) } });
				break;
			case "document":
				parts.push({ type: "text", text: documentText(block) });
				break;
			case "search_result":
				parts.push({ type: "text", text: searchResultText(block) });
				break;
			case "tool_result":
				out.push({ role: "tool", tool_call_id: block.tool_use_id, content: toolResultText(block, images) });
				break;
			case "tool_use":
				throw invalid("A 'tool_use' block belongs in an assistant message.", `${at}.content[${j}]`);
			default:
				// thinking, redacted_thinking and server tool blocks: nothing the engine can read.
				break;
		}
	}
	// Images a tool returned follow its result, as the user's: chat tool messages carry text only.
	parts.push(...images);
	if (parts.length) out.push({ role: "user", content: userContent(parts) });
}

function assistantTurn(content: ContentBlock[], at: string, out: ChatMessage[]): void {
	const texts: string[] = [];
	const calls: ChatToolCall[] = [];
	for (const [j, block] of content.entries()) {
		if (block.type === "text") texts.push(block.text);
		else if (block.type === "web_search_tool_result") {
			// An earlier turn's search: its results as text, where the model read them.
			const replay = searchResultReplay(block);
			if (replay) texts.push(replay);
		} else if (block.type === "tool_use") {
			calls.push({ id: block.id, type: "function", function: { name: block.name, arguments: JSON.stringify(block.input) } });
		} else if (block.type === "tool_result") {
			throw invalid("A 'tool_result' block belongs in a user message.", `${at}.content[${j}]`);
		}
		// Earlier thinking is not replayed: chat templates drop it, and some engines reject it.
	}
	const message: ChatMessage = { role: "assistant", content: texts.length ? texts.join("") : calls.length ? null : "" };
	if (calls.length) message.tool_calls = calls;
	out.push(message);
}

function systemText(content: string | ContentBlock[]): string {
	if (typeof content === "string") return content;
	return content.flatMap((b) => (b.type === "text" ? [b.text] : [])).join("\n");
}

export function toChatMessages(req: Pick<MessagesRequest, "system" | "messages">): ChatMessage[] {
	const out: ChatMessage[] = [];
	if (req.system !== undefined) {
		const text = systemText(req.system);
		if (text) out.push({ role: "system", content: text });
	}
	for (const [i, m] of req.messages.entries()) translateMessage(m, `messages[${i}]`, out);
	return out;
}

function translateMessage(m: AnthropicMessage, at: string, out: ChatMessage[]): void {
	if (m.role === "system") {
		out.push({ role: "system", content: systemText(m.content) });
		return;
	}
	if (typeof m.content === "string") {
		out.push(m.role === "user" ? { role: "user", content: m.content } : { role: "assistant", content: m.content });
		return;
	}
	if (m.role === "user") userTurn(m.content, at, out);
	else assistantTurn(m.content, at, out);
}

/** Anthropic's server tools run on Anthropic's side; here web search is the gateway's own. */
function chatTool(tool: Record<string, unknown>, i: number): Record<string, unknown> {
	const type = tool.type;
	if (type !== undefined && type !== "custom") {
		const hint =
			typeof type === "string" && type.startsWith("web_search")
				? ' Web search is the gateway\'s own: add \':online\' to the model id, or send "venym": {"web_search": true}.'
				: "";
		throw invalid(
			`Invalid 'tools[${i}].type': the server tool ${JSON.stringify(type).slice(0, 80)} is not offered; only custom tools (name, description, input_schema) are.${hint}`,
			`tools[${i}].type`,
		);
	}
	if (typeof tool.name !== "string" || tool.name === "")
		throw invalid(`Missing required parameter: 'tools[${i}].name'.`, `tools[${i}].name`);
	const schema = tool.input_schema;
	if (typeof schema !== "object" || schema === null || Array.isArray(schema)) {
		throw invalid(`Invalid 'tools[${i}].input_schema': expected a JSON schema object.`, `tools[${i}].input_schema`);
	}
	const t = tool as CustomToolInput;
	const fn: Record<string, unknown> = { name: t.name, parameters: t.input_schema };
	if (typeof t.description === "string") fn.description = t.description;
	return { type: "function", function: fn };
}

/** A served search tool's `max_uses`: absent, or a whole number (0 offers no search: web-search.ts). */
function checkMaxUses(tool: Record<string, unknown>, i: number): void {
	const n = tool.max_uses;
	if (n === undefined || n === null || (typeof n === "number" && Number.isSafeInteger(n) && n >= 0)) return;
	throw invalid(`Invalid 'tools[${i}].max_uses': expected a whole number of at least 0.`, `tools[${i}].max_uses`);
}

/** Tool names are unique, as Anthropic has them: a `tool_choice` or a call naming one must say which tool it means. */
function checkUniqueNames(tools: Record<string, unknown>[], served: Record<string, unknown>[]): void {
	const seen = new Set<string>();
	for (const [i, t] of tools.entries()) {
		const name = served.includes(t) ? searchName(t) : t.name;
		if (typeof name !== "string") continue;
		if (seen.has(name))
			throw invalid(`Invalid 'tools[${i}].name': the tool name '${name.slice(0, 64)}' is used twice.`, `tools[${i}].name`);
		seen.add(name);
	}
}

/**
 * The `tool_choice` left for the chat tools: one naming the served search tool, or `any` with no
 * chat tool, is the search round's (its `required`); with no chat tool left, none.
 */
function servedChoice(
	choice: MessagesRequest["tool_choice"],
	served: Record<string, unknown>[],
	chatTools: number,
): MessagesRequest["tool_choice"] {
	if (!choice || served.length === 0) return choice;
	if (chatTools === 0) return undefined;
	if (choice.type === "tool" && served.some((t) => searchName(t) === choice.name)) return undefined;
	return choice;
}

/** Anthropic's budget in tokens as the engines' effort level (OpenAI's reasoning_effort). */
export function effortOf(thinking: NonNullable<MessagesRequest["thinking"]>): "low" | "medium" | "high" {
	if (thinking.type !== "enabled") return "medium";
	const budget = thinking.budget_tokens as number;
	return budget < 4096 ? "low" : budget < 16384 ? "medium" : "high";
}

/** The Chat Completions body for a validated Messages request. */
export function messagesToChat(req: MessagesRequest, opts: TranslateOptions): Record<string, unknown> {
	const body: Record<string, unknown> = {
		model: req.model,
		messages: toChatMessages(req),
		max_tokens: req.max_tokens,
	};
	if (req.stream !== undefined) body.stream = req.stream;
	if (req.temperature !== undefined) body.temperature = req.temperature;
	if (req.top_p !== undefined) body.top_p = req.top_p;
	if (req.top_k !== undefined) body.top_k = req.top_k;
	if (req.stop_sequences?.length) body.stop = req.stop_sequences;
	const served = opts.webSearch ? (req.tools ?? []).filter(isServerSearch) : [];
	for (const t of served) checkMaxUses(t, (req.tools ?? []).indexOf(t));
	checkUniqueNames(req.tools ?? [], served);
	// Deferred tools no tool_reference names yet are withheld; with Anthropic's server tool search,
	// left to the gateway's tool search (deferred-tools.ts).
	const offered = new Set(offeredTools(req));
	const toolSearch = (req.tools ?? []).some(isServerToolSearch);
	const tools = (req.tools ?? []).flatMap((t, i) => {
		if (served.includes(t) || isServerToolSearch(t) || (!offered.has(t) && !toolSearch)) return [];
		return [offered.has(t) ? chatTool(t, i) : { ...chatTool(t, i), defer_loading: true }];
	});
	if (tools.length) body.tools = tools;
	const choice = servedChoice(req.tool_choice, served, tools.length);
	if (choice) {
		if (choice.type === "tool") body.tool_choice = { type: "function", function: { name: choice.name } };
		else body.tool_choice = choice.type === "any" ? "required" : choice.type;
		if (choice.type !== "none" && choice.disable_parallel_tool_use === true) body.parallel_tool_calls = false;
	}
	// The engine's reasoning switch, only where the model reasons: Qwen3-style templates read
	// enable_thinking, others reasoning_effort.
	if (req.thinking && opts.reasoning) {
		if (req.thinking.type === "disabled") body.chat_template_kwargs = { enable_thinking: false };
		else {
			body.chat_template_kwargs = { enable_thinking: true };
			body.reasoning_effort = effortOf(req.thinking);
		}
	}
	// Prompt-cache affinity: chat's `user` keeps a conversation on one node (and is passed on).
	if (typeof req.metadata?.user_id === "string" && req.metadata.user_id) body.user = wholeCharacters(req.metadata.user_id, 256);
	if (req.models !== undefined) body.models = req.models;
	if (req.fallbacks !== undefined) body.fallbacks = req.fallbacks;
	if (req.venym !== undefined) body.venym = req.venym;
	return body;
}

/** At most `max` UTF-16 units, never ending inside a surrogate pair (a lone half would reach the engine). */
function wholeCharacters(text: string, max: number): string {
	if (text.length <= max) return text;
	const code = text.charCodeAt(max - 1);
	return text.slice(0, code >= 0xd800 && code <= 0xdbff ? max - 1 : max);
}
