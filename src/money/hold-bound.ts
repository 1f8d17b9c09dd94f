/**
 * The bounds a hold is computed from, and the largest hold a catalog model can ever ask for: the
 * config loader refuses a model whose worst case is not a safe number of nano-dollars at most
 * MAX_REQUEST_NANOS ($1M), so no request can make the ledger store an unsafe balance. Pure.
 */
import { IMAGE_TOKENS } from "../estimate";
import { MAX_REQUEST_NANOS } from "./nanos";
import { costNanos, type Pricing } from "./pricing";

/** What a hold bound reads of a catalog model (a `ModelConfig`). */
export interface HeldModel {
	pricing: Pricing;
	max_output_tokens: number;
	context_length?: number;
	capabilities: readonly string[];
}

/** OpenAI's limit on prompts (legacy completions) and inputs (embeddings) in one request. */
export const MAX_BATCH_INPUTS = 2048;
/** A real tokenizer may find up to about one token per character where we assume four (CJK, symbols, code). */
export const PROMPT_ESTIMATE_MULTIPLE = 4;
/** Chat templates, tool prompts and images the estimate does not see. */
export const PROMPT_SLACK_TOKENS = 1024;
/**
 * The most estimated prompt tokens one byte of request body can carry: an image part counts
 * IMAGE_TOKENS in as little as `{"type":"image"},` (17 bytes); text and token arrays carry far less.
 */
const ESTIMATE_TOKENS_PER_BODY_BYTE = Math.ceil(IMAGE_TOKENS / 16);

/**
 * The most prompt tokens an engine may bill for a prompt estimated at `promptEstimate`: a real
 * tokenizer finds at most about one token per character (four times our estimate), plus the chat
 * template; never more than the context. The hold is placed at this bound, so settlement cannot
 * charge more than was held however the engine counts.
 */
export function promptBound(model: HeldModel, promptEstimate: number): number {
	const bound = promptEstimate * PROMPT_ESTIMATE_MULTIPLE + PROMPT_SLACK_TOKENS;
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
 * output price + one search, over every lane: chat (n ≤ max_n), legacy completions (up to
 * MAX_BATCH_INPUTS prompts × best_of ≤ max_n) and embeddings batches. Each prompt or input is
 * capped at the context when the model has one; the whole body bounds them all in any case (its
 * slack, MAX_BATCH_INPUTS × PROMPT_SLACK_TOKENS, also covers chat's grounding message).
 */
export function worstCaseHold(model: HeldModel, limits: HoldLimits): { nanos: number; dominant: "input" | "output" } {
	const byBody =
		limits.maxBodyBytes * ESTIMATE_TOKENS_PER_BODY_BYTE * PROMPT_ESTIMATE_MULTIPLE + MAX_BATCH_INPUTS * PROMPT_SLACK_TOKENS;
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
