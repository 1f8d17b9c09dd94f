/**
 * Legacy `POST /v1/completions`: validated, capped and held like chat, then run by the same
 * pipeline (engine call with failover and fallback models, stream layers with a `text_completion`
 * encoder, usage bounds, settlement). Every prompt × `n` (or `best_of`, whichever is larger) is
 * covered by the hold, on the most expensive model that may serve.
 */

import { z } from "zod";
import { endUserOf, outputCeiling } from "../auth/scopes";
import {
	type AuthorizedChat,
	assertFitsContext,
	choiceCount,
	requestContext,
	resolveFor,
	withScopes,
} from "../chat/authorize-chat";
import type { ChatRun } from "../chat/chat-run";
import { type CandidatePlan, planFallbacks } from "../chat/fallback-plans";
import { outputCap } from "../chat/prepare";
import type { ModelConfig } from "../config";
import { GatewayError } from "../errors";
import { addSizes, estimateTokens, inputSize, type PromptSize } from "../estimate";
import { COMPLETION_FIELDS, checkFields, engineFields } from "../http/engine-fields";
import { parseBody } from "../http/parse-body";
import { COMPLETION_LOGPROBS, SAMPLING_FIELDS } from "../http/sampling-params";
import { holdNanos } from "../ledger/ledger-client";
import { MAX_BATCH_INPUTS } from "../money/hold-bound";
import { costNanos } from "../money/pricing";
import { takeRequestFallbacks } from "../routing/fallback-chain";
import { placeHold } from "../settlement/settlement";
import { promptBound } from "../stream/usage-bounds";

/** OpenAI's default for legacy completions. */
export const DEFAULT_COMPLETION_MAX_TOKENS = 16;
/** OpenAI's limit on prompts in one request (the config's hold bound counts on it). */
const MAX_PROMPTS = MAX_BATCH_INPUTS;

const TokenArray = z.array(z.number().int().nonnegative()).min(1);
const Prompt = z.union([z.string(), z.array(z.string()).min(1), TokenArray, z.array(TokenArray).min(1)]);
const MaxTokens = z.number().int().positive().nullable().optional();

/**
 * What the gateway reads, and the sampling parameters' ranges, are checked here; which other
 * top-level fields are accepted, and which reach the engine, is the lane's allowlist
 * (http/engine-fields.ts `COMPLETION_FIELDS`; `best_of` is held for), checked once the model is known.
 */
export const CompletionRequestSchema = z.looseObject({
	model: z.string().min(1),
	prompt: Prompt,
	// Prompt text too: SGLang renders it with each prompt into a fill-in-the-middle template.
	suffix: z.string().nullable().optional(),
	stream: z.boolean().nullable().optional(),
	stream_options: z.looseObject({}).nullable().optional(),
	max_tokens: MaxTokens,
	n: z.number().nullable().optional(),
	best_of: z.number().nullable().optional(),
	...SAMPLING_FIELDS,
	logprobs: COMPLETION_LOGPROBS,
	// No gateway option applies to legacy completions (web search is chat and Responses only): any is a 400.
	venym: z.strictObject({}).optional(),
});

type CompletionRequest = z.infer<typeof CompletionRequestSchema>;

/** Each prompt's token estimate: a token array is its length, text about four characters a token. */
function promptEstimates({ prompt, suffix }: CompletionRequest): number[] {
	const extra = estimateTokens(suffix?.length ?? 0);
	if (typeof prompt === "string") return [estimateTokens(prompt.length) + extra];
	if (prompt.every((p) => typeof p === "number")) return [prompt.length + extra];
	return (prompt as Array<string | number[]>).map((p) => (typeof p === "string" ? estimateTokens(p.length) : p.length) + extra);
}

/** Each prompt's size with the suffix, which bounds what it can be billed (money/hold-bound.ts). */
function promptSizes({ prompt, suffix }: CompletionRequest): PromptSize[] {
	const one = typeof prompt === "string" || prompt.every((p) => typeof p === "number");
	const sizes = one ? [inputSize(prompt as string | number[])] : (prompt as Array<string | number[]>).map(inputSize);
	return suffix ? sizes.map((size) => addSizes(size, inputSize(suffix))) : sizes;
}

function validate(rawBody: unknown): CompletionRequest {
	parseBody(CompletionRequestSchema, rawBody);
	return rawBody as CompletionRequest;
}

