// openai-node's `embeddings.create` and legacy `completions.create` against the real gateway
// (wrangler dev) and the development engine (dev/engine-legacy.mjs).
import OpenAI from "openai";
import type { Completion } from "openai/resources/completions";
import { beforeAll, describe, expect, it } from "vitest";
import { createKey, openaiClient } from "./support";

let client: OpenAI;

beforeAll(async () => {
	client = openaiClient((await createKey({ name: "e2e-legacy-embeddings", balance_usd: 50 })).key);
});

/** The development engine's vector for `text`: a function of its length, 6 decimals. */
const engineVector = (text: string, dims = 8) =>
	Array.from({ length: dims }, (_, i) => Number(((((text.length + 1) * (i + 1)) % 97) / 97).toFixed(6)));

describe("embeddings through the openai SDK", () => {
	it("embeddings.create (the SDK asks for base64 and decodes it): vectors, gateway model, usage, cost header", async () => {
		const input = ["first text", "the second, longer text"];
		const { data, response } = await client.embeddings.create({ model: "test/embed", input }).withResponse();
		expect(data.object).toBe("list");
		expect(data.model).toBe("test/embed");
		expect(data.data.map((d) => d.index)).toEqual([0, 1]);
		data.data.forEach((d, i) => {
			expect(d.embedding).toHaveLength(8);
			const expected = engineVector(input[i]!);
			for (const [k, v] of d.embedding.entries()) expect(v).toBeCloseTo(expected[k]!, 5);
		});
		expect(data.usage.prompt_tokens).toBeGreaterThan(0);
		expect(data.usage.total_tokens).toBe(data.usage.prompt_tokens);
		expect(Number(response.headers.get("x-venym-cost-usd"))).toBeGreaterThan(0);
	});

	it("encoding_format float and dimensions are passed on", async () => {
		const data = await client.embeddings.create({ model: "test/embed", input: "hello", encoding_format: "float", dimensions: 3 });
		expect(data.data[0]?.embedding).toEqual(engineVector("hello", 3));
	});

	it("a chat model on embeddings → BadRequestError", async () => {
		const err = await client.embeddings.create({ model: "test/ok", input: "hello" }).then(
			() => null,
			(e: unknown) => e,
		);
		expect(err).toBeInstanceOf(OpenAI.BadRequestError);
	});
});

describe("legacy completions through the openai SDK", () => {
	it("non-stream: text, gateway model, usage", async () => {
		const data = await client.completions.create({ model: "test/ok", prompt: "complete this line", max_tokens: 10 });
		expect(data.object).toBe("text_completion");
		expect(data.model).toBe("test/ok");
		expect(data.choices[0]?.text).toBe("Echo: complete this line");
		expect(data.choices[0]?.finish_reason).toBe("stop");
		expect(data.usage?.completion_tokens).toBe(4);
		expect(data.usage?.total_tokens).toBe((data.usage?.prompt_tokens ?? 0) + (data.usage?.completion_tokens ?? 0));
	});

	it("max_tokens defaults to 16 (finish_reason length past it)", async () => {
		const prompt = Array.from({ length: 30 }, (_, i) => `w${i}`).join(" ");
		const data = await client.completions.create({ model: "test/ok", prompt });
		expect(data.choices[0]?.text.split(" ")).toHaveLength(16);
		expect(data.choices[0]?.finish_reason).toBe("length");
	});

	it("stream: text assembles, every chunk names the gateway model, exactly one usage chunk last", async () => {
		const stream = await client.completions.create({ model: "test/ok", prompt: "stream the legacy way", stream: true });
		const chunks: Completion[] = [];
		for await (const chunk of stream) chunks.push(chunk);
		expect(chunks.map((c) => c.choices[0]?.text ?? "").join("")).toBe("Echo: stream the legacy way");
		for (const chunk of chunks) {
			expect(chunk.object).toBe("text_completion");
			expect(chunk.model).toBe("test/ok");
		}
		const last = chunks.at(-1)!;
		expect(last.choices).toEqual([]);
		expect(last.usage?.completion_tokens).toBeGreaterThan(0);
		expect(chunks.filter((c) => c.usage).length).toBe(1);
		expect(chunks.some((c) => c.choices[0]?.finish_reason === "stop")).toBe(true);
	});

	it("an array of prompts gets one choice per prompt", async () => {
		const data = await client.completions.create({ model: "test/ok", prompt: ["one", "two words"], max_tokens: 8 });
		expect(data.choices.map((c) => c.text)).toEqual(["Echo: one", "Echo: two words"]);
	});
});
