/** The chat stream reducer (src/stream/chat-reducer.ts): what it counts as generated and forwarded. */
import { describe, expect, it } from "vitest";
import { ChatStreamReducer } from "../../../src/stream/chat-reducer";

const head = { id: "chatcmpl-eng", object: "chat.completion.chunk", created: 1700000000, model: "engine/m" };

describe("refusal text is generated output", () => {
	it("a streamed refusal counts toward the completion estimate and as content reaching the client", () => {
		// OpenAI's `delta.refusal` is relayed to the client (and assembled into `message.refusal` for
		// non-stream clients), but the reducer counts neither its characters nor that it was sent:
		// with no engine usage the refusal is free, and an engine error after it bills nothing.
		const r = new ChatStreamReducer({ promptTokensEstimate: 10 });
		const refusal = "I cannot help with that request. ".repeat(40);
		r.push({ type: "chunk", chunk: { ...head, choices: [{ index: 0, delta: { role: "assistant", refusal } }] }, data: "" });
		r.push({ type: "closed" });
		const end = r.end("engine_error");
		expect(end.contentForwarded).toBe(true);
		expect(end.usage.completion_tokens).toBeGreaterThan(0);
	});
});

describe("billed at least what was delivered", () => {
	const bounds = { maxPromptTokens: 5000, maxCompletionTokens: 200 };
	const chunk = (index: number, content: string) => ({
		type: "chunk" as const,
		chunk: { ...head, choices: [{ index, delta: { content } }] },
		data: "",
	});
	const usage = (prompt_tokens: number, completion_tokens: number, extra: Record<string, unknown> = {}) => ({
		type: "chunk" as const,
		chunk: {
			...head,
			choices: [],
			usage: { prompt_tokens, completion_tokens, total_tokens: prompt_tokens + completion_tokens },
			...extra,
		},
		data: "",
	});
	// llama.cpp's shape: speed figures beside every usage it reports.
	const llama = (prompt_n: number, predicted_n: number) => ({ timings: { prompt_n, predicted_n, cache_n: 0 } });
	const finish = (index: number) => ({
		type: "chunk" as const,
		chunk: { ...head, choices: [{ index, delta: {}, finish_reason: "length" }] },
		data: "",
	});

	it("bills every choice relayed when the engine counted one of them (llama.cpp with n: 2)", () => {
		const r = new ChatStreamReducer({ promptTokensEstimate: 10, bounds });
		// llama.cpp streams a token a delta: 20 of choice 0, 30 of choice 1; it counts choice 0's.
		for (let i = 0; i < 30; i++) {
			if (i < 20) r.push(chunk(0, "a"));
			r.push(chunk(1, "中"));
		}
		r.push(usage(12, 20));
		r.push({ type: "done" });
		const end = r.end("completed");
		// The gateway's own count, choice by choice: a token a delta, 20 + 30 (characters / 4 would say 13).
		expect(end.usage).toEqual({ prompt_tokens: 12, completion_tokens: 50, total_tokens: 62 });
		expect(end.estimated).toBe(true);
	});

	it("keeps an honest engine's count of several choices above characters / 4 (a long word is one token)", () => {
		const r = new ChatStreamReducer({ promptTokensEstimate: 10, bounds });
		for (const index of [0, 1]) for (const word of ["Echo:", " internationalization"]) r.push(chunk(index, word));
		r.push(usage(12, 4));
		r.push({ type: "done" });
		expect(r.end("completed")).toMatchObject({ usage: { completion_tokens: 4 }, estimated: false });
	});

	it("keeps the engine's count of one choice, even below the gateway's estimate", () => {
		const r = new ChatStreamReducer({ promptTokensEstimate: 10, bounds });
		r.push(chunk(0, "a".repeat(80)));
		r.push(usage(12, 5));
		r.push({ type: "done" });
		expect(r.end("completed")).toMatchObject({ usage: { completion_tokens: 5 }, estimated: false });
	});

	it("keeps an engine count of several choices at or above the gateway's", () => {
		const r = new ChatStreamReducer({ promptTokensEstimate: 10, bounds });
		r.push(chunk(0, "a".repeat(80)));
		r.push(chunk(1, "b".repeat(120)));
		r.push(usage(12, 61));
		r.push({ type: "done" });
		expect(r.end("completed")).toMatchObject({ usage: { completion_tokens: 61 }, estimated: false });
	});

	it("estimates 0/0 once content was relayed", () => {
		const r = new ChatStreamReducer({ promptTokensEstimate: 10, bounds });
		r.push(chunk(0, "a".repeat(40)));
		r.push(usage(0, 0));
		r.push({ type: "done" });
		expect(r.end("completed")).toMatchObject({
			usage: { prompt_tokens: 10, completion_tokens: 10, total_tokens: 20 },
			estimated: true,
		});
	});

	it("adds up llama.cpp's usage chunk of each choice (as its server streams `n`): completions, one prompt", () => {
		const r = new ChatStreamReducer({ promptTokensEstimate: 10, bounds });
		r.push(chunk(1, "b".repeat(24)));
		r.push(chunk(0, "a".repeat(24)));
		r.push(finish(1));
		r.push(usage(30, 6, llama(30, 6)));
		r.push(finish(0));
		r.push(usage(30, 7, llama(30, 7)));
		r.push({ type: "done" });
		expect(r.end("completed")).toMatchObject({
			usage: { prompt_tokens: 30, completion_tokens: 13, total_tokens: 43 },
			estimated: false,
		});
	});

	it("adds up llama.cpp's prompts too when they differ (a legacy prompt array)", () => {
		const r = new ChatStreamReducer({ promptTokensEstimate: 10, bounds });
		r.push({ type: "chunk", chunk: { ...head, choices: [{ index: 0, text: "x" }] }, data: "" });
		r.push(finish(0));
		r.push(usage(30, 6, llama(30, 6)));
		r.push({ type: "chunk", chunk: { ...head, choices: [{ index: 1, text: "y" }] }, data: "" });
		r.push(finish(1));
		r.push(usage(41, 5, llama(41, 5)));
		r.push({ type: "done" });
		expect(r.end("completed").usage).toMatchObject({ prompt_tokens: 71, completion_tokens: 11 });
	});

	it("keeps an engine's count of several choices below the gateway's estimate when it is not llama.cpp's shape (vLLM counts every choice)", () => {
		const r = new ChatStreamReducer({ promptTokensEstimate: 10, bounds });
		r.push(chunk(0, "a".repeat(80)));
		r.push(chunk(1, "b".repeat(120)));
		r.push(usage(12, 40));
		r.push({ type: "done" });
		expect(r.end("completed")).toMatchObject({ usage: { completion_tokens: 40 }, estimated: false });
	});

	it("counts legacy completions' choices (`text`) apart too", () => {
		const r = new ChatStreamReducer({ promptTokensEstimate: 10, bounds });
		for (const index of [0, 1, 2]) {
			for (let i = 0; i < 10; i++) r.push({ type: "chunk", chunk: { ...head, choices: [{ index, text: "c" }] }, data: "" });
		}
		r.push(usage(12, 10, llama(12, 10)));
		r.push({ type: "done" });
		expect(r.end("completed").usage.completion_tokens).toBe(30);
	});
});
