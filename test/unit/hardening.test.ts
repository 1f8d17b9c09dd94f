/**
 * The pure parts of the money and input hardening: usage bounds, JSON depth, relayed engine
 * text, the SSE event ceiling, and the stream's idle watch.
 */
import { describe, expect, it } from "vitest";
import { readCapped, relayText } from "../../src/engine/relay-text";
import { estimateTokens } from "../../src/estimate";
import { depthParam, tooDeep } from "../../src/http/json-depth";
import { groundingMessage, groundingTokenBound } from "../../src/search/grounding";
import { RESULT_LIMITS } from "../../src/search/providers";
import { rewriteChatStream } from "../../src/stream/chat-stream";
import { createSseParser, SseOverflowError } from "../../src/stream/sse-parser";
import { boundedUsage, promptBound, tokenCount } from "../../src/stream/usage-bounds";

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

describe("tooDeep", () => {
	const nested = (levels: number): unknown => {
		let v: unknown = 1;
		for (let i = 0; i < levels; i++) v = i % 2 ? [v] : { k: v };
		return v;
	};

	it("accepts fields nested up to the bound and names the path of the first one past it", () => {
		expect(tooDeep({ a: nested(64), b: "x" })).toBeNull();
		const path = tooDeep({ a: "x", b: nested(65) });
		expect(path?.[0]).toBe("b");
		expect(path).toHaveLength(65);
	});

	it("handles thousands of levels without overflowing the stack", () => {
		const text = `{"t":${"[".repeat(7000)}${"]".repeat(7000)}}`;
		expect(tooDeep(JSON.parse(text))?.[0]).toBe("t");
	});

	it("names a schema by its path down to the schema", () => {
		expect(depthParam(["tools", 0, "function", "parameters", "properties", "a"])).toBe("tools[0].function.parameters");
		expect(depthParam(["text", "format", "schema", "properties"])).toBe("text.format.schema");
		expect(depthParam(["x", "a", "a", "a", "a", "a"])).toBe("x.a.a.a");
	});
});

describe("relayText", () => {
	it("scrubs the node secrets and any bearer token, and cuts to 1,000 characters", () => {
		const out = relayText(`node said: key sk-node-123456 and Authorization: Bearer abc.def ${"z".repeat(5000)}`, [
			"sk-node-123456",
		]);
		expect(out).not.toContain("sk-node-123456");
		expect(out).not.toContain("abc.def");
		expect(out).toContain("[redacted]");
		expect(out.length).toBe(1001);
	});

	it("reads at most the cap of an error body", async () => {
		const text = await readCapped(new Response("x".repeat(200_000)), 1000);
		expect(text.length).toBe(1000);
	});
});

describe("grounding bound", () => {
	it("is never smaller than the largest grounding message the results allow", () => {
		const r = {
			title: "t".repeat(RESULT_LIMITS.title),
			url: `https://${"u".repeat(RESULT_LIMITS.url - 8)}`,
			snippet: "s".repeat(RESULT_LIMITS.snippet),
		};
		for (const n of [1, 6, 10]) {
			const msg = groundingMessage(
				Array.from({ length: n }, () => r),
				new Date(),
			);
			expect(groundingTokenBound(n)).toBeGreaterThanOrEqual(estimateTokens(msg.content.length) + 4);
		}
	});
});

describe("SSE event ceiling", () => {
	it("throws once a pending line or event passes the limit", () => {
		const parser = createSseParser(() => {}, undefined, 100);
		parser.feed(`data: ${"x".repeat(50)}`);
		expect(() => parser.feed("x".repeat(60))).toThrow(SseOverflowError);
		const lines = createSseParser(() => {}, undefined, 100);
		expect(() => lines.feed(`data: ${"x".repeat(40)}\ndata: ${"x".repeat(40)}\ndata: ${"x".repeat(40)}\n`)).toThrow(
			SseOverflowError,
		);
	});

	it("lets many events through whose total passes the limit", () => {
		const events: string[] = [];
		const parser = createSseParser((e) => events.push(e.data), undefined, 100);
		for (let i = 0; i < 50; i++) parser.feed(`data: ${"x".repeat(40)}\n\n`);
		expect(events).toHaveLength(50);
	});
});

describe("the stream's idle watch", () => {
	it("ends a stream whose engine goes quiet with the timeout frame and aborts the engine", async () => {
		const enc = new TextEncoder();
		let cancelled = false;
		const upstream = new ReadableStream<Uint8Array>({
			start(c) {
				c.enqueue(
					enc.encode(
						'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"e","choices":[{"index":0,"delta":{"content":"hi there"}}]}\n\n',
					),
				);
			},
			cancel() {
				cancelled = true;
			},
		});
		let aborted: unknown;
		const { stream, done } = rewriteChatStream(upstream, { model: "m", promptTokensEstimate: 5, idleTimeoutMs: 30 }, (r) => {
			aborted = r;
		});
		const text = await new Response(stream).text();
		const end = await done;
		expect(text).toContain('"code":"upstream_timeout"');
		expect(text).not.toContain("[DONE]");
		expect(end).toMatchObject({ status: "engine_error", idleTimedOut: true, contentForwarded: true });
		expect(end.usage.completion_tokens).toBe(2);
		expect(aborted).toBeInstanceOf(Error);
		expect(cancelled).toBe(true);
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
