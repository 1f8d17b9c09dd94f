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
	])("replaces a prompt count that is %s with the estimate, and flags it", (_what, prompt, completion) => {
		const r = boundedUsage({ prompt_tokens: prompt, completion_tokens: completion }, bounds, estimates);
		expect(r.usage).toEqual({ prompt_tokens: 30, completion_tokens: 5, total_tokens: 35 });
		expect(r.estimated).toBe(true);
		expect(r.outOfBounds).toBe(true);
	});

	it("bills a prompt count above the bound at the bound, never at the lower estimate", () => {
		// An honest engine's 26,010 tokens of Chinese text, against a bound the hold covers.
		const r = boundedUsage({ prompt_tokens: 1001, completion_tokens: 5 }, bounds, estimates);
		expect(r.usage).toEqual({ prompt_tokens: 1000, completion_tokens: 5, total_tokens: 1005 });
		expect(r).toMatchObject({ estimated: false, outOfBounds: true });
	});

	it("bills completion tokens beyond what was asked for at the bound", () => {
		const r = boundedUsage({ prompt_tokens: 10, completion_tokens: 51 }, bounds, { promptTokens: 30, completionTokens: 8 });
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

	it("estimates 0/0 when content was delivered, and flags it", () => {
		const delivered = { ...estimates, minPromptTokens: 1, minCompletionTokens: 1 };
		const r = boundedUsage({ prompt_tokens: 0, completion_tokens: 0 }, bounds, delivered);
		expect(r).toEqual({
			usage: { prompt_tokens: 30, completion_tokens: 12, total_tokens: 42 },
			estimated: true,
			outOfBounds: false,
		});
		// Nothing delivered: 0/0 stands.
		expect(boundedUsage({ prompt_tokens: 0, completion_tokens: 0 }, bounds, estimates).usage.total_tokens).toBe(0);
	});

	it("bills the gateway's count of every choice when the engine counted fewer (one choice of several)", () => {
		const twoChoices = { promptTokens: 30, completionTokens: 40, minPromptTokens: 1, minCompletionTokens: 40 };
		const short = boundedUsage({ prompt_tokens: 20, completion_tokens: 21 }, { ...bounds, maxCompletionTokens: 100 }, twoChoices);
		expect(short.usage).toEqual({ prompt_tokens: 20, completion_tokens: 40, total_tokens: 60 });
		expect(short).toMatchObject({ estimated: true, outOfBounds: false });
		// Never past the bound, and an engine count above the floor stands.
		const past = { ...twoChoices, minCompletionTokens: 60 };
		expect(boundedUsage({ prompt_tokens: 20, completion_tokens: 21 }, bounds, past).usage.completion_tokens).toBe(50);
		expect(
			boundedUsage({ prompt_tokens: 20, completion_tokens: 45 }, { ...bounds, maxCompletionTokens: 100 }, twoChoices),
		).toEqual({
			usage: { prompt_tokens: 20, completion_tokens: 45, total_tokens: 65 },
			estimated: false,
			outOfBounds: false,
		});
	});

	it("bounds the prompt by its UTF-8 bytes, images at image_tokens_max, fixed tokens and the template, within the context", () => {
		const model = { context_length: 100_000, image_tokens_max: 16_384 } as Parameters<typeof promptBound>[0];
		expect(promptBound(model, { bytes: 400, images: 0, tokens: 4 })).toBe(400 + 4 + 1024);
		expect(promptBound(model, { bytes: 10, images: 4, tokens: 4 })).toBe(10 + 4 * 16_384 + 4 + 1024);
		expect(promptBound(model, { bytes: 10, images: 8, tokens: 4 })).toBe(100_000);
		expect(promptBound({ image_tokens_max: 1000 } as Parameters<typeof promptBound>[0], { bytes: 1, images: 2, tokens: 0 })).toBe(
			1 + 2000 + 1024,
		);
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
		const out = boundedUsage({ completion_tokens: 50, prompt_tokens_details: { cached_tokens: 10 } }, bounds, estimates);
		expect(out.usage).not.toHaveProperty("cached_tokens");
		expect(out.usage.prompt_tokens).toBe(10);
	});

	it("keeps the cached part of a prompt billed at its bound, within it", () => {
		const out = boundedUsage(
			{ prompt_tokens: 5000, completion_tokens: 50, prompt_tokens_details: { cached_tokens: 4000 } },
			bounds,
			estimates,
		);
		expect(out.usage).toMatchObject({ prompt_tokens: 1000, cached_tokens: 1000 });
	});
});
