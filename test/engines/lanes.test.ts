// The Responses and Messages lanes, count_tokens and a web search round through the gateway to
// llama.cpp's own server, each bill held against llama.cpp's own `timings`.
import Anthropic from "@anthropic-ai/sdk";
import { beforeAll, expect, it } from "vitest";
import {
	costNanos,
	createKey,
	describeEngines,
	engineAnswers,
	engineTotals,
	marker,
	openai,
	stack,
	type UsageRow,
	usageRows,
	waitFor,
} from "./support";

let key: { id: string; key: string };

function rowOf(requestId: string | null): Promise<UsageRow> {
	return waitFor(
		async () => (await usageRows(key.id, 1)).find((r) => r.request_id === requestId),
		15_000,
		`the usage record of ${requestId}`,
	);
}

async function expectBilledAsEngine(requestId: string | null, m: string) {
	const row = await rowOf(requestId);
	const engine = engineTotals(await engineAnswers(stack().main.url, m));
	expect(row).toMatchObject({ prompt_tokens: engine.prompt, completion_tokens: engine.completion, cached_tokens: engine.cached });
	expect(row.cost_nanos).toBe(costNanos(engine.prompt, engine.completion, engine.cached));
	return { row, engine };
}

const anthropic = () => new Anthropic({ baseURL: stack().gatewayUrl, apiKey: key.key, maxRetries: 0, timeout: 60_000 });

