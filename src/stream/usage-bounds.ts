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
	/** True when any count is the gateway's own (missing, malformed, or short of what was delivered). */
	estimated: boolean;
	/** True when the engine reported a count outside the bounds (logged by the caller). */
	outOfBounds: boolean;
}

/** The gateway's own counts, for what the engine's cannot be trusted with. */
export interface UsageEstimates {
	/** The prompt's estimate, billed when the engine gives no sane count (or 0 for a prompt that was answered). */
	promptTokens: number;
	/** The relayed output's estimate, billed when the engine gives no sane count. */
	completionTokens: number;
	/**
	 * The least an honest count can be, from what was delivered: 1 once anything was (0/0 with content
	 * relayed is not believed), the sum of every choice's estimate when several were (an engine that
	 * counts one choice of several, as llama.cpp does with `n`). A count short of it bills the
	 * larger of it and the estimate.
	 */
	minPromptTokens?: number;
	minCompletionTokens?: number;
}

/**
 * The usage to bill: each engine count when it is a sane integer; one above its bound is billed at
 * the bound (the hold covers it, and an honest engine never exceeds it: money/hold-bound.ts); one
 * short of what was delivered is the gateway's own count; a missing or malformed one is the
 * estimate, clamped to the bound. `reported` is whatever the engine sent.
 */
export function boundedUsage(
	reported: unknown,
	bounds: UsageBounds,
	estimates: UsageEstimates,
	/** llama.cpp's `timings` (its `cache_n` is the cached prompt tokens), when the engine sent them. */
	timings?: unknown,
): BoundedUsage {
	const u = typeof reported === "object" && reported !== null ? (reported as Record<string, unknown>) : {};
	const prompt = billedCount(u.prompt_tokens, bounds.maxPromptTokens, estimates.promptTokens, estimates.minPromptTokens);
	const completion = billedCount(
		u.completion_tokens,
		bounds.maxCompletionTokens,
		estimates.completionTokens,
		estimates.minCompletionTokens,
	);
	const p = prompt.count;
	const c = completion.count;
	let outOfBounds = prompt.outOfBounds || completion.outOfBounds;
	let estimated = prompt.estimated || completion.estimated;
	const usage: Usage = { prompt_tokens: p, completion_tokens: c, total_tokens: p + c };
	// Cached prompt tokens are billed at their own (lower) price: only as a part of an engine-reported
	// prompt count, never more than it; anything else is 0 and flagged like other bad usage.
	const reportedCached = cachedTokensOf(u, timings);
	if (reportedCached !== undefined) {
		const cached = tokenCount(reportedCached);
		const reportedPrompt = tokenCount(u.prompt_tokens);
		if (cached !== undefined && !prompt.estimated && reportedPrompt !== undefined && cached <= reportedPrompt) {
			if (cached > 0) usage.cached_tokens = Math.min(cached, p);
		} else if (cached !== 0) {
			outOfBounds = true;
			estimated = true;
		}
	}
	return { usage, estimated, outOfBounds };
}

/** One count to bill: the engine's within [least, bound], else the gateway's own. */
function billedCount(
	reported: unknown,
	bound: number,
	estimate: number,
	least = 0,
): { count: number; estimated: boolean; outOfBounds: boolean } {
	const n = tokenCount(reported);
	if (n === undefined) return { count: Math.min(estimate, bound), estimated: true, outOfBounds: reported !== undefined };
	if (n > bound) return { count: bound, estimated: false, outOfBounds: true };
	if (n < least) return { count: Math.min(Math.max(least, estimate), bound), estimated: true, outOfBounds: false };
	return { count: n, estimated: false, outOfBounds: false };
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
