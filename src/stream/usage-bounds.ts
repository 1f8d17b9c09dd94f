/**
 * Engine-reported usage is accepted only within bounds, on the stream and non-stream lanes
 * alike: an engine (or anything pretending to be one) must not be able to bill a key for
 * tokens that could not have been produced. Pure: no I/O, plain numbers in and out.
 */
import type { Usage } from "../types";

export interface UsageBounds {
	/** Most prompt tokens the engine may report (see promptBound); the hold covers this many. */
	maxPromptTokens: number;
	/** Most completion tokens: the output cap the engine was given, times the number of choices. */
	maxCompletionTokens: number;
}

// The billing bound of a prompt lives with the hold's other bounds (money/hold-bound.ts).
export { promptBound } from "../money/hold-bound";

/** A non-negative safe integer, or undefined for anything else (NaN, 1e300, -5, 1.5, "7"). */
export function tokenCount(v: unknown): number | undefined {
	return typeof v === "number" && Number.isSafeInteger(v) && v >= 0 ? v : undefined;
}

export interface BoundedUsage {
	usage: Usage;
	/** True when any count is the gateway's estimate (missing, malformed or out of bounds). */
	estimated: boolean;
	/** True when the engine reported a count outside the bounds (logged by the caller). */
	outOfBounds: boolean;
}

/**
 * The usage to bill: each engine count when it is a sane integer within its bound, otherwise the
 * gateway's estimate (itself clamped to the bound). `reported` is whatever the engine sent.
 */
export function boundedUsage(
	reported: unknown,
	bounds: UsageBounds,
	estimates: { promptTokens: number; completionTokens: number },
	/** llama.cpp's `timings` (its `cache_n` is the cached prompt tokens), when the engine sent them. */
	timings?: unknown,
): BoundedUsage {
	const u = typeof reported === "object" && reported !== null ? (reported as Record<string, unknown>) : {};
	const prompt = tokenCount(u.prompt_tokens);
	const completion = tokenCount(u.completion_tokens);
	const promptOk = prompt !== undefined && prompt <= bounds.maxPromptTokens;
	const completionOk = completion !== undefined && completion <= bounds.maxCompletionTokens;
	let outOfBounds = (u.prompt_tokens !== undefined && !promptOk) || (u.completion_tokens !== undefined && !completionOk);
	const p = promptOk ? prompt : Math.min(estimates.promptTokens, bounds.maxPromptTokens);
	const c = completionOk ? completion : Math.min(estimates.completionTokens, bounds.maxCompletionTokens);
	let estimated = !promptOk || !completionOk;
	const usage: Usage = { prompt_tokens: p, completion_tokens: c, total_tokens: p + c };
	// Cached prompt tokens are billed at their own (lower) price: only as a part of an engine-reported
	// prompt count, never more than it; anything else is 0 and flagged like other bad usage.
	const reportedCached = cachedTokensOf(u, timings);
	if (reportedCached !== undefined) {
		const cached = tokenCount(reportedCached);
		if (cached !== undefined && promptOk && cached <= p) {
			if (cached > 0) usage.cached_tokens = cached;
		} else if (cached !== 0) {
			outOfBounds = true;
			estimated = true;
		}
	}
	return { usage, estimated, outOfBounds };
}

/** What the engine says was cached: `prompt_tokens_details.cached_tokens` (vLLM, SGLang, OpenAI), else llama.cpp's `timings.cache_n`. */
function cachedTokensOf(u: Record<string, unknown>, timings: unknown): unknown {
	const details = u.prompt_tokens_details;
	if (typeof details === "object" && details !== null) {
		const v = (details as Record<string, unknown>).cached_tokens;
		if (v !== undefined && v !== null) return v;
	}
	if (typeof timings === "object" && timings !== null) {
		const v = (timings as Record<string, unknown>).cache_n;
		if (v !== undefined && v !== null) return v;
	}
	return undefined;
}

/** Two calls' usage as one: every count summed, cached tokens only when some were. */
export function sumUsage(a: Usage, b: Usage): Usage {
	const usage: Usage = {
		prompt_tokens: a.prompt_tokens + b.prompt_tokens,
		completion_tokens: a.completion_tokens + b.completion_tokens,
		total_tokens: a.total_tokens + b.total_tokens,
	};
	const cached = (a.cached_tokens ?? 0) + (b.cached_tokens ?? 0);
	if (cached > 0) usage.cached_tokens = cached;
	return usage;
}
