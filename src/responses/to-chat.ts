/**
 * Responses request → Chat Completions body, for engines that only speak Chat Completions.
 * The body keeps the client's model id: the chat pipeline resolves the catalog, caps
 * max_tokens and reads `venym` exactly as it does for /v1/chat/completions.
 */

import type {
	InputImagePart,
	InputMessageItem,
	InputTextPart,
	ItemReference,
	OutputTextPart,
	RequestItem,
	ResponseInputItem,
	ToolOutputValue,
} from "./item-schema";
import { annotationsFromChat, outputTextPart } from "./output-items";
import type { ResponsesRequest } from "./request-schema";
import { chatToolFields } from "./tool-choice";
import { customArguments, flatName } from "./tools";

type ChatContentPart =
	| { type: "text"; text: string }
	| { type: "image_url"; image_url: { url: string; detail?: "low" | "high" } };

interface ChatToolCall {
	id: string;
	type: "function";
	function: { name: string; arguments: string };
}

type ChatMessage =
	| { role: "system" | "user"; content: string | ChatContentPart[] }
	| { role: "assistant"; content: string | null; tool_calls?: ChatToolCall[]; reasoning_content?: string }
	| { role: "tool"; tool_call_id: string; content: string | ChatContentPart[] };

type AnyItem = RequestItem | ResponseInputItem;
type AnyPart = Exclude<Extract<AnyItem, { type: "message" }>["content"], string>[number];

function isText(p: AnyPart): p is Extract<AnyPart, { text: string }> {
	return p.type === "input_text" || p.type === "output_text";
}

function joinText(parts: AnyPart[]): string {
	return parts
		.filter(isText)
		.map((p) => p.text)
		.join("\n");
}

function chatPart(p: AnyPart): ChatContentPart {
	if (p.type !== "input_image") return { type: "text", text: p.text };
	const image: { url: string; detail?: "low" | "high" } = { url: p.image_url ?? "" };
	// "auto" is the chat default, so it is left out; chat has no "original", "high" is the nearest.
	if (p.detail === "low" || p.detail === "high") image.detail = p.detail;
	else if (p.detail === "original") image.detail = "high";
	return { type: "image_url", image_url: image };
}

/** Input text only → a plain string (what every engine accepts); with images → parts. */
function userContent(content: string | AnyPart[]): string | ChatContentPart[] {
	if (typeof content === "string") return content;
	if (content.every(isText)) return joinText(content);
	return content.map(chatPart);
}

/** A tool's output for the engine: its text, or parts when it carries images. */
function toolContent(output: ToolOutputValue): string | ChatContentPart[] {
	if (typeof output === "string") return output;
	const parts: ChatContentPart[] = [];
	for (const p of output) {
		if (typeof p.text === "string") parts.push({ type: "text", text: p.text });
		else if (p.type === "input_image" && typeof p.image_url === "string")
			parts.push({ type: "image_url", image_url: { url: p.image_url } });
	}
	if (parts.every((p) => p.type === "text")) return parts.map((p) => (p.type === "text" ? p.text : "")).join("\n");
	return parts;
}

/**
 * The reasoning text the engine gets back for a reasoning item: only what the gateway opened from
 * its own seal (reasoning-round-trip.ts leaves `content` on a sealed item only then). Other
 * reasoning (stored, or the client's own) is not replayed: chat templates drop it, and some
 * engines reject it.
 */
function reasoningOf(item: Extract<AnyItem, { type: "reasoning" }>): string {
	const { content, encrypted_content: sealed } = item as { content?: unknown; encrypted_content?: unknown };
	if (typeof sealed !== "string" || !Array.isArray(content)) return "";
	return content.map((c) => (c && c.type === "reasoning_text" && typeof c.text === "string" ? c.text : "")).join("");
}