async function countTokens(model: string, body: Record<string, unknown>) {
	const res = await fetch(`${stack().gatewayUrl}/v1/messages/count_tokens`, {
		method: "POST",
		headers: { "x-api-key": key.key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
		body: JSON.stringify({ model, ...body }),
	});
	const json = (await res.json()) as { input_tokens: number };
	expect(res.status, JSON.stringify(json)).toBe(200);
	return { count: json.input_tokens, source: res.headers.get("x-venym-token-count") };
}

describeEngines("Responses, Messages, count_tokens and web search against llama.cpp", () => {
	beforeAll(async () => {
		key = await createKey("engines-lanes");
	});

	it("Responses, stored: the answer, then a follow-up by previous_response_id, each billed as llama.cpp counted", async () => {
		const m = marker("resp");
		const { data: first, response } = await openai(key.key)
			.responses.create({ model: "engines/qwen", input: m, max_output_tokens: 16 })
			.withResponse();
		expect(first.status === "completed" || first.status === "incomplete").toBe(true);
		expect(first.output.some((i) => i.type === "message")).toBe(true);
		const { engine } = await expectBilledAsEngine(response.headers.get("x-request-id"), m);
		expect(first.usage).toMatchObject({ input_tokens: engine.prompt, output_tokens: engine.completion });

		// The stored response comes back by id, and a follow-up sends the earlier turn to the engine.
		const fetched = await openai(key.key).responses.retrieve(first.id);
		expect(fetched.id).toBe(first.id);
		const m2 = marker("resp-follow");
		const { data: second } = await openai(key.key)
			.responses.create({ model: "engines/qwen", input: m2, previous_response_id: first.id, max_output_tokens: 8 })
			.withResponse();
		const [sent] = await engineAnswers(stack().main.url, m2);
		expect(JSON.stringify(sent?.body.messages)).toContain(m);
		// The earlier turn is the engine's cached prefix: llama.cpp reports it and the bill splits it.
		expect(sent?.timings?.cache_n).toBeGreaterThan(0);
		expect(second.usage?.input_tokens_details.cached_tokens).toBe(sent?.timings?.cache_n);
	});

	it("Responses, stateless stream (store: false): events in order, usage is llama.cpp's", async () => {
		const m = marker("resp-stream");
		const { data: stream, response } = await openai(key.key)
			.responses.create({ model: "engines/qwen", input: m, max_output_tokens: 12, store: false, stream: true })
			.withResponse();
		const types: string[] = [];
		let done: { usage?: { input_tokens: number; output_tokens: number } | null; id: string } | undefined;
		for await (const e of stream) {
			types.push(e.type);
			if (e.type === "response.completed" || e.type === "response.incomplete") done = e.response;
		}
		expect(types[0]).toBe("response.created");
		expect(types).toContain("response.output_text.delta");
		const { engine } = await expectBilledAsEngine(response.headers.get("x-request-id"), m);
		expect(done?.usage).toMatchObject({ input_tokens: engine.prompt, output_tokens: engine.completion });
		// Nothing was stored.
		await expect(openai(key.key).responses.retrieve(done?.id ?? "")).rejects.toMatchObject({ status: 404 });
	});

	it("Messages with the Anthropic SDK: usage splits llama.cpp's cache as Anthropic does", async () => {
		const m = marker("msg");
		const ask = () =>
			anthropic()
				.messages.create({ model: "engines/qwen", max_tokens: 10, messages: [{ role: "user", content: `${m} hello` }] })
				.withResponse();
		const { data: first, response } = await ask();
		expect(first.type).toBe("message");
		expect(["end_turn", "max_tokens"]).toContain(first.stop_reason);
		const { engine } = await expectBilledAsEngine(response.headers.get("request-id") ?? response.headers.get("x-request-id"), m);
		expect(first.usage).toMatchObject({ input_tokens: engine.prompt - engine.cached, output_tokens: engine.completion });
		// The same prompt again: all but one token cached; input_tokens counts only the rest.
		const { data: second } = await ask();
		const answers = await engineAnswers(stack().main.url, m);
		const t = answers.at(-1)?.timings;
		expect(t?.cache_n).toBeGreaterThan(0);
		expect(second.usage).toMatchObject({
			input_tokens: t?.prompt_n,
			cache_read_input_tokens: t?.cache_n,
			output_tokens: t?.predicted_n,
		});
	});

	it("Messages with tools: a tool_use block from llama.cpp's call, streamed by the SDK", async () => {
		const m = marker("msg-tools");
		// The Messages API has no logit_bias: this random-weight model rarely calls unprompted, so the
		// request is checked to offer the tool and to end in a valid Anthropic shape either way.
		const stream = anthropic().messages.stream({
			model: "engines/qwen",
			max_tokens: 60,
			tool_choice: { type: "any" },
			tools: [{ name: "get_weather", input_schema: { type: "object", properties: { city: { type: "string" } } } }],
			messages: [{ role: "user", content: m }],
		});
		const final = await stream.finalMessage();
		const [sent] = await engineAnswers(stack().main.url, m);
		expect(sent?.body.tools).toEqual([expect.objectContaining({ function: expect.objectContaining({ name: "get_weather" }) })]);
		expect(sent?.body.tool_choice).toBe("required");
		for (const block of final.content) {
			if (block.type === "tool_use") {
				expect(block.name).toBe("get_weather");
				expect(typeof block.input).toBe("object");
			} else expect(block.type).toBe("text");
		}
		if (final.content.some((b) => b.type === "tool_use")) expect(final.stop_reason).toMatch(/tool_use|max_tokens/);
		expect(final.usage.output_tokens).toBe(engineTotals([sent as NonNullable<typeof sent>]).completion);
	});

	it("count_tokens: llama.cpp's exact count (its template, tools, special tokens), the estimate when no node answers", async () => {
		const body = {
			system: "You are terse.",
			messages: [
				{ role: "user", content: "def fib(n): return n if n < 2 else fib(n-1) + fib(n-2)" },
				{ role: "assistant", content: "你好，世界！这是一个测试。" },
				{ role: "user", content: "And the weather in Paris?" },
			],
			tools: [
				{
					name: "get_weather",
					description: "Weather",
					input_schema: { type: "object", properties: { city: { type: "string" } } },
				},
			],
		};
		const counted = await countTokens("engines/qwen", body);
		expect(counted.source).toBe("engine");
		// The engine's own prompt_n for the same conversation (no cache), through the gateway.
		const m = marker("count");
		const probe = {
			...body,
			messages: [...body.messages.slice(0, 2), { role: "user", content: `And the weather in Paris? ${m}` }],
		};
		const probeCount = await countTokens("engines/qwen", probe);
		const res = await anthropic().messages.create({ model: "engines/qwen", max_tokens: 1, ...probe } as never);
		const t = (await engineAnswers(stack().main.url, m)).at(-1)?.timings;
		expect(probeCount.count).toBe((t?.prompt_n ?? 0) + (t?.cache_n ?? 0));
		expect(res.usage.input_tokens + (res.usage.cache_read_input_tokens ?? 0)).toBe(probeCount.count);

		// The first tokenizing node is down: the second answers. None answers: the estimate, said so.
		expect(await countTokens("engines/qwen-second", body)).toEqual(counted);
		const estimated = await countTokens("engines/no-tokenizer", body);
		expect(estimated.source).toBe("estimate");
		expect(estimated.count).toBeGreaterThan(0);
	});

	it("Responses input_tokens: llama.cpp's exact count of the turn it would send, earlier turn included", async () => {
		const m = marker("input-tokens");
		const first = await openai(key.key).responses.create({ model: "engines/qwen", input: `${m} hello`, max_output_tokens: 4 });
		const ask = { model: "engines/qwen", input: `${m} and then?`, previous_response_id: first.id, instructions: "Be brief." };
		const res = await fetch(`${stack().gatewayUrl}/v1/responses/input_tokens`, {
			method: "POST",
			headers: { authorization: `Bearer ${key.key}`, "content-type": "application/json" },
			body: JSON.stringify(ask),
		});
		const counted = (await res.json()) as { object: string; input_tokens: number };
		expect(res.headers.get("x-venym-token-count")).toBe("engine");
		expect(counted.object).toBe("response.input_tokens");
		// The same request run: llama.cpp's prompt_n + cache_n for it is the count.
		await openai(key.key).responses.create({ ...ask, max_output_tokens: 1 });
		const t = (await engineAnswers(stack().main.url, `${m} and then?`)).at(-1)?.timings;
		expect(counted.input_tokens).toBe((t?.prompt_n ?? 0) + (t?.cache_n ?? 0));
	});

	it("web search (:online): the search backend's results go to llama.cpp, the search is billed beside its tokens", async () => {
		const m = marker("search");
		const { data, response } = await openai(key.key)
			.chat.completions.create({
				model: "engines/qwen:online",
				max_tokens: 8,
				messages: [{ role: "user", content: `volcanoes ${m}` }],
			})
			.withResponse();
		expect(response.headers.get("x-venym-web-search")).toBe("ok");
		expect(data.choices).toHaveLength(1);
		const [sent] = await engineAnswers(stack().main.url, m);
		expect(JSON.stringify(sent?.body.messages)).toContain("https://example.com/");
		const row = await rowOf(response.headers.get("x-request-id"));
		const engine = engineTotals(sent ? [sent] : []);
		expect(row).toMatchObject({ search_count: 1, prompt_tokens: engine.prompt, completion_tokens: engine.completion });
		expect(row.cost_nanos).toBe(costNanos(engine.prompt, engine.completion, engine.cached) + 5_000_000);
	});
});
