/**
 * The bounds a hold is computed from, and the largest hold a catalog model can ever ask for: the
 * config loader refuses a model whose worst case is not a safe number of nano-dollars at most
 * MAX_REQUEST_NANOS ($1M), so no request can make the ledger store an unsafe balance. Pure.
 */
import type { PromptSize } from "../estimate";
import { MAX_REQUEST_NANOS } from "./nanos";
import { costNanos, type Pricing } from "./pricing";

/** What a hold bound reads of a catalog model (a `ModelConfig`). */
export interface HeldModel {
	pricing: Pricing;
	max_output_tokens: number;
	context_length?: number;
	/** The most tokens one image can cost on this model (default 16,384, Qwen2.5-VL's maximum). */
	image_tokens_max: number;
	capabilities: readonly string[];
}

/** Qwen2.5-VL's largest image (16,384 tokens): the default `image_tokens_max`. */
export const DEFAULT_IMAGE_TOKENS_MAX = 16_384;

/** OpenAI's limit on prompts (legacy completions) and inputs (embeddings) in one request. */
export const MAX_BATCH_INPUTS = 2048;
/** The chat template's system prompt and tool instructions, which no request field shows. */
export const PROMPT_SLACK_TOKENS = 1024;
/** Engine calls one request may make: a search round calls the engine twice (chat/search-round.ts). */
const MAX_ENGINE_CALLS = 2;

/**
 * The most bound tokens one byte of request body can carry on `model`: an image part costs
 * `image_tokens_max` in as little as `{"type":"image"},` (17 bytes); text costs at most a token
 * per byte (a JSON escape is longer than the byte it stands for), a token id takes 2 bytes
 * (`1,`), a message's 4 template tokens at least 15 (`{"role":"user"}`).
 */
function boundTokensPerBodyByte(model: HeldModel): number {
	return Math.max(1, Math.ceil(model.image_tokens_max / 16));
}

/**
 * The most prompt tokens an engine may bill for a prompt of `size`: one token per UTF-8 byte of
 * its text (a byte-level tokenizer's worst case), each image at the model's `image_tokens_max`, its
 * fixed tokens, plus the chat template; never more than the context. The hold is placed at this
 * bound, so settlement cannot charge more than was held however the engine counts, and an honest
 * engine's count is never above it.
 */
export function promptBound(model: HeldModel, size: PromptSize): number {
	const bound = size.bytes + size.images * model.image_tokens_max + size.tokens + PROMPT_SLACK_TOKENS;
	return model.context_length === undefined ? bound : Math.min(model.context_length, bound);
}

export interface HoldLimits {
	maxBodyBytes: number;
	maxN: number;
	/** The price of one web search in USD, for a chat model when web search is configured. */
	searchUsd: number;
}

/**
 * The largest hold any request on `model` can place, in nano-dollars, and the term that dominates
 * it (for the config loader's message): billing bound × input price + output cap × choices ×
 * output price + one search, over every lane: chat (n ≤ max_n, up to MAX_ENGINE_CALLS calls with a
 * search round), legacy completions (up to MAX_BATCH_INPUTS prompts × best_of ≤ max_n) and
 * embeddings batches. Each prompt or input is capped at the context when the model has one; the
 * whole body bounds them all in any case, for each engine call (its slack, MAX_BATCH_INPUTS ×
 * PROMPT_SLACK_TOKENS, also covers chat's grounding message and search round).
 */
export function worstCaseHold(model: HeldModel, limits: HoldLimits): { nanos: number; dominant: "input" | "output" } {
	const byBody = MAX_ENGINE_CALLS * limits.maxBodyBytes * boundTokensPerBodyByte(model) + MAX_BATCH_INPUTS * PROMPT_SLACK_TOKENS;
	const prompt = model.context_length === undefined ? byBody : Math.min(byBody, model.context_length * MAX_BATCH_INPUTS);
	const output = model.max_output_tokens * limits.maxN * MAX_BATCH_INPUTS;
	const input = costNanos(model.pricing, prompt, 0);
	const out = costNanos(model.pricing, 0, output);
	const search = model.capabilities.includes("embeddings") ? 0 : Math.round(limits.searchUsd * 1e9);
	return { nanos: input + out + search, dominant: input >= out ? "input" : "output" };
}

/** Whether a worst case fits what the ledger accepts for one request. */
export function holdFits(nanos: number): boolean {
	return Number.isSafeInteger(nanos) && nanos <= MAX_REQUEST_NANOS;
}