export async function authorizeCompletion(run: ChatRun, rawBody: unknown): Promise<AuthorizedChat> {
	const { config, principal } = run;
	const body = validate(rawBody);
	const requestedFallbacks = takeRequestFallbacks(body);
	const n = choiceCount(body.n, config.max_n);
	const bestOf = body.best_of === undefined || body.best_of === null ? n : choiceCount(body.best_of, config.max_n);
	if (bestOf < n) {
		throw new GatewayError("invalid_request", `Invalid 'best_of': it must be at least 'n' (${n}).`, { param: "best_of" });
	}
	const resolved = resolveFor(run, body.model, "completions");
	checkFields(body, COMPLETION_FIELDS, resolved.model.pass_through_fields);
	const estimates = promptEstimates(body);
	if (estimates.length > MAX_PROMPTS) {
		throw new GatewayError("invalid_request", `Invalid 'prompt': at most ${MAX_PROMPTS} prompts in one request.`, {
			param: "prompt",
		});
	}
	const longest = Math.max(...estimates);
	assertFitsContext(resolved.model, longest);
	const shape: PromptShape = {
		estimates,
		sizes: promptSizes(body),
		longest,
		bestOf,
		ceiling: outputCeiling(principal),
		stream: body.stream === true,
	};
	const primary = completionPlan(resolved.model, body, shape);
	// Fallbacks are chat models too (the config and `fallbackChain` refuse an embeddings one); one
	// whose context cannot take the longest prompt is left out.
	const fallbacks = planFallbacks({ config, principal, primary: resolved, requested: requestedFallbacks }, (model) =>
		model.context_length !== undefined && longest >= model.context_length ? null : completionPlan(model, body, shape),
	);

	const promptTokens = estimates.reduce((a, b) => a + b, 0);
	const req = requestContext(run, resolved);
	withScopes(run, req, promptTokens + Math.max(primary.outputTokens, ...fallbacks.map((f) => f.outputTokens)), endUserOf(body));
	// The most the request can cost on whichever candidate serves.
	const hold = Math.max(primary.holdNanos, ...fallbacks.map((f) => f.holdNanos));
	const reserve = Math.max(primary.reserveNanos, ...fallbacks.map((f) => f.reserveNanos));
	const { settlement, rateHeaders } = await placeHold(run, req, hold, { reserveNanos: reserve });
	return {
		req,
		settlement,
		prepared: {
			engineBody: primary.engineBody,
			stream: shape.stream,
			maxOutputTokens: primary.maxTokens,
			webSearch: { enabled: false, results: 0 },
		},
		promptTokens,
		searchPrice: 0,
		rateHeaders,
		bounds: primary.bounds,
		lane: "completions",
		...(fallbacks.length ? { fallbacks } : {}),
	};
}

/** What every candidate model plans from: the prompts, the generations asked, the key's output ceiling. */
interface PromptShape {
	estimates: number[];
	sizes: PromptSize[];
	longest: number;
	bestOf: number;
	ceiling: number | null;
	stream: boolean;
}

/**
 * The request on one model: its engine body (the fields the lane sends and the model lets through,
 * picked: the prompts are shared), max_tokens
 * (default 16, capped like chat: the model, the context left, the key's ceiling), usage bounds,
 * hold and reserve.
 */
function completionPlan(model: ModelConfig, body: CompletionRequest, shape: PromptShape): CandidatePlan & { maxTokens: number } {
	let cap = outputCap(model, shape.longest);
	if (shape.ceiling !== null) cap = Math.min(cap, shape.ceiling);
	const maxTokens = Math.min(body.max_tokens ?? DEFAULT_COMPLETION_MAX_TOKENS, cap);
	// Always a stream with usage from the engine (as chat: src/chat/prepare.ts).
	const engineBody: Record<string, unknown> = {
		...engineFields(body, COMPLETION_FIELDS, model.pass_through_fields),
		model: model.engine_model,
		max_tokens: maxTokens,
		stream: true,
		stream_options: { include_usage: true },
	};
	// Every prompt gets `best_of` generations (n of them returned); all are billed.
	const generations = shape.bestOf * shape.estimates.length;
	const outputTokens = maxTokens * generations;
	let promptLimit = 0;
	for (const size of shape.sizes) promptLimit += promptBound(model, size);
	return {
		engineBody,
		maxTokens,
		bounds: { maxPromptTokens: promptLimit, maxCompletionTokens: outputTokens },
		holdNanos: holdNanos(model, promptLimit, outputTokens),
		// As for chat's n: beyond one generation, the extras' worst case must be covered before admission.
		reserveNanos: generations > 1 ? costNanos(model.pricing, 0, maxTokens * (generations - 1)) : 0,
		outputTokens,
	};
}
