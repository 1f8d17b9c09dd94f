/**
 * Gemini `GenerateContentRequest` → Chat Completions body, pure. Like the Messages lane's, the
 * body is built from the known Gemini fields only (nothing of the client's passes through
 * untranslated) and keeps the client's model id: the chat pipeline resolves the catalog (aliases
 * included), caps `max_tokens` and holds `n` as it does for chat.
 */

import type { ChatMessage } from "../chat/chat-shapes";
import { GatewayError } from "../errors";
import type { GeminiContent, GeminiPart, GenerateContentRequest } from "./request-schema";

type ChatPart = { type: "text"; text: string } | { type: "image_url"; image_url: { url: string } };
type Json = Record<string, unknown>;

export interface TranslateOptions {
	/** The model has the `reasoning` capability: `thinkingConfig` turns the engine's reasoning on or off. */
	reasoning: boolean;
	/** Fields the model's `pass_through_fields` let through (request-schema.ts): sent as the client sent them. */
	passed: Record<string, unknown>;
}

function invalid(message: string, param: string): GatewayError {
	return new GatewayError("invalid_request", message, { param });
}

/**
 * Gemini's function calls may come without ids (its responses name the function instead): each
 * call gets one, and a response without an id answers the oldest open call of its name.
 */
class CallIds {
	#open: { id: string; name: string }[] = [];
	#n = 0;
	call(id: string | undefined, name: string): string {
		const own = id || `call_${++this.#n}`;
		this.#open.push({ id: own, name });
		return own;
	}
	answer(id: string | undefined, name: string): string {
		const i = this.#open.findIndex((c) => (id ? c.id === id : c.name === name));
		if (i < 0) return id || `call_${name}`;
		const [c] = this.#open.splice(i, 1);
		return (c as { id: string }).id;
	}
}

/** A function's response as the tool message's text: Gemini CLI's `{output}` as is, anything else as JSON. */
function responseText(response: Json | undefined): string {
	if (!response) return "";
	const keys = Object.keys(response);
	if (keys.length === 1 && typeof response.output === "string") return response.output;
	if (keys.length === 1 && typeof response.error === "string") return `Error: ${response.error}`;
	return JSON.stringify(response);
}

function userContent(parts: ChatPart[]): string | ChatPart[] {
	if (parts.every((p) => p.type === "text")) return parts.map((p) => (p as { text: string }).text).join("\n");
	return parts;
}

function userTurn(content: GeminiContent, at: string, ids: CallIds, out: ChatMessage[]): void {
	const parts: ChatPart[] = [];
	for (const [j, part] of content.parts.entries()) {
		if (part.functionResponse) {
			const r = part.functionResponse;
			out.push({ role: "tool", tool_call_id: ids.answer(r.id, r.name), content: responseText(r.response) });
		} else if (part.functionCall) {
			throw invalid("A 'functionCall' part belongs in a 'model' turn.", `${at}.parts[${j}]`);
		} else if (part.inlineData) {
			parts.push({ type: "image_url", image_url: { url: `data:${part.inlineData.mimeType};base64,${part.inlineData.data}` } });
		} else if (part.fileData) {
			parts.push({ type: "image_url", image_url: { url: part.fileData.fileUri } });
		} else if (typeof part.text === "string" && !part.thought) {
			parts.push({ type: "text", text: part.text });
		}
	}
	if (parts.length) out.push({ role: "user", content: userContent(parts) });
}

function modelTurn(content: GeminiContent, at: string, ids: CallIds, out: ChatMessage[]): void {
	const texts: string[] = [];
	const calls: { id: string; type: "function"; function: { name: string; arguments: string } }[] = [];
	for (const [j, part] of content.parts.entries()) {
		if (part.functionCall) {
			const c = part.functionCall;
			calls.push({
				id: ids.call(c.id, c.name),
				type: "function",
				function: { name: c.name, arguments: JSON.stringify(c.args ?? {}) },
			});
		} else if (part.functionResponse) {
			throw invalid("A 'functionResponse' part belongs in a 'user' turn.", `${at}.parts[${j}]`);
		} else if (typeof part.text === "string" && !part.thought) {
			// Earlier thoughts are not replayed: chat templates drop them, and some engines reject them.
			texts.push(part.text);
		}
	}
	const message: ChatMessage = { role: "assistant", content: texts.length ? texts.join("") : calls.length ? null : "" };
	if (calls.length) message.tool_calls = calls;
	out.push(message);
}

function systemText(content: GeminiContent): string {
	return content.parts.flatMap((p: GeminiPart) => (typeof p.text === "string" ? [p.text] : [])).join("\n");
}

export function toChatMessages(req: Pick<GenerateContentRequest, "systemInstruction" | "contents">): ChatMessage[] {
	const out: ChatMessage[] = [];
	if (req.systemInstruction) {
		const text = systemText(req.systemInstruction);
		if (text) out.push({ role: "system", content: text });
	}
	const ids = new CallIds();
	for (const [i, c] of req.contents.entries()) {
		if (c.role === "model") modelTurn(c, `contents[${i}]`, ids, out);
		else userTurn(c, `contents[${i}]`, ids, out);
	}
	return out;
}

