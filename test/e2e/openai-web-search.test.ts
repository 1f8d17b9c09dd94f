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
