// openai-node's streaming paths on a web-search stream (`:online`), end to end: the gateway's
// first event is a chunk-shaped `venym.sources` (`choices: []`), which the stream helper and a
// plain loop reading `chunk.choices[0]` must both take in their stride.
import type OpenAI from "openai";
import type { ChatCompletionChunk } from "openai/resources/chat/completions";
import { beforeAll, describe, expect, it } from "vitest";
import { createKey, openaiClient } from "./support";

let client: OpenAI;

beforeAll(async () => {
	client = openaiClient((await createKey({ name: "e2e-web-search", balance_usd: 50 })).key);
});

const user = (content: string) => [{ role: "user" as const, content }];
const groundedAnswer = (prompt: string) => `According to [1], ${prompt} is covered in the results [2].`;

interface SourcesEvent {
	object: "venym.sources";
	sources: Array<{ title: string; url: string }>;
}

describe("openai-node on a web-search stream", () => {
	it("chat.completions.stream() helper: content events and finalChatCompletion()", async () => {
		const prompt = "volcano eruptions";
		const runner = client.chat.completions.stream({ model: "test/ok:online", messages: user(prompt) });
		let streamed = "";
		runner.on("content", (delta) => {
			streamed += delta;
		});
		const chunks: ChatCompletionChunk[] = [];
		runner.on("chunk", (chunk) => chunks.push(chunk));
		const final = await runner.finalChatCompletion();

		expect(final.model).toBe("test/ok:online");
		expect(final.choices).toHaveLength(1);
		expect(final.choices[0]?.message.content).toBe(groundedAnswer(prompt));
		expect(final.choices[0]?.finish_reason).toBe("stop");
		expect(streamed).toBe(groundedAnswer(prompt));
		expect(final.usage?.completion_tokens).toBeGreaterThan(0);

		// The sources event came first and every chunk of the stream carries one id.
		const first = chunks[0] as unknown as SourcesEvent;
		expect(first.object).toBe("venym.sources");
		expect(first.sources.length).toBeGreaterThan(0);
		expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
		expect(final.id).toBe(chunks[0]?.id);
	});

	it("a plain for-await loop reading chunk.choices[0]?.delta", async () => {
		const prompt = "coral reefs";
		const stream = await client.chat.completions.create({ model: "test/ok:online", messages: user(prompt), stream: true });
		let text = "";
		let finish: string | null | undefined;
		const objects: string[] = [];
		let usageChunks = 0;
		for await (const chunk of stream) {
			objects.push(chunk.object);
			const delta = chunk.choices[0]?.delta;
			text += delta?.content ?? "";
			finish ??= chunk.choices[0]?.finish_reason;
			if (chunk.usage) usageChunks++;
			expect(chunk.model).toBe("test/ok:online");
		}
		expect(objects[0]).toBe("venym.sources");
		expect(objects.slice(1).every((o) => o === "chat.completion.chunk")).toBe(true);
		expect(text).toBe(groundedAnswer(prompt));
		expect(finish).toBe("stop");
		expect(usageChunks).toBe(1);
	});
});

// The Responses lane's hosted web_search tool, run when the model asks for it: the dev engine
// calls the offered search function when the prompt says "search", then answers citing [1].
describe("openai-node with the hosted web_search tool on /v1/responses", () => {
	const input = "Please search for volcano eruptions";

	it("responses.create(): a web_search_call item, then the cited answer", async () => {
		const res = await client.responses.create({ model: "test/ok", input, tools: [{ type: "web_search" }] });
		expect(res.status).toBe("completed");
		expect(res.output.map((i) => i.type)).toEqual(["web_search_call", "message"]);
		const call = res.output[0];
		if (call?.type !== "web_search_call") throw new Error("no web_search_call item");
		expect(call.status).toBe("completed");
		expect(res.output_text).toContain("[1]");
		// Both engine calls are in the usage the client sees.
		expect(res.usage?.input_tokens).toBeGreaterThan(0);
		expect(res.usage?.output_tokens).toBeGreaterThan(0);
	});

	it("responses.stream(): the search's events come before the text, finalResponse() matches", async () => {
		const stream = client.responses.stream({ model: "test/ok", input, tools: [{ type: "web_search" }] });
		const types: string[] = [];
		let text = "";
		for await (const event of stream) {
			types.push(event.type);
			if (event.type === "response.output_text.delta") text += event.delta;
		}
		const final = await stream.finalResponse();
		expect(types[0]).toBe("response.created");
		const searched = types.indexOf("response.web_search_call.completed");
		expect(searched).toBeGreaterThan(0);
		expect(searched).toBeLessThan(types.indexOf("response.output_text.delta"));
		expect(final.output.map((i) => i.type)).toEqual(["web_search_call", "message"]);
		expect(final.output_text).toBe(text);
	});

	it("answers without a search when the prompt asks for none", async () => {
		const res = await client.responses.create({ model: "test/ok", input: "Say hello", tools: [{ type: "web_search" }] });
		expect(res.output.map((i) => i.type)).toEqual(["message"]);
	});
});
