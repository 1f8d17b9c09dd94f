import type { Usage } from "../types";

/** A model's prices in USD per million tokens (its `pricing` in the config). */
export interface Pricing {
	input_usd_per_mtok: number;
	output_usd_per_mtok: number;
	/** Prompt tokens served from the engine's prefix cache; default: the input price. */
	cached_input_usd_per_mtok?: number;
}

/** Nano-dollars (1e-9 USD) per token for a price in USD per million tokens. */
function nanosPerToken(usdPerMtok: number): number {
	return usdPerMtok * 1000;
}

/**
 * A request's cost in integer nano-dollars: `(prompt − cached) × input + cached × cached_input +
 * completion × output`. `cachedTokens` (a part of the prompt the engine served from its prefix
 * cache) costs the model's `cached_input_usd_per_mtok`, the input price when it has none.
 */
export function costNanos(pricing: Pricing, promptTokens: number, completionTokens: number, cachedTokens = 0): number {
	return Math.round(unroundedCost(pricing, promptTokens, completionTokens, cachedTokens));
}

function unroundedCost(pricing: Pricing, promptTokens: number, completionTokens: number, cachedTokens: number): number {
	const cached = Math.min(Math.max(cachedTokens, 0), promptTokens);
	const cachedPrice = pricing.cached_input_usd_per_mtok ?? pricing.input_usd_per_mtok;
	return (
		(promptTokens - cached) * nanosPerToken(pricing.input_usd_per_mtok) +
		cached * nanosPerToken(cachedPrice) +
		completionTokens * nanosPerToken(pricing.output_usd_per_mtok)
	);
}

export function usageCostNanos(pricing: Pricing, usage: Usage): number {
	return costNanos(pricing, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens ?? 0);
}

/** One engine call of a request: its usage, at the prices of the model that served it. */
export interface PricedUsage {
	pricing: Pricing;
	usage: Usage;
}

function samePrices(a: Pricing, b: Pricing): boolean {
	return (
		a.input_usd_per_mtok === b.input_usd_per_mtok &&
		a.output_usd_per_mtok === b.output_usd_per_mtok &&
		a.cached_input_usd_per_mtok === b.cached_input_usd_per_mtok
	);
}

/**
 * The cost of a request's engine calls (a search round makes two, maybe on two models), each at
 * its model's prices, rounded once: calls at the same prices cost what their summed usage costs,
 * so the total never exceeds a hold computed for both calls on the dearest model.
 */
export function callsCostNanos(calls: readonly PricedUsage[]): number {
	const [first] = calls;
	if (!first) return 0;
	if (calls.every((c) => samePrices(c.pricing, first.pricing))) {
		return costNanos(
			first.pricing,
			calls.reduce((n, c) => n + c.usage.prompt_tokens, 0),
			calls.reduce((n, c) => n + c.usage.completion_tokens, 0),
			calls.reduce((n, c) => n + (c.usage.cached_tokens ?? 0), 0),
		);
	}
	let nanos = 0;
	for (const { pricing, usage } of calls)
		nanos += unroundedCost(pricing, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens ?? 0);
	return Math.round(nanos);
}

export function usdToNanos(usd: number): number {
	return Math.round(usd * 1e9);
}

/** USD as a decimal number for the API (9 decimal places at most). */
export function nanosToUsd(nanos: number): number {
	return Number((nanos / 1e9).toFixed(9));
}
