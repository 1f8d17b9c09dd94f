// The Vercel AI SDK (`ai` with `@ai-sdk/openai`'s chat and Responses providers, and
// `@ai-sdk/openai-compatible`) against the real gateway under `wrangler dev` and the
// development engine: what an AI SDK user sees, end to end, on the paths they take first.
import { createOpenAI, type OpenAIProvider } from "@ai-sdk/openai";
import { createOpenAICompatible, type OpenAICompatibleProvider } from "@ai-sdk/openai-compatible";
import {
	embedMany,
	generateText,
	type LanguageModel,
	stepCountIs,
	streamText,
	type TextStreamPart,
	type ToolSet,
	tool,
} from "ai";
import { beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { createKey, engineRequestsWith, gatewayUrl, marker } from "./support";

let openai: OpenAIProvider;
let compatible: OpenAICompatibleProvider;

beforeAll(async () => {
	const { key } = await createKey({ name: "e2e-ai-sdk", balance_usd: 50 });
	const baseURL = `${gatewayUrl()}/v1`;
	openai = createOpenAI({ baseURL, apiKey: key });
	compatible = createOpenAICompatible({ name: "venym", baseURL, apiKey: key, includeUsage: true });
});

// The AI SDK retries 5xx and 429 by default; a test must see the first answer.
const noRetries = { maxRetries: 0 } as const;

type Part = TextStreamPart<ToolSet>;

/** Every part of `streamText`'s full stream, and the text it assembled. */
async function drain(model: LanguageModel, prompt: string) {
	const result = streamText({ model, prompt, ...noRetries, onError: () => {} });
	const parts: Part[] = [];
	for await (const part of result.fullStream) parts.push(part);
	return { parts, text: await result.text, usage: await result.usage, finishReason: await result.finishReason };
}

/** The stream carried no `error` part (printed in full when it did, so the cause is visible). */
function expectNoErrorParts(parts: Part[]) {
	const errors = parts.filter((p) => p.type === "error");
	expect(errors.map((p) => String((p as { error: unknown }).error))).toEqual([]);
	expect(parts.some((p) => p.type === "finish")).toBe(true);
}

function expectUsage(usage: { inputTokens?: number; outputTokens?: number; totalTokens?: number }) {
	expect(usage.inputTokens).toBeGreaterThan(0);
	expect(usage.outputTokens).toBeGreaterThan(0);
	expect(usage.totalTokens).toBe((usage.inputTokens ?? 0) + (usage.outputTokens ?? 0));
}

/** What the development engine answers a web-search-grounded prompt: it cites the first two sources. */
const groundedAnswer = (prompt: string) => `According to [1], ${prompt} is covered in the results [2].`;

describe("@ai-sdk/openai chat provider (openai.chat)", () => {
	it("generateText: text, finish reason, usage", async () => {
		const result = await generateText({ model: openai.chat("test/ok"), prompt: "say hi please", ...noRetries });
		expect(result.text).toBe("Echo: say hi please");
		expect(result.finishReason).toBe("stop");
		expectUsage(result.usage);
		expect(result.response.modelId).toBe("test/ok");
	});

	it("streamText: text arrives, no error parts, usage reported", async () => {
		const { parts, text, usage, finishReason } = await drain(openai.chat("test/ok"), "stream this back");
		expectNoErrorParts(parts);
		expect(text).toBe("Echo: stream this back");
		expect(parts.filter((p) => p.type === "text-delta").length).toBeGreaterThan(1);
		expect(finishReason).toBe("stop");
		expectUsage(usage);
		expect(usage.outputTokens).toBe(4);
	});

	it("streamText with :online: the venym.sources event parses as a chunk (no error part)", async () => {
		const prompt = "solar eclipse dates";
		const { parts, text, usage, finishReason } = await drain(openai.chat("test/ok:online"), prompt);
		expectNoErrorParts(parts);
		expect(text).toBe(groundedAnswer(prompt));
		expect(finishReason).toBe("stop");
		expectUsage(usage);
	});

	it("generateText with :online: url_citation annotations become sources", async () => {
		const prompt = "tide tables";
		const result = await generateText({ model: openai.chat("test/ok:online"), prompt, ...noRetries });
		expect(result.text).toBe(groundedAnswer(prompt));
		const urls = result.sources.map((s) => (s.sourceType === "url" ? s.url : null));
		expect(urls).toEqual(["https://example.com/tide-tables/1", "https://example.com/tide-tables/2"]);
	});

	it("tool loop: the tool runs with well-formed arguments, its result is sent back, the model answers", async () => {
		const m = marker("tool-loop");
		const calls: string[] = [];
		const result = await generateText({
			model: openai.chat("test/ok"),
			prompt: `weather in Paris ${m}`,
			tools: {
				lookup_weather: tool({
					description: "Looks the weather up",
					inputSchema: z.object({ query: z.string() }),
					execute: async ({ query }) => {
						calls.push(query);
						return "sunny, 21C";
					},
				}),
			},
			stopWhen: stepCountIs(3),
			...noRetries,
		});
		expect(calls).toEqual([`weather in Paris ${m}`]);
		expect(result.steps.map((s) => s.finishReason)).toEqual(["tool-calls", "stop"]);
		expect(result.steps[0]?.toolCalls.map((c) => c.toolName)).toEqual(["lookup_weather"]);
		expect(result.text).toBe("Tool said: sunny, 21C");
		expectUsage(result.totalUsage);

		// Step two carried the assistant's tool call and the tool's answer back to the engine.
		const requests = await engineRequestsWith(m);
		expect(requests).toHaveLength(2);
		const second = requests[1]!.body as { messages: Array<{ role: string; tool_calls?: unknown[]; tool_call_id?: string }> };
		const roles = second.messages.map((msg) => msg.role);
		expect(roles.slice(-2)).toEqual(["assistant", "tool"]);
		expect(second.messages.at(-2)?.tool_calls).toHaveLength(1);
		expect(second.messages.at(-1)?.tool_call_id).toBeTruthy();
	});

	it("streamText tool loop: tool-call and tool-result parts, then the answer, no error parts", async () => {
		const result = streamText({
			model: openai.chat("test/ok"),
			prompt: "capital of France",
			tools: {
				search: tool({
					description: "Searches",
					inputSchema: z.object({ query: z.string() }),
					execute: async ({ query }) => `found ${query}`,
				}),
			},
			stopWhen: stepCountIs(3),
			onError: () => {},
			...noRetries,
		});
		const parts: Part[] = [];
		for await (const part of result.fullStream) parts.push(part);
		expectNoErrorParts(parts);
		const call = parts.find((p) => p.type === "tool-call");
		expect(call && call.type === "tool-call" ? call.input : null).toEqual({ query: "capital of France" });
		expect(parts.some((p) => p.type === "tool-result")).toBe(true);
		expect(await result.text).toBe("Tool said: found capital of France");
		expectUsage(await result.totalUsage);
	});
});

describe("@ai-sdk/openai Responses provider (openai / openai.responses)", () => {
	it("generateText: a single turn through the default provider", async () => {
		const result = await generateText({ model: openai("test/ok"), prompt: "hello responses", ...noRetries });
		expect(result.text).toBe("Echo: hello responses");
		expect(result.finishReason).toBe("stop");
		expectUsage(result.usage);
		expect(result.response.id).toMatch(/^resp_/);
	});

	it("streamText: text arrives, no error parts, usage reported", async () => {
		const { parts, text, usage } = await drain(openai.responses("test/ok"), "stream a response");
		expectNoErrorParts(parts);
		expect(text).toBe("Echo: stream a response");
		expectUsage(usage);
	});

	// A reasoning model's thinking reaches AI SDK users only as Responses reasoning summaries.
	const reasoningOptions = { providerOptions: { openai: { reasoningSummary: "auto", forceReasoning: true } } } as const;

	it("generateText on a reasoning model with reasoningSummary: reasoningText and reasoning tokens", async () => {
		const result = await generateText({
			model: openai.responses("test/reasoning"),
			prompt: "think first",
			...reasoningOptions,
			...noRetries,
		});
		expect(result.reasoningText?.length).toBeGreaterThan(0);
		expect(result.reasoning.some((r) => r.type === "reasoning" && r.text.length > 0)).toBe(true);
		expect(result.text).toBe("Echo: think first");
		expect(result.usage.outputTokenDetails?.reasoningTokens ?? result.usage.reasoningTokens).toBeGreaterThan(0);
	});

	it("streamText on a reasoning model with reasoningSummary: reasoning-delta parts, then the text", async () => {
		const result = streamText({
			model: openai.responses("test/reasoning"),
			prompt: "think while streaming",
			...reasoningOptions,
			...noRetries,
			onError: () => {},
		});
		const parts: Part[] = [];
		for await (const part of result.fullStream) parts.push(part);
		expectNoErrorParts(parts);
		const deltas = parts.filter((p) => p.type === "reasoning-delta");
		expect(deltas.length).toBeGreaterThan(0);
		expect(await result.reasoningText).toBe(deltas.map((p) => (p as { text: string }).text).join(""));
		expect(await result.text).toBe("Echo: think while streaming");
	});

	it("tool loop: function_call and function_call_output items carry the tool's answer back", async () => {
		const m = marker("responses-tools");
		const calls: string[] = [];
		const result = await generateText({
			model: openai.responses("test/ok"),
			prompt: `population of Lyon ${m}`,
			tools: {
				lookup: tool({
					description: "Looks facts up",
					inputSchema: z.object({ query: z.string() }),
					execute: async ({ query }) => {
						calls.push(query);
						return "about half a million";
					},
				}),
			},
			stopWhen: stepCountIs(3),
			...noRetries,
		});
		expect(calls).toEqual([`population of Lyon ${m}`]);
		expect(result.steps.map((s) => s.finishReason)).toEqual(["tool-calls", "stop"]);
		expect(result.text).toBe("Tool said: about half a million");
		expectUsage(result.totalUsage);
	});

	// The provider stores responses by default and replays the first turn's assistant message as
	// {"type":"item_reference","id":"msg_…"} (issue 14 item 2), which the gateway resolves from the
	// key's stored items.
	it("a two-turn conversation with default storage (earlier items sent as item_reference)", async () => {
		const m = marker("two-turn");
		const model = openai.responses("test/ok");
		const firstPrompt = `first question ${m}`;
		const first = await generateText({ model, prompt: firstPrompt, ...noRetries });
		expect(first.text).toBe(`Echo: ${firstPrompt}`);
		expect(first.response.messages).toHaveLength(1);
		const second = await generateText({
			model,
			messages: [
				{ role: "user", content: firstPrompt },
				...first.response.messages,
				{ role: "user", content: "second question" },
			],
			...noRetries,
		});
		expect(second.text).toBe("Echo: second question");
		expectUsage(second.usage);

		// The reference resolved to the first answer: the engine saw the whole conversation.
		const requests = await engineRequestsWith(m);
		expect(requests).toHaveLength(2);
		const messages = (requests[1]!.body as { messages: Array<{ role: string; content: unknown }> }).messages;
		expect(messages.map((msg) => [msg.role, JSON.stringify(msg.content)])).toEqual([
			["user", expect.stringContaining(firstPrompt)],
			["assistant", expect.stringContaining(`Echo: ${firstPrompt}`)],
			["user", expect.stringContaining("second question")],
		]);
	});
});

describe("@ai-sdk/openai-compatible", () => {
	it("generateText: text, finish reason, usage", async () => {
		const result = await generateText({ model: compatible("test/ok"), prompt: "compatible hi", ...noRetries });
		expect(result.text).toBe("Echo: compatible hi");
		expect(result.finishReason).toBe("stop");
		expectUsage(result.usage);
	});

	it("streamText: text arrives, no error parts, usage reported", async () => {
		const { parts, text, usage, finishReason } = await drain(compatible.chatModel("test/ok"), "compatible stream");
		expectNoErrorParts(parts);
		expect(text).toBe("Echo: compatible stream");
		expect(finishReason).toBe("stop");
		expectUsage(usage);
	});

	it("streamText with :online: no error parts, grounded text, usage reported", async () => {
		const prompt = "northern lights forecast";
		const { parts, text, usage } = await drain(compatible("test/ok:online"), prompt);
		expectNoErrorParts(parts);
		expect(text).toBe(groundedAnswer(prompt));
		expectUsage(usage);
	});

	it("generateText with :online", async () => {
		const prompt = "meteor showers";
		const result = await generateText({ model: compatible("test/ok:online"), prompt, ...noRetries });
		expect(result.text).toBe(groundedAnswer(prompt));
		expectUsage(result.usage);
	});
});

describe("embedMany (test/embed, an embeddings-capable model)", () => {
	const values = ["sunny day", "a much longer sentence about rain"];

	it("@ai-sdk/openai embedding model: one vector per value, in order, usage reported", async () => {
		const result = await embedMany({ model: openai.embedding("test/embed"), values, ...noRetries });
		expect(result.embeddings).toHaveLength(2);
		for (const vector of result.embeddings) expect(vector).toHaveLength(8);
		// The development engine's vectors depend on the input's length, so order is visible.
		expect(result.embeddings[0]).not.toEqual(result.embeddings[1]);
		expect(result.usage.tokens).toBeGreaterThan(0);
	});

	it("@ai-sdk/openai embedding model: providerOptions.openai.dimensions is passed on", async () => {
		const result = await embedMany({
			model: openai.embedding("test/embed"),
			values,
			providerOptions: { openai: { dimensions: 4 } },
			...noRetries,
		});
		for (const vector of result.embeddings) expect(vector).toHaveLength(4);
	});

	it("@ai-sdk/openai-compatible embedding model", async () => {
		const result = await embedMany({ model: compatible.embeddingModel("test/embed"), values, ...noRetries });
		expect(result.embeddings).toHaveLength(2);
		for (const vector of result.embeddings) expect(vector).toHaveLength(8);
		expect(result.usage.tokens).toBeGreaterThan(0);
	});

	it("a chat model is refused on embeddings with a 400 the SDK surfaces", async () => {
		const err = await embedMany({ model: openai.embedding("test/ok"), values, ...noRetries }).then(
			() => null,
			(e: unknown) => e as { statusCode?: number },
		);
		expect(err?.statusCode).toBe(400);
	});
});
