/**
 * OpenAI's ranges for the sampling parameters, as zod fields every text lane's schema spreads in
 * (chat, legacy completions, Responses): engines accept what OpenAI refuses (`temperature: 99`,
 * a `seed` past 2^53, any number of stop strings) or fail on it deep inside, so a value out of
 * range is a 400 naming the param before anything is held. Finite numbers only (zod refuses
 * Infinity, which `1e999` parses to); null means "the default", as on OpenAI.
 */
import { z } from "zod";

const Nullable = <T extends z.ZodType>(t: T) => t.nullable().optional();

/** A finite number in [min, max], with one message for the wrong type and the wrong value alike. */
export function numberIn(min: number, max: number) {
	const error = `expected a number from ${min} to ${max}.`;
	return z.number({ error }).min(min, { error }).max(max, { error });
}

/** An integer in [min, max]. */
export function integerIn(min: number, max: number) {
	const error = `expected an integer from ${min} to ${max}.`;
	return z.int({ error }).min(min, { error }).max(max, { error });
}

/** OpenAI's limit on stop sequences. */
export const MAX_STOP_SEQUENCES = 4;

const STOP_ERROR = `expected a string or an array of at most ${MAX_STOP_SEQUENCES} strings.`;

/** The sampling parameters chat and legacy completions share. */
export const SAMPLING_FIELDS = {
	temperature: Nullable(numberIn(0, 2)),
	top_p: Nullable(numberIn(0, 1)),
	frequency_penalty: Nullable(numberIn(-2, 2)),
	presence_penalty: Nullable(numberIn(-2, 2)),
	seed: Nullable(integerIn(Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER)),
	stop: Nullable(
		z.union([z.string(), z.array(z.string()).max(MAX_STOP_SEQUENCES, { error: STOP_ERROR })], { error: STOP_ERROR }),
	),
	logit_bias: Nullable(z.record(z.string(), numberIn(-100, 100))),
};

/** Chat's `top_logprobs` and Responses' (with chat's boolean `logprobs`). */
export const TOP_LOGPROBS = Nullable(integerIn(0, 20));

/** Legacy completions' `logprobs`: how many alternatives per token. */
export const COMPLETION_LOGPROBS = Nullable(integerIn(0, 5));