function toMessages(items: ReadonlyArray<AnyItem>): ChatMessage[] {
	const messages: ChatMessage[] = [];
	// Reasoning goes on the assistant message that follows it, as vLLM takes it (`reasoning_content`).
	let reasoning = "";
	const assistant = (content: string | null): Extract<ChatMessage, { role: "assistant" }> => {
		const message: Extract<ChatMessage, { role: "assistant" }> = { role: "assistant", content };
		if (reasoning) message.reasoning_content = reasoning;
		reasoning = "";
		messages.push(message);
		return message;
	};
	const call = (call: ChatToolCall) => {
		const last = messages.at(-1);
		// One assistant turn may say something and call several tools: keep it one message.
		if (last?.role !== "assistant" || reasoning) assistant(null).tool_calls = [call];
		else if (last.tool_calls) last.tool_calls.push(call);
		else last.tool_calls = [call];
	};
	for (const item of items) {
		switch (item.type) {
			case "message": {
				if (item.role === "assistant") {
					assistant(typeof item.content === "string" ? item.content : joinText(item.content));
				} else {
					// Many engines' chat templates know no "developer" role; it means the same as system.
					const role = item.role === "user" ? "user" : "system";
					messages.push({ role, content: userContent(item.content) });
					reasoning = "";
				}
				break;
			}
			case "function_call": {
				const name = item.namespace ? flatName(item.namespace, item.name) : item.name;
				call({ id: item.call_id, type: "function", function: { name, arguments: item.arguments } });
				break;
			}
			case "custom_tool_call": {
				const name = item.namespace ? flatName(item.namespace, item.name) : item.name;
				call({ id: item.call_id, type: "function", function: { name, arguments: customArguments(item.input) } });
				break;
			}
			case "function_call_output":
			case "custom_tool_call_output":
				messages.push({ role: "tool", tool_call_id: item.call_id, content: toolContent(item.output) });
				break;
			case "reasoning":
				reasoning += reasoningOf(item);
				break;
			case "web_search_call":
				// The search's results went into that turn's prompt; the engine's answer carries what it used.
				break;
			case "item_reference":
				// run-response replaces references with the stored items before translating.
				throw new Error(`item reference '${item.id}' was not resolved before translation`);
		}
	}
	return messages;
}

function responseFormat(format: NonNullable<ResponsesRequest["text"]>["format"]): Record<string, unknown> | undefined {
	if (!format || format.type === "text") return undefined;
	if (format.type === "json_object") return { type: "json_object" };
	const schema: Record<string, unknown> = { name: format.name, schema: format.schema };
	if (format.strict !== undefined && format.strict !== null) schema.strict = format.strict;
	if (format.description !== undefined) schema.description = format.description;
	return { type: "json_schema", json_schema: schema };
}

/**
 * The Chat Completions body for `req`, after the conversation so far (`history`: earlier
 * turns' input and output items, oldest first). Settings without a chat equivalent
 * (store, metadata, truncation, include, text.verbosity, reasoning.summary) stay here.
 */
export function responsesToChat(req: ResponsesRequest, history: ReadonlyArray<ResponseInputItem>): Record<string, unknown> {
	const current: AnyItem[] = typeof req.input === "string" ? [{ type: "message", role: "user", content: req.input }] : req.input;
	const messages: ChatMessage[] = [];
	if (req.instructions) messages.push({ role: "system", content: req.instructions });
	messages.push(...toMessages([...history, ...current]));

	// A namespace's function and a custom tool are named as the engine knows them (tools.ts).
	const body: Record<string, unknown> = {
		model: req.model,
		messages,
		...chatToolFields(req.tools, req.tool_choice, req.parallel_tool_calls),
	};
	const format = responseFormat(req.text?.format);
	if (format) body.response_format = format;
	if (req.reasoning?.effort != null) body.reasoning_effort = req.reasoning.effort;
	if (req.max_output_tokens != null) body.max_tokens = req.max_output_tokens;
	if (req.temperature != null) body.temperature = req.temperature;
	if (req.top_p != null) body.top_p = req.top_p;
	if (req.user !== undefined) body.user = req.user;
	// Not sent to an engine (chat drops it): the end user of the per-user caps and usage (auth/scopes.ts endUserOf).
	if (typeof req.safety_identifier === "string") body.safety_identifier = req.safety_identifier;
	// Routing, read by the chat pipeline: the affinity key (also passed on to the engine), and the
	// fallback models (validated in request-schema, removed before the engine).
	if (req.prompt_cache_key != null) body.prompt_cache_key = req.prompt_cache_key;
	if (req.models != null) body.models = req.models;
	if (req.fallbacks != null) body.fallbacks = req.fallbacks;
	if (req.venym !== undefined) body.venym = req.venym;
	if (req.stream != null) body.stream = req.stream;
	return body;
}

