/** Engine usage taken only within bounds (src/chat/usage-bounds.ts): absurd, negative and missing counts, cached tokens. */
import { describe, expect, it } from "vitest";
import { boundedUsage, promptBound, tokenCount } from "../../../src/stream/usage-bounds";

const bounds = { maxPromptTokens: 1000, maxCompletionTokens: 50 };
const estimates = { promptTokens: 30, completionTokens: 12 };

describe("boundedUsage", () => {
	it("takes engine counts within bounds as they are", () => {
		expect(boundedUsage({ prompt_tokens: 900, completion_tokens: 50 }, bounds, estimates)).toEqual({
			usage: { prompt_tokens: 900, completion_tokens: 50, total_tokens: 950 },
			estimated: false,
			outOfBounds: false,
		});
	});

	it.each([
		["absurd", 1e300, 5],
		["negative", -3, 5],
		["fractional", 2.5, 5],
		["a string", "7", 5],
		["NaN", Number.NaN, 5],
		["over the context", 1001, 5],
	])("replaces a prompt count that is %s with the estimate, and flags it", (_what, prompt, completion) => {
		const r = boundedUsage({ prompt_tokens: prompt, completion_tokens: completion }, bounds, estimates);
		expect(r.usage).toEqual({ prompt_tokens: 30, completion_tokens: 5, total_tokens: 35 });
		expect(r.estimated).toBe(true);
		expect(r.outOfBounds).toBe(true);
	});

	it("replaces completion tokens beyond what was asked for, the estimate clamped to the bound", () => {
		const r = boundedUsage({ prompt_tokens: 10, completion_tokens: 51 }, bounds, { promptTokens: 30, completionTokens: 80 });
		expect(r.usage).toEqual({ prompt_tokens: 10, completion_tokens: 50, total_tokens: 60 });
		expect(r.outOfBounds).toBe(true);
	});

	it("estimates missing usage without calling it out of bounds", () => {
		const r = boundedUsage(undefined, bounds, estimates);
		expect(r).toEqual({
			usage: { prompt_tokens: 30, completion_tokens: 12, total_tokens: 42 },
			estimated: true,
			outOfBounds: false,
		});
	});

	it("bounds the prompt by the context length, else by a generous multiple of the estimate", () => {
		const model = { context_length: 8192 } as Parameters<typeof promptBound>[0];
		expect(promptBound(model, 100)).toBe(100 * 4 + 1024);
		expect(promptBound(model, 5000)).toBe(8192);
		expect(promptBound({} as Parameters<typeof promptBound>[0], 100)).toBe(100 * 4 + 1024);
		expect(tokenCount(2 ** 53)).toBeUndefined();
	});
});

describe("boundedUsage: cached prompt tokens", () => {
	const bounds = { maxPromptTokens: 1000, maxCompletionTokens: 100 };
	const estimates = { promptTokens: 10, completionTokens: 5 };

	it("reads prompt_tokens_details.cached_tokens, else llama.cpp's timings.cache_n", () => {
		const vllm = boundedUsage(
			{ prompt_tokens: 900, completion_tokens: 50, prompt_tokens_details: { cached_tokens: 600 } },
			bounds,
			estimates,
		);
		expect(vllm).toEqual({
			usage: { prompt_tokens: 900, completion_tokens: 50, total_tokens: 950, cached_tokens: 600 },
			estimated: false,
			outOfBounds: false,
		});
		const llama = boundedUsage({ prompt_tokens: 900, completion_tokens: 50 }, bounds, estimates, { cache_n: 300 });
		expect(llama.usage.cached_tokens).toBe(300);
		expect(boundedUsage({ prompt_tokens: 900, completion_tokens: 50 }, bounds, estimates).usage).not.toHaveProperty(
			"cached_tokens",
		);
	});

	it.each([[901], [-1], [1.5], [1e300], ["600"]])("takes %j cached of a 900-token prompt as 0, flagged", (cached) => {
		const out = boundedUsage(
			{ prompt_tokens: 900, completion_tokens: 50, prompt_tokens_details: { cached_tokens: cached } },
			bounds,
			estimates,
		);
		expect(out.usage).not.toHaveProperty("cached_tokens");
		expect(out).toMatchObject({ estimated: true, outOfBounds: true });
	});

	it("counts no cached tokens against an estimated prompt", () => {
		const out = boundedUsage(
			{ prompt_tokens: 5000, completion_tokens: 50, prompt_tokens_details: { cached_tokens: 10 } },
			bounds,
			estimates,
		);
		expect(out.usage).not.toHaveProperty("cached_tokens");
		expect(out.usage.prompt_tokens).toBe(10);
	});
});
