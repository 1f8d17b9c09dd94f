/**
 * What an isolate remembers about one engine node: requests in flight, recent failures and
 * the cooldown they earned, time to first byte. Pure functions over a plain record, with the
 * clock passed in, so the rules are tested without a runtime.
 */
import type { NodeReport } from "./view-types";

export interface NodeRuntime {
	/** This isolate's requests on the node: from dispatch until the answer's body ends. */
	inFlight: number;
	/** Failures in a row; a success or a passing probe resets it. */
	failures: number;
	/** When it last failed (ms), 0 when never. */
	lastFailureAt: number;
	lastSuccessAt: number;
	/** Skipped until then (ms), unless every other node is out too. */
	coolingUntil: number;
	/** Why it last failed, for operators (never an engine's text). */
	lastError: string | null;
	/** When `lastError` was set (ms), 0 when never: a failure, a 5xx not yet held against it, a long prompt's timeout. */
	lastErrorAt: number;
	/** Recent time to first byte (an exponential average), null before any answer. */
	latencyMs: number | null;
	/**
	 * 5xx answers not yet held against the node (the request that got each, and when): a 5xx may
	 * be the request's, so the node cools only once different requests got one (`recordServerError`).
	 */
	serverErrors: Array<{ request: number; at: number }>;
	/** Affinity requests whose own node this is: served here, and spilled to a later node (this one was full). */
	affinityServed: number;
	affinitySpilled: number;
	/** Prompt tokens this isolate's completed requests sent the node, and how many of them it had cached. */
	promptTokens: number;
	cachedTokens: number;
	/** The prefill rate learned from the node's answers (tokens a second, an exponential average), null before any. */
	prefillTokensPerS: number | null;
	/** When a short prompt last timed out on the node (ms), 0 when never: a long prompt's timeout then cools it too. */
	shortTimeoutAt: number;
}

export function newRuntime(): NodeRuntime {
	return {
		inFlight: 0,
		failures: 0,
		lastFailureAt: 0,
		lastSuccessAt: 0,
		coolingUntil: 0,
		lastError: null,
		lastErrorAt: 0,
		latencyMs: null,
		serverErrors: [],
		affinityServed: 0,
		affinitySpilled: 0,
		promptTokens: 0,
		cachedTokens: 0,
		prefillTokensPerS: null,
		shortTimeoutAt: 0,
	};
}

/** A cooldown grows while a node keeps failing: the base, twice it, four times, up to sixteen times. */
export const MAX_COOLDOWN_FACTOR = 16;

export function cooldownMs(failures: number, baseMs: number): number {
	const factor = Math.min(MAX_COOLDOWN_FACTOR, 2 ** Math.max(0, failures - 1));
	return baseMs * factor;
}

export function recordFailure(rt: NodeRuntime, reason: string, now: number, baseCooldownMs: number): void {
	rt.failures += 1;
	rt.lastFailureAt = now;
	rt.lastError = reason;
	rt.lastErrorAt = now;
	rt.coolingUntil = now + cooldownMs(rt.failures, baseCooldownMs);
}

/** A node cools once this many different requests got a 5xx from it within `routing.cooldown_ms`. */
export const SERVER_ERROR_REQUESTS = 2;

/**
 * A 5xx that `request` got from the node (and that was not the request's own doing as far as
 * the gateway can tell: see callEngine). Returns whether the node now cools: it does when
 * `SERVER_ERROR_REQUESTS` different requests got one within the window (the base cooldown), so
 * one request, however often it is retried on the node, never takes it out for everyone.
 */
export function recordServerError(
	rt: NodeRuntime,
	request: number,
	reason: string,
	now: number,
	baseCooldownMs: number,
): boolean {
	rt.lastError = reason;
	rt.lastErrorAt = now;
	rt.serverErrors = rt.serverErrors.filter((e) => now - e.at < baseCooldownMs && e.request !== request);
	rt.serverErrors.push({ request, at: now });
	if (rt.serverErrors.length < SERVER_ERROR_REQUESTS) return false;
	rt.serverErrors = [];
	recordFailure(rt, reason, now, baseCooldownMs);
	return true;
}

/** This isolate's record of a node as the report it shares (view-types.ts). */
export function reportOf(rt: NodeRuntime): NodeReport {
	return { error: rt.lastError, error_at: rt.lastErrorAt, success_at: rt.lastSuccessAt, cooling_until: rt.coolingUntil };
}

/**
 * How an operator would name a node's state from what requests saw of it (this isolate's record
 * merged with the other isolates' reports): `cooling` (a cooldown not yet over, with no success
 * and no passing probe since the failure that earned it), `failing` (its last request failed,
 * within `windowMs`, and none has succeeded since, though no cooldown is running: a first 5xx, a
 * long prompt's timeout, a cooldown a probe ended), else `ok`.
 */
