/**
 * The Gemini lane's stream encoder (`:streamGenerateContent?alt=sse`): the chat reducer's chunks
 * become `data: {GenerateContentResponse}` frames, with no `[DONE]`. Text (and thoughts, when the
 * client asked for them) goes out as it comes; each function call is held until it is whole
 * (Gemini streams a call as one part, never its arguments in pieces) and goes out in the last
 * frame, which carries each candidate's `finishReason` and the billed `usageMetadata`. An engine
 * failure ends with an in-band `data: {"error": …}` frame from the one Google error mapping.
 */

import { reasoningOf } from "../chat/chat-shapes";
import { toGoogleErrorResponse } from "../errors";
import type { ChatStreamReducer, EngineOutcome, ForwardedChunk } from "../stream/chat-reducer";
import { streamFailure } from "../stream/chat-sse-encoder";
import type { StreamEncoder } from "../stream/pipe-engine-stream";
import type { Source } from "../types";
import {
	finishReasonOf,
	functionCallPart,
	type GeminiCandidate,
	type GeminiPartOut,
	type GenerateContentResponse,
	responseId,
	usageMetadata,
} from "./from-chat";

type Json = Record<string, unknown>;

function isRecord(v: unknown): v is Json {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

export interface GeminiStreamOptions {
	/** The gateway's model id (the one that serves). */
	model: string;
	/** The client asked for thoughts (`thinkingConfig.includeThoughts`). */
	thoughts: boolean;
	/** Web-search sources: on the first frame, as `venym.sources`. */
	sources?: Source[];
}

/** A candidate's function calls by the engine's index, joined from their fragments. */
interface Call {
	id: string;
	name: string;
	args: string;
}

/** Frames are bounded by the engine's chunks: a call's arguments are bounded by the output cap. */
export class GeminiStreamEncoder implements StreamEncoder {
	readonly #opts: GeminiStreamOptions;
	readonly #id = responseId();
	readonly #calls = new Map<number, Map<number, Call>>();
	readonly #finish = new Map<number, unknown>();
	#first = true;

	constructor(opts: GeminiStreamOptions) {
		this.#opts = opts;
	}

	start(): string {
		return "";
	}

	#frame(candidates: GeminiCandidate[], usage?: unknown): string {
		const body: GenerateContentResponse = { candidates, modelVersion: this.#opts.model, responseId: this.#id };
		if (usage !== undefined) body.usageMetadata = usageMetadata(usage);
		if (this.#first && this.#opts.sources?.length) body.venym = { sources: this.#opts.sources };
		this.#first = false;
		return `data: ${JSON.stringify(body)}\n\n`;
	}

	chunks(chunks: ForwardedChunk[]): string {
		const candidates: GeminiCandidate[] = [];
		for (const f of chunks) {
			const choices = Array.isArray(f.chunk.choices) ? f.chunk.choices.filter(isRecord) : [];
			for (const choice of choices) {
				const index = typeof choice.index === "number" ? choice.index : 0;
				if (choice.finish_reason !== undefined && choice.finish_reason !== null) this.#finish.set(index, choice.finish_reason);
				if (!isRecord(choice.delta)) continue;
				const parts = this.#parts(index, choice.delta);
				if (parts.length) candidates.push({ content: { role: "model", parts }, index });
			}
		}
		return candidates.length ? this.#frame(candidates) : "";
	}

	#parts(index: number, delta: Json): GeminiPartOut[] {
		const parts: GeminiPartOut[] = [];
		const reasoning = reasoningOf(delta);
		if (reasoning && this.#opts.thoughts) parts.push({ text: reasoning, thought: true });
		if (typeof delta.content === "string" && delta.content) parts.push({ text: delta.content });
		if (Array.isArray(delta.tool_calls)) for (const call of delta.tool_calls) if (isRecord(call)) this.#toolCall(index, call);
		return parts;
	}

	#toolCall(candidate: number, call: Json): void {
		const calls = this.#calls.get(candidate) ?? new Map<number, Call>();
		this.#calls.set(candidate, calls);
		const at = typeof call.index === "number" ? call.index : 0;
		const fn = isRecord(call.function) ? call.function : {};
		const held = calls.get(at) ?? { id: "", name: "", args: "" };
		calls.set(at, held);
		if (!held.id && typeof call.id === "string") held.id = call.id;
		if (!held.name && typeof fn.name === "string") held.name = fn.name;
		if (typeof fn.arguments === "string") held.args += fn.arguments;
	}

	finish(outcome: EngineOutcome, reducer: ChatStreamReducer): string {
		if (outcome.status !== "completed") return `data: ${JSON.stringify(toGoogleErrorResponse(streamFailure(outcome)).body)}\n\n`;
		const indices = new Set<number>([0, ...this.#finish.keys(), ...this.#calls.keys()]);
		const candidates: GeminiCandidate[] = [...indices].sort().map((index) => ({
			content: {
				role: "model",
				parts: [...(this.#calls.get(index)?.values() ?? [])].map((c) => functionCallPart(c.id, c.name, c.args)),
			},
			finishReason: finishReasonOf(this.#finish.get(index)),
			index,
		}));
		return this.#frame(candidates, reducer.usageField());
	}
}
