/**
 * Chat Completions answer → Gemini `GenerateContentResponse`, pure: one candidate per choice
 * (thought parts from the engine's reasoning when the client asked for thoughts, text, each
 * function call as one whole part with its args as an object), Google's finish reason, and
 * `usageMetadata` from the billed usage. The stream encoder uses the same pieces.
 */

import { reasoningOf, toolInput } from "../chat/chat-shapes";
import { randomId } from "../ids";

type Json = Record<string, unknown>;

function isRecord(v: unknown): v is Json {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

export type GeminiPartOut =
	| { text: string; thought?: true }
	| { functionCall: { id: string; name: string; args: Json }; thoughtSignature?: string };

export interface UsageMetadata {
	promptTokenCount: number;
	candidatesTokenCount: number;
	cachedContentTokenCount: number;
	thoughtsTokenCount: number;
	totalTokenCount: number;
}

export interface GeminiCandidate {
	content: { role: "model"; parts: GeminiPartOut[] };
	finishReason?: string;
	index: number;
}

export interface GenerateContentResponse {
	candidates: GeminiCandidate[];
	usageMetadata?: UsageMetadata;
	modelVersion: string;
	responseId: string;
	venym?: unknown;
}

/**
 * Gemini's clients send a function call's `thoughtSignature` back with it (Gemini 3 requires it);
 * engines have none, so a fixed one goes out and is dropped on the way back in.
 */
export const THOUGHT_SIGNATURE = "venym-unsigned";

export function responseId(): string {
	return randomId("resp_", 12);
}

/** The chat finish reason as Google's: a function call ends with STOP, as Gemini's do. */
export function finishReasonOf(finish: unknown): string {
	if (finish === "length") return "MAX_TOKENS";
	if (finish === "content_filter") return "SAFETY";
	return "STOP";
}

/** Billed chat usage as Gemini's `usageMetadata` (candidates include thoughts in chat's count; Gemini's do not). */
export function usageMetadata(usage: unknown): UsageMetadata {
	const u = isRecord(usage) ? usage : {};
	const prompt = typeof u.prompt_tokens === "number" ? u.prompt_tokens : 0;
	const output = typeof u.completion_tokens === "number" ? u.completion_tokens : 0;
	const pd = isRecord(u.prompt_tokens_details) ? u.prompt_tokens_details : {};
	const cd = isRecord(u.completion_tokens_details) ? u.completion_tokens_details : {};
	const cached = typeof pd.cached_tokens === "number" ? Math.min(Math.max(pd.cached_tokens, 0), prompt) : 0;
	const thoughts = typeof cd.reasoning_tokens === "number" ? Math.min(Math.max(cd.reasoning_tokens, 0), output) : 0;
	return {
		promptTokenCount: prompt,
		candidatesTokenCount: output - thoughts,
		cachedContentTokenCount: cached,
		thoughtsTokenCount: thoughts,
		totalTokenCount: prompt + output,
	};
}

/** One whole function call part. */
export function functionCallPart(id: unknown, name: unknown, args: unknown): GeminiPartOut {
	return {
		functionCall: {
			id: typeof id === "string" && id ? id : randomId("call_", 12),
			name: typeof name === "string" ? name : "",
			args: toolInput(args),
		},
		thoughtSignature: THOUGHT_SIGNATURE,
	};
}

function candidateOf(choice: Json, i: number, thoughts: boolean): GeminiCandidate {
	const m = isRecord(choice.message) ? choice.message : {};
	const parts: GeminiPartOut[] = [];
	const reasoning = reasoningOf(m);
	if (reasoning && thoughts) parts.push({ text: reasoning, thought: true });
	if (typeof m.content === "string" && m.content) parts.push({ text: m.content });
	const calls = Array.isArray(m.tool_calls) ? m.tool_calls.filter(isRecord) : [];
	for (const call of calls) {
		const fn = isRecord(call.function) ? call.function : {};
		parts.push(functionCallPart(call.id, fn.name, fn.arguments));
	}
	return {
		content: { role: "model", parts },
		finishReason: finishReasonOf(choice.finish_reason),
		index: typeof choice.index === "number" ? choice.index : i,
	};
}

/** A chat completion (already rewritten by the chat pipeline: gateway model id, billed usage) as Gemini's answer. */
export function responseFromCompletion(completion: Json, thoughts: boolean): GenerateContentResponse {
	const choices = Array.isArray(completion.choices) ? completion.choices.filter(isRecord) : [];
	const out: GenerateContentResponse = {
		candidates: choices.map((c, i) => candidateOf(c, i, thoughts)),
		usageMetadata: usageMetadata(completion.usage),
		modelVersion: typeof completion.model === "string" ? completion.model : "",
		responseId: responseId(),
	};
	if (completion.venym !== undefined) out.venym = completion.venym;
	return out;
}