export function reportState(
	r: NodeReport,
	probe: { healthy: boolean; checked_at: number } | undefined,
	now: number,
	windowMs: number,
): "cooling" | "failing" | "ok" {
	const failedLast = r.error_at > r.success_at;
	const probedSince = probe?.healthy === true && probe.checked_at > r.error_at;
	if (r.cooling_until > now && failedLast && !probedSince) return "cooling";
	if (failedLast && now - r.error_at < windowMs) return "failing";
	return "ok";
}

/**
 * An operator re-enabled the node: its cooldown, failure count and pending 5xx are forgotten,
 * and it counts as having just succeeded, so a failed probe from before no longer keeps it out.
 */
export function reenable(rt: NodeRuntime, now: number): void {
	rt.failures = 0;
	rt.coolingUntil = 0;
	rt.serverErrors = [];
	rt.lastErrorAt = 0;
	rt.lastSuccessAt = now;
}

/** Weight of the newest sample in the latency average. */
const LATENCY_ALPHA = 0.3;

export function recordSuccess(rt: NodeRuntime, firstByteMs: number, now: number): void {
	rt.failures = 0;
	rt.coolingUntil = 0;
	rt.lastSuccessAt = now;
	rt.latencyMs = rt.latencyMs === null ? firstByteMs : rt.latencyMs + LATENCY_ALPHA * (firstByteMs - rt.latencyMs);
}

/**
 * A health probe that passed after the node's last failure ends its cooldown: the node
 * answers again, so it gets traffic back without waiting the cooldown out. The failure count
 * stays until a request succeeds, so a node that passes probes but keeps failing requests
 * still earns longer cooldowns between the probes.
 */
export function applyProbe(rt: NodeRuntime, probe: { healthy: boolean; checked_at: number }): void {
	if (probe.healthy && rt.coolingUntil > 0 && probe.checked_at > rt.lastFailureAt) rt.coolingUntil = 0;
}

/** The prefill rate assumed of a node until one is configured or learned: slow, so a long prompt is given time. */
export const DEFAULT_PREFILL_TOKENS_PER_S = 500;

/** A prefill of fewer tokens says little about the rate (overheads dominate): not learned from. */
export const MIN_PREFILL_SAMPLE_TOKENS = 256;

/**
 * A prefill the node did: `tokens` read in `ms` (llama.cpp's `timings.prompt_n` and `prompt_ms`,
 * or, from an engine that reports no timings, the uncached prompt tokens and the time to the
 * first token, which also counts the queue: a rate on the slow side).
 */
export function recordPrefill(rt: NodeRuntime, tokens: number, ms: number): void {
	if (!(tokens >= MIN_PREFILL_SAMPLE_TOKENS) || !(ms > 0) || !Number.isFinite(tokens) || !Number.isFinite(ms)) return;
	const rate = (tokens * 1000) / ms;
	const prev = rt.prefillTokensPerS;
	rt.prefillTokensPerS = prev === null ? rate : prev + LATENCY_ALPHA * (rate - prev);
}

/**
 * The rate a prompt's first-token deadline is figured at: the node's configured one, else half
 * the learned one (an engine busier than when it was measured reads slower), else the default.
 */
export function prefillRate(rt: NodeRuntime, configured: number | undefined): number {
	if (configured !== undefined && configured > 0) return configured;
	if (rt.prefillTokensPerS !== null && rt.prefillTokensPerS > 0) return rt.prefillTokensPerS / 2;
	return DEFAULT_PREFILL_TOKENS_PER_S;
}

/** The time a prompt of `tokens` is given for its prefill, on top of `first_byte_timeout_ms`. */
export function prefillAllowanceMs(tokens: number, tokensPerS: number): number {
	if (!(tokens > 0) || !(tokensPerS > 0)) return 0;
	return Math.ceil((tokens * 1000) / tokensPerS);
}

/**
 * A prompt is long when its prefill allowance is at least half of `first_byte_timeout_ms`: its
 * timeout may be a slow prefill rather than a mute node.
 */
export function isLongPrompt(allowanceMs: number, firstByteTimeoutMs: number): boolean {
	return allowanceMs * 2 >= firstByteTimeoutMs;
}

/**
 * A first-token timeout on the node. A short prompt's cools it (the node is mute). A long
 * prompt's does not, unless a short prompt also timed out there since the node last answered:
 * a slow prefill is not a dead node, and cooling every node a long prompt tries would take the
 * fleet out for everyone. Returns whether the node now cools.
 */
export function recordTimeout(rt: NodeRuntime, long: boolean, now: number, baseCooldownMs: number): boolean {
	if (!long) rt.shortTimeoutAt = now;
	if (long && !(rt.shortTimeoutAt > rt.lastSuccessAt)) {
		rt.lastError = "timeout on a long prompt";
		rt.lastErrorAt = now;
		return false;
	}
	recordFailure(rt, "timeout", now, baseCooldownMs);
	return true;
}
