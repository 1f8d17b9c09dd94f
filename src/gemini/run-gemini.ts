import { admitTokenCount } from "../chat/admit-count";
import { countTokens } from "../chat/count-tokens";
import { authorizeChat, type ChatRun, runAuthorized } from "../chat/run-chat";
import { resolveModel } from "../config";
import type { Source } from "../types";
import { type GenerateContentResponse, responseFromCompletion } from "./from-chat";
import { validateCountTokens, validateGenerateContent } from "./request-schema";
import { GeminiStreamEncoder } from "./stream-encoder";
import { geminiToChat } from "./to-chat";

const REASONING = "reasoning";

export type GeminiResult =
	| { kind: "json"; body: GenerateContentResponse; headers: Record<string, string> }
	| { kind: "stream"; stream: ReadableStream<Uint8Array>; headers: Record<string, string> };

/** `:generateContent` (stream false) and `:streamGenerateContent` (stream true). */
export async function generateContent(run: ChatRun, model: string, body: unknown, stream: boolean): Promise<GeminiResult> {
	const resolved = resolveModel(run.config, model).model;
	const { req, passed } = validateGenerateContent(body, resolved.pass_through_fields);
	const reasoning = resolved.capabilities.includes(REASONING);
	const authorized = await authorizeChat(run, geminiToChat(model, req, stream, { reasoning, passed }));
	const thoughts = req.generationConfig?.thinkingConfig?.includeThoughts === true;
	const chatRun: ChatRun = {
		...run,
		streamEncoder: (sources: Source[]) => new GeminiStreamEncoder({ model: authorized.req.requestedModel, thoughts, sources }),
	};
	const result = await runAuthorized(chatRun, authorized);
	if (result.kind === "stream") return { kind: "stream", stream: result.stream, headers: result.headers };
	return { kind: "json", body: responseFromCompletion(result.body, thoughts), headers: result.headers };
}

/** `:countTokens`: free, unrecorded; the key must be allowed the model. */
export async function countGeminiTokens(
	run: ChatRun,
	model: string,
	body: unknown,
	fetcher: typeof fetch = fetch,
): Promise<{ body: { totalTokens: number }; headers: Record<string, string> }> {
	const resolved = resolveModel(run.config, model).model;
	const { req } = validateCountTokens(body, resolved.pass_through_fields);
	const { rateHeaders } = await admitTokenCount(run, model);
	const count = await countTokens(resolved, geminiToChat(model, req, false, { reasoning: false, passed: {} }), {
		fetch: fetcher,
		secrets: run.env,
	});
	return {
		body: { totalTokens: count.input_tokens },
		headers: { ...rateHeaders, "x-venym-token-count": count.source },
	};
}
