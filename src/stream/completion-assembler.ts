/**
 * A non-stream answer built from an engine stream: the gateway always asks the engine for a
 * stream (an engine answers a non-stream request only once it is whole, so a first-byte timeout
 * could never tell a slow answer from a dead node), and a client that asked for one JSON body gets
 * the body the engine would have sent: choices by `index` with their text, reasoning (in the field
 * the stream used), tool calls put together, logprobs, `finish_reason`, and the engine's
 * `system_fingerprint`. Pure: chunks in, a body out; it holds at most `maxChars` of text.
 */
import type { ForwardedChunk } from "./chat-reducer";

type Json = Record<string, unknown>;

/** The largest answer a non-stream client gets (as the engine's own non-stream body was capped). */
export const MAX_ASSEMBLED_CHARS = 8 * 1024 * 1024;

interface ToolCallParts {
	index: number;
	id?: string;
	type?: string;
	name: string;
	args: string[];
}

interface ChoiceParts {
	index: number;
	role?: string;
	content: string[];
	refusal: string[];
	/** Reasoning text by the field the engine used (`reasoning_content`, `reasoning`). */
	reasoning: Map<string, string[]>;
	toolCalls: Map<number, ToolCallParts>;
	/** Chat: `logprobs.content` / `.refusal` entries; legacy: the parallel arrays. */
	logprobs: Map<string, unknown[]>;
	sawLogprobs: boolean;
	text: string[];
	finishReason: unknown;
	stopReason: unknown;
}