function chatTools(req: GenerateContentRequest): Json[] {
	const seen = new Set<string>();
	const tools: Json[] = [];
	for (const [i, tool] of (req.tools ?? []).entries()) {
		for (const [j, d] of (tool.functionDeclarations ?? []).entries()) {
			const at = `tools[${i}].functionDeclarations[${j}]`;
			if (seen.has(d.name))
				throw invalid(`Invalid '${at}.name': the function name '${d.name.slice(0, 64)}' is used twice.`, `${at}.name`);
			seen.add(d.name);
			const fn: Json = {
				name: d.name,
				parameters: openApiSchema(d.parametersJsonSchema ?? d.parameters) ?? { type: "object", properties: {} },
			};
			if (d.description !== undefined) fn.description = d.description;
			tools.push({ type: "function", function: fn });
		}
	}
	return tools;
}

/** Gemini's OpenAPI-subset schema (`type: "OBJECT"`, upper case) as JSON Schema: types lower-cased, throughout. */
export function openApiSchema(schema: unknown): Json | undefined {
	if (typeof schema !== "object" || schema === null) return undefined;
	const lower = (v: unknown): unknown => {
		if (Array.isArray(v)) return v.map(lower);
		if (typeof v !== "object" || v === null) return v;
		const out: Json = {};
		for (const [k, x] of Object.entries(v)) out[k] = k === "type" && typeof x === "string" ? x.toLowerCase() : lower(x);
		return out;
	};
	return lower(schema) as Json;
}

function toolChoice(req: GenerateContentRequest): unknown {
	const cfg = req.toolConfig?.functionCallingConfig;
	if (!cfg?.mode) return undefined;
	if (cfg.mode === "NONE") return "none";
	if (cfg.mode === "ANY" || cfg.mode === "VALIDATED") {
		const names = cfg.allowedFunctionNames ?? [];
		return names.length === 1 ? { type: "function", function: { name: names[0] } } : "required";
	}
	return "auto";
}

/** `thinkingConfig.thinkingLevel` as chat's `reasoning_effort`. */
const EFFORT_OF_LEVEL: Readonly<Record<string, string>> = { MINIMAL: "low", LOW: "low", MEDIUM: "medium", HIGH: "high" };

/** The Chat Completions body for a validated Gemini request (`stream` from the route's method). */
export function geminiToChat(model: string, req: GenerateContentRequest, stream: boolean, opts: TranslateOptions): Json {
	const body: Json = { model, messages: toChatMessages(req) };
	if (stream) body.stream = true;
	const g = req.generationConfig ?? {};
	if (g.maxOutputTokens !== undefined) body.max_tokens = g.maxOutputTokens;
	if (g.temperature !== undefined) body.temperature = g.temperature;
	if (g.topP !== undefined) body.top_p = g.topP;
	if (g.topK !== undefined) body.top_k = g.topK;
	if (g.presencePenalty !== undefined) body.presence_penalty = g.presencePenalty;
	if (g.frequencyPenalty !== undefined) body.frequency_penalty = g.frequencyPenalty;
	if (g.seed !== undefined) body.seed = g.seed;
	if (g.stopSequences?.length) body.stop = g.stopSequences;
	if (g.candidateCount !== undefined) body.n = g.candidateCount;
	// Gemini CLI writes Google's upper-case types in its JSON Schema too (`"type": "OBJECT"`).
	const schema = openApiSchema(g.responseJsonSchema ?? g.responseSchema);
	if (schema) body.response_format = { type: "json_schema", json_schema: { name: "response", schema } };
	else if (g.responseMimeType === "application/json") body.response_format = { type: "json_object" };
	const tools = chatTools(req);
	if (tools.length) {
		body.tools = tools;
		const choice = toolChoice(req);
		if (choice !== undefined) body.tool_choice = choice;
	}
	const thinking = g.thinkingConfig;
	if (thinking && opts.reasoning) {
		if (thinking.thinkingBudget === 0) body.chat_template_kwargs = { enable_thinking: false };
		else {
			body.chat_template_kwargs = { enable_thinking: true };
			const budget = thinking.thinkingBudget;
			if (budget !== undefined && budget > 0) body.reasoning_effort = budget < 4096 ? "low" : budget < 16384 ? "medium" : "high";
			// Gemini 3's level (Gemini CLI 0.61 sends HIGH) where no budget is given.
			else if (budget === undefined && thinking.thinkingLevel) {
				const effort = EFFORT_OF_LEVEL[thinking.thinkingLevel.toUpperCase()];
				if (effort) body.reasoning_effort = effort;
			}
		}
	}
	if (req.models !== undefined) body.models = req.models;
	if (req.fallbacks !== undefined) body.fallbacks = req.fallbacks;
	if (req.venym !== undefined) body.venym = req.venym;
	for (const [field, value] of Object.entries(opts.passed)) if (!Object.hasOwn(body, field)) body[field] = value;
	return body;
}