function inputPart(p: AnyPart): InputTextPart | InputImagePart {
	if (p.type === "input_image") return { type: "input_image", image_url: p.image_url ?? "", detail: p.detail ?? "auto" };
	return { type: "input_text", text: p.text };
}

function outputPart(p: AnyPart): OutputTextPart {
	if (p.type === "input_image") return outputTextPart("", []);
	return outputTextPart(p.text, p.type === "output_text" ? annotationsFromChat(p.annotations) : []);
}

/**
 * The request's input as stored items (for history and GET …/input_items): a string
 * becomes one user message, every item gets an id (`msg_`, `fc_`, `fco_`, `rs_` + `ids()`)
 * unless it brought one, and message content is always a parts array. An item reference
 * stays as it is, for run-response to replace with the item it names (item-references.ts).
 */
export function inputItems(req: ResponsesRequest, ids: () => string): Array<ResponseInputItem | ItemReference> {
	if (typeof req.input === "string") {
		return [
			{
				type: "message",
				id: `msg_${ids()}`,
				role: "user",
				status: "completed",
				content: [{ type: "input_text", text: req.input }],
			},
		];
	}
	return req.input.map((item) => normalise(item, ids));
}

function normalise(item: RequestItem, ids: () => string): ResponseInputItem | ItemReference {
	switch (item.type) {
		case "message": {
			const id = item.id || `msg_${ids()}`;
			if (item.role === "assistant") {
				const content =
					typeof item.content === "string"
						? [outputPart({ type: "output_text", text: item.content })]
						: item.content.map(outputPart);
				return { type: "message", id, role: "assistant", status: item.status ?? "completed", content };
			}
			const content: InputMessageItem["content"] =
				typeof item.content === "string" ? [{ type: "input_text", text: item.content }] : item.content.map(inputPart);
			return { type: "message", id, role: item.role, status: "completed", content };
		}
		case "function_call":
			return {
				type: "function_call",
				id: item.id || `fc_${ids()}`,
				call_id: item.call_id,
				name: item.name,
				...(item.namespace ? { namespace: item.namespace } : {}),
				arguments: item.arguments,
				status: item.status ?? "completed",
			};
		case "custom_tool_call":
			return {
				type: "custom_tool_call",
				id: item.id || `ctc_${ids()}`,
				call_id: item.call_id,
				name: item.name,
				...(item.namespace ? { namespace: item.namespace } : {}),
				input: item.input,
				status: item.status ?? "completed",
			};
		case "function_call_output":
		case "custom_tool_call_output":
			return {
				type: item.type,
				id: item.id || `${item.type === "function_call_output" ? "fco" : "ctco"}_${ids()}`,
				call_id: item.call_id,
				output: item.output,
				status: "completed",
			};
		case "web_search_call":
			return { ...(item as Record<string, unknown>), type: "web_search_call", id: item.id || `ws_${ids()}` } as ResponseInputItem;
		case "reasoning":
			return {
				...(item as Record<string, unknown>),
				type: "reasoning",
				id: item.id || `rs_${ids()}`,
				summary: summaryOf(item.summary),
			};
		case "item_reference":
			return { type: "item_reference", id: item.id };
	}
}

function summaryOf(v: unknown): Array<{ type: "summary_text"; text: string }> {
	if (!Array.isArray(v)) return [];
	return v.flatMap((s) =>
		s && typeof s === "object" && typeof (s as { text?: unknown }).text === "string"
			? [{ type: "summary_text" as const, text: (s as { text: string }).text }]
			: [],
	);
}