function isRecord(v: unknown): v is Json {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

const REASONING_FIELDS = ["reasoning_content", "reasoning"] as const;
const CHAT_LOGPROB_FIELDS = ["content", "refusal"] as const;
const LEGACY_LOGPROB_FIELDS = ["tokens", "token_logprobs", "top_logprobs", "text_offset"] as const;

export type AssembledObject = "chat.completion" | "text_completion";

export class CompletionAssembler {
	readonly #object: AssembledObject;
	readonly #maxChars: number;
	readonly #choices = new Map<number, ChoiceParts>();
	#chars = 0;
	#id: string | undefined;
	#created: number | undefined;
	#fingerprint: unknown;
	/** True once the answer outgrew `maxChars`: the caller refuses it (nothing more is kept). */
	overflowed = false;

	constructor(object: AssembledObject, maxChars = MAX_ASSEMBLED_CHARS) {
		this.#object = object;
		this.#maxChars = maxChars;
	}

	push(chunks: readonly ForwardedChunk[]): void {
		for (const f of chunks) this.#chunk(f.chunk, f.data);
	}

	/** The engine's id, if it sent one. */
	get id(): string | undefined {
		return this.#id;
	}

	/** The whole answer: `model` is the gateway's, `usage` what is billed (the caller's). */
	body(model: string, usage: Json): Json {
		const choices = [...this.#choices.values()].sort((a, b) => a.index - b.index).map((c) => this.#choice(c));
		const body: Json = {
			id: this.#id ?? `${this.#object === "chat.completion" ? "chatcmpl" : "cmpl"}-${crypto.randomUUID().replaceAll("-", "")}`,
			object: this.#object,
			created: this.#created ?? Math.floor(Date.now() / 1000),
			model,
			choices,
			usage,
		};
		if (this.#fingerprint !== undefined && this.#fingerprint !== null) body.system_fingerprint = this.#fingerprint;
		return body;
	}

	/** `data`: the chunk's JSON text as the engine sent it (null when rewritten): logprobs are counted by their size. */
	#chunk(chunk: Json, data: string | null): void {
		if (this.overflowed) return;
		if (typeof chunk.id === "string") this.#id ??= chunk.id;
		if (typeof chunk.created === "number") this.#created ??= chunk.created;
		if (chunk.system_fingerprint !== undefined) this.#fingerprint = chunk.system_fingerprint;
		if (!Array.isArray(chunk.choices)) return;
		for (const raw of chunk.choices) {
			if (!isRecord(raw)) continue;
			const index = typeof raw.index === "number" && Number.isSafeInteger(raw.index) && raw.index >= 0 ? raw.index : 0;
			const parts = this.#parts(index);
			if (raw.finish_reason !== undefined && raw.finish_reason !== null) parts.finishReason = raw.finish_reason;
			if (raw.stop_reason !== undefined && raw.stop_reason !== null) parts.stopReason = raw.stop_reason;
			if (typeof raw.text === "string") this.#add(parts.text, raw.text);
			this.#logprobs(parts, raw.logprobs, data);
			if (isRecord(raw.delta)) this.#delta(parts, raw.delta);
		}
	}

	#parts(index: number): ChoiceParts {
		let parts = this.#choices.get(index);
		if (!parts) {
			parts = {
				index,
				content: [],
				refusal: [],
				reasoning: new Map(),
				toolCalls: new Map(),
				logprobs: new Map(),
				sawLogprobs: false,
				text: [],
				finishReason: null,
				stopReason: undefined,
			};
			this.#choices.set(index, parts);
		}
		return parts;
	}

	#add(into: string[], text: string): void {
		if (!text) return;
		this.#chars += text.length;
		if (this.#chars > this.#maxChars) {
			this.overflowed = true;
			this.#choices.clear();
			return;
		}
		into.push(text);
	}

	#delta(parts: ChoiceParts, delta: Json): void {
		if (typeof delta.role === "string") parts.role ??= delta.role;
		if (typeof delta.content === "string") this.#add(parts.content, delta.content);
		if (typeof delta.refusal === "string") this.#add(parts.refusal, delta.refusal);
		for (const field of REASONING_FIELDS) {
			const v = delta[field];
			if (typeof v !== "string") continue;
			let into = parts.reasoning.get(field);
			if (!into) {
				into = [];
				parts.reasoning.set(field, into);
			}
			this.#add(into, v);
		}
		if (!Array.isArray(delta.tool_calls)) return;
		for (const call of delta.tool_calls) {
			if (!isRecord(call)) continue;
			const at = typeof call.index === "number" && Number.isSafeInteger(call.index) ? call.index : parts.toolCalls.size;
			let tc = parts.toolCalls.get(at);
			if (!tc) {
				tc = { index: at, name: "", args: [] };
				parts.toolCalls.set(at, tc);
			}
			if (typeof call.id === "string" && call.id) tc.id ??= call.id;
			if (typeof call.type === "string") tc.type ??= call.type;
			const fn = isRecord(call.function) ? call.function : undefined;
			if (!fn) continue;
			// The name comes whole in a call's first delta (OpenAI, vLLM, llama.cpp): the first one wins.
			if (typeof fn.name === "string" && fn.name && !tc.name) {
				this.#chars += fn.name.length;
				tc.name = fn.name;
			}
			if (typeof fn.arguments === "string") this.#add(tc.args, fn.arguments);
		}
	}

	#logprobs(parts: ChoiceParts, logprobs: unknown, data: string | null): void {
		if (!isRecord(logprobs)) return;
		parts.sawLogprobs = true;
		// Kept as parsed JSON: counted at the size of the text it came in (top_logprobs make an entry
		// a kilobyte), so the cap bounds what is held, not only the answer's text.
		this.#chars += data?.length ?? JSON.stringify(logprobs).length;
		if (this.#chars > this.#maxChars) {
			this.overflowed = true;
			this.#choices.clear();
			return;
		}
		for (const field of [...CHAT_LOGPROB_FIELDS, ...LEGACY_LOGPROB_FIELDS]) {
			const v = logprobs[field];
			if (!Array.isArray(v)) continue;
			let into = parts.logprobs.get(field);
			if (!into) {
				into = [];
				parts.logprobs.set(field, into);
			}
			for (const e of v) into.push(e);
		}
	}

	#choice(c: ChoiceParts): Json {
		const logprobs = c.sawLogprobs ? Object.fromEntries(c.logprobs) : null;
		if (this.#object === "text_completion") {
			const out: Json = { index: c.index, text: c.text.join(""), logprobs, finish_reason: c.finishReason };
			if (c.stopReason !== undefined) out.stop_reason = c.stopReason;
			return out;
		}
		const toolCalls = [...c.toolCalls.values()]
			.sort((a, b) => a.index - b.index)
			.map((tc) => ({
				id: tc.id ?? `call_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`,
				type: tc.type ?? "function",
				function: { name: tc.name, arguments: tc.args.join("") },
			}));
		const content = c.content.join("");
		const message: Json = {
			role: c.role ?? "assistant",
			// As engines answer: null for a turn that only calls tools, else the text ("" when empty).
			content: content || (toolCalls.length ? null : ""),
		};
		if (c.refusal.length) message.refusal = c.refusal.join("");
		for (const [field, parts] of c.reasoning) message[field] = parts.join("");
		if (toolCalls.length) message.tool_calls = toolCalls;
		const out: Json = { index: c.index, message, logprobs, finish_reason: c.finishReason };
		if (c.stopReason !== undefined) out.stop_reason = c.stopReason;
		return out;
	}
}
