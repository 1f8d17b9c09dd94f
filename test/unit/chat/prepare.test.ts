import { describe, expect, it } from "vitest";
import { DEFAULT_SEARCH_RESULTS, outputCap, prepareChat } from "../../../src/chat/prepare";
import { type ChatRequest, validateChatRequest } from "../../../src/chat/validate";
import { type ModelConfig, parseConfig, type ResolvedModel, resolveModel } from "../../../src/config";

const cfg = parseConfig({
	models: [
		{
			id: "venym/qwen-27b",
			engine_model: "Qwen/Qwen3-27B",
			nodes: ["http://10.0.0.5:8000/v1"],
			max_output_tokens: 1000,
			pricing: { input_usd_per_mtok: 0.3, output_usd_per_mtok: 1.2 },
		},
		{
			id: "venym/thinker",
			engine_model: "thinker-engine",
			nodes: ["http://10.0.0.7:8000/v1"],
			max_output_tokens: 1000,
			pricing: { input_usd_per_mtok: 0.3, output_usd_per_mtok: 1.2 },
			capabilities: ["reasoning"],
		},
		{
			id: "venym/small",
			engine_model: "small-engine",
			nodes: ["http://10.0.0.6:8000/v1"],
			max_output_tokens: 5000,
			context_length: 300,
			pricing: { input_usd_per_mtok: 0.3, output_usd_per_mtok: 1.2 },
		},
	],
});

const big = resolveModel(cfg, "venym/qwen-27b");
const small = resolveModel(cfg, "venym/small");

function request(extra: Record<string, unknown> = {}): ChatRequest {
	return validateChatRequest({ model: "venym/qwen-27b", messages: [{ role: "user", content: "hi" }], ...extra });
}

function prepare(extra: Record<string, unknown> = {}, resolved: ResolvedModel = big, promptTokens = 10) {
	return prepareChat(request(extra), resolved, promptTokens);
}

describe("outputCap", () => {
	it("is the model's max_output_tokens when the context is unknown", () => {
		expect(outputCap(big.model, 10)).toBe(1000);
		expect(outputCap(big.model, 1_000_000)).toBe(1000);
	});

	it("is what the context leaves after the prompt when that is smaller", () => {
		expect(outputCap(small.model, 100)).toBe(200);
		expect(outputCap(small.model, 250)).toBe(50);
	});

	it("is the model's cap when the context leaves more", () => {
		const roomy: ModelConfig = { ...small.model, context_length: 100_000 };
		expect(outputCap(roomy, 100)).toBe(5000);
	});
});

describe("prepareChat", () => {
	it("gives earlier reasoning back only to a model with the reasoning capability", () => {
		const messages = [
			{ role: "user", content: "hi" },
			{ role: "assistant", content: "hello", reasoning_content: "I greet back." },
			{ role: "user", content: "again" },
		];
		const thinker = prepareChat(request({ messages }), resolveModel(cfg, "venym/thinker"), 10).engineBody;
		expect((thinker.messages as Array<Record<string, unknown>>)[1]?.reasoning_content).toBe("I greet back.");
		const plain = request({ messages });
		const shared = plain.messages;
		const sent = prepareChat(plain, big, 10).engineBody.messages as Array<Record<string, unknown>>;
		expect(sent.map((m) => "reasoning_content" in m)).toEqual([false, false, false]);
		expect(sent[1]).toEqual({ role: "assistant", content: "hello" });
		// The candidates share the message objects: the caller's are left as they were.
		expect((shared as Array<Record<string, unknown>>)[1]?.reasoning_content).toBe("I greet back.");
	});

	it("sends the catalog's engine model", () => {
		expect(prepare().engineBody.model).toBe("Qwen/Qwen3-27B");
	});

	it("sends the cap as max_tokens when the client sent no limit", () => {
		const p = prepare();
		expect(p.engineBody.max_tokens).toBe(1000);
		expect(p.maxOutputTokens).toBe(1000);
	});

	it("treats null limits as absent", () => {
		const p = prepare({ max_tokens: null, max_completion_tokens: null });
		expect(p.engineBody.max_tokens).toBe(1000);
		expect(p.engineBody.max_completion_tokens ?? null).toBeNull();
	});

	it("caps a larger max_tokens", () => {
		const p = prepare({ max_tokens: 50_000 });
		expect(p.engineBody.max_tokens).toBe(1000);
		expect(p.maxOutputTokens).toBe(1000);
	});

	it("keeps a smaller max_tokens", () => {
		const p = prepare({ max_tokens: 42 });
		expect(p.engineBody.max_tokens).toBe(42);
		expect(p.maxOutputTokens).toBe(42);
	});

	it("caps max_completion_tokens too, without raising anything", () => {
		const p = prepare({ max_completion_tokens: 9999 });
		expect(p.engineBody.max_completion_tokens).toBe(1000);
		expect((p.engineBody.max_tokens as number | undefined) ?? 0).toBeLessThanOrEqual(1000);
		expect(p.maxOutputTokens).toBe(1000);

		const both = prepare({ max_tokens: 5000, max_completion_tokens: 30 });
		expect(both.engineBody.max_tokens).toBe(1000);
		expect(both.engineBody.max_completion_tokens).toBe(30);
		expect(both.maxOutputTokens).toBe(30);
	});

	it("clamps to the context left after the prompt", () => {
		expect(prepare({ model: "venym/small" }, small, 100).engineBody.max_tokens).toBe(200);
		expect(prepare({ model: "venym/small", max_tokens: 4000 }, small, 100).engineBody.max_tokens).toBe(200);
		expect(prepare({ model: "venym/small", max_tokens: 20 }, small, 100).engineBody.max_tokens).toBe(20);
	});

	it("removes the venym object and reads its options", () => {
		const p = prepare({ venym: { web_search: true, search_results: 3 } });
		expect(p.engineBody).not.toHaveProperty("venym");
		expect(p.webSearch).toEqual({ enabled: true, results: 3 });
	});

	it("searches the web for :online with the default result count", () => {
		const p = prepareChat(request({ model: "venym/qwen-27b:online" }), resolveModel(cfg, "venym/qwen-27b:online"), 10);
		expect(p.webSearch).toEqual({ enabled: true, results: DEFAULT_SEARCH_RESULTS });
		expect(DEFAULT_SEARCH_RESULTS).toBe(6);
		expect(p.engineBody.model).toBe("Qwen/Qwen3-27B");
	});

	it("does not search unless asked", () => {
		expect(prepare().webSearch.enabled).toBe(false);
		expect(prepare({ venym: { search_results: 4 } }).webSearch.enabled).toBe(false);
	});

	it("forces stream_options to include_usage on streams, whatever was sent", () => {
		for (const stream_options of [undefined, null, { include_usage: false }, { include_usage: true, other: 1 }]) {
			const p = prepare({ stream: true, stream_options });
			expect(p.stream).toBe(true);
			expect(p.engineBody.stream_options).toEqual({ include_usage: true });
		}
	});

	it("is not a stream unless stream is true", () => {
		expect(prepare().stream).toBe(false);
		expect(prepare({ stream: false }).stream).toBe(false);
	});

	it("leaves every other field untouched", () => {
		const extra = {
			temperature: 0.2,
			top_p: 0.9,
			seed: 7,
			logprobs: true,
			top_logprobs: 3,
			stop: ["\n\n"],
			response_format: { type: "json_object" },
			tools: [{ type: "function", function: { name: "lookup", parameters: { type: "object", properties: {} } } }],
			tool_choice: "auto",
			user: "u-1",
			presence_penalty: 0.1,
			frequency_penalty: 0.1,
			logit_bias: { "50256": -100 },
			reasoning_effort: "low",
		};
		const messages = [
			{ role: "system", content: "be brief" },
			{ role: "user", content: [{ type: "text", text: "hi" }] },
		];
		const p = prepare({ ...structuredClone(extra), messages: structuredClone(messages) });
		for (const [k, v] of Object.entries(extra)) expect(p.engineBody[k], k).toEqual(v);
		expect(p.engineBody.messages).toEqual(messages);
	});
});
