// Chat completions, legacy completions and embeddings through the gateway to llama.cpp's own
// server, each answer's bill held against what llama.cpp itself reported (`timings`).
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

/** The engine's "<tool_call>" token: this random-weight model calls a tool only when nudged toward it. */
const TOOL_CALL_NUDGE = { "151657": 5 };

let key: { id: string; key: string };

/** The usage record of the request that answered with `requestId`, once settlement wrote it. */
function rowOf(requestId: string | null): Promise<UsageRow> {
	return waitFor(
		async () => (await usageRows(key.id, 1)).find((r) => r.request_id === requestId),
		15_000,
		`the usage record of ${requestId}`,
	);
}

/** The record matches the engine's own timings for the requests carrying `m`, and costs their price. */
async function expectBilledAsEngine(requestId: string | null, m: string, proxy = stack().main.url) {
	const row = await rowOf(requestId);
	const engine = engineTotals(await engineAnswers(proxy, m));
	expect(row).toMatchObject({
		prompt_tokens: engine.prompt,
		completion_tokens: engine.completion,
		cached_tokens: engine.cached,
		estimated: false,
		status: "completed",
	});
	expect(row.cost_nanos).toBe(costNanos(engine.prompt, engine.completion, engine.cached));
	return { row, engine };
}

describeEngines("chat completions against llama.cpp", () => {
	beforeAll(async () => {
		key = await createKey("engines-chat");
	});

	it("non-stream: one assembled body whose usage and bill are llama.cpp's own counts", async () => {
		const m = marker("plain");
		const { data, response } = await openai(key.key)
			.chat.completions.create({ model: "engines/qwen", max_tokens: 24, messages: [{ role: "user", content: m }] })
			.withResponse();
		expect(data.model).toBe("engines/qwen");
		expect(data.object).toBe("chat.completion");
		expect(data.choices).toHaveLength(1);
		expect(typeof data.choices[0]?.message.content).toBe("string");
		expect(["stop", "length"]).toContain(data.choices[0]?.finish_reason);
		const { engine } = await expectBilledAsEngine(response.headers.get("x-request-id"), m);
		expect(data.usage).toMatchObject({ prompt_tokens: engine.prompt, completion_tokens: engine.completion });
		expect(Number(response.headers.get("x-venym-cost-usd"))).toBeCloseTo(costNanos(engine.prompt, engine.completion) / 1e9, 9);
	});

	it("stream with include_usage: one final usage chunk, llama.cpp's counts, the cache hit billed as cached", async () => {
		const m = marker("stream");
		const messages = [{ role: "user" as const, content: `${m} tell me a long story about the sea and the rain` }];
		const ask = () =>
			openai(key.key)
				.chat.completions.create({
					model: "engines/qwen",
					max_tokens: 16,
					messages,
					stream: true,
					stream_options: { include_usage: true },
				})
				.withResponse();
		for (const round of [1, 2]) {
			const { data, response } = await ask();
			const chunks = [];
			for await (const c of data) chunks.push(c);
			const usage = chunks.filter((c) => c.usage);
			expect(usage).toHaveLength(1);
			expect(chunks.at(-1)?.usage).toBeTruthy();
			expect(chunks.at(-1)?.choices).toEqual([]);
			expect(chunks.every((c) => c.model === "engines/qwen")).toBe(true);
			const finish = chunks.flatMap((c) => c.choices.map((ch) => ch.finish_reason)).filter(Boolean);
			const answers = await engineAnswers(stack().main.url, m);
			const last = answers.at(-1);
			expect(answers).toHaveLength(round);
			const engine = engineTotals(last ? [last] : []);
			expect(usage[0]?.usage).toMatchObject({ prompt_tokens: engine.prompt, completion_tokens: engine.completion });
			expect(finish).toHaveLength(1);
			const row = await rowOf(response.headers.get("x-request-id"));
			expect(row).toMatchObject({
				prompt_tokens: engine.prompt,
				completion_tokens: engine.completion,
				cached_tokens: engine.cached,
			});
			expect(row.cost_nanos).toBe(costNanos(engine.prompt, engine.completion, engine.cached));
			// The same prompt again: llama.cpp serves all of it but one token from its prompt cache.
			if (round === 2) expect(engine.cached).toBe(engine.prompt - 1);
		}
	});

	// llama.cpp reports usage for one choice of `n`: the gateway bills every choice it delivered.
	it("n: 2 returns two choices and bills both (issue 33 item 2)", async () => {
		const m = marker("n2");
		const { data, response } = await openai(key.key)
			.chat.completions.create({ model: "engines/qwen", n: 2, max_tokens: 12, messages: [{ role: "user", content: m }] })
			.withResponse();
		expect(data.choices.map((c) => c.index).sort()).toEqual([0, 1]);
		const row = await rowOf(response.headers.get("x-request-id"));
		// llama.cpp reports one choice's tokens; the engine produced both choices' text, each up to 12 tokens.
		const answers = await engineAnswers(stack().main.url, m);
		const single = engineTotals(answers);
		expect(row.prompt_tokens).toBe(single.prompt);
		expect(row.completion_tokens, "n choices billed as one").toBeGreaterThan(single.completion);
	});

	it("stop: the answer ends before the stop text, finish_reason stop", async () => {
		const m = marker("stop");
		// The model's gibberish is mostly spaces between words: stop at the first space.
		const res = await openai(key.key).chat.completions.create({
			model: "engines/qwen",
			max_tokens: 64,
			stop: [" "],
			messages: [{ role: "user", content: m }],
		});
		expect(res.choices[0]?.message.content ?? "").not.toContain(" ");
		expect(res.choices[0]?.finish_reason).toBe("stop");
	});

	it("logprobs: one entry per token, top_logprobs as asked", async () => {
		const m = marker("logprobs");
		const res = await openai(key.key).chat.completions.create({
			model: "engines/qwen",
			max_tokens: 6,
			logprobs: true,
			top_logprobs: 2,
			messages: [{ role: "user", content: m }],
		});
		const content = res.choices[0]?.logprobs?.content ?? [];
		expect(content.length).toBe(res.usage?.completion_tokens);
		for (const t of content) {
			expect(t.logprob).toBeLessThanOrEqual(0);
			expect(t.top_logprobs).toHaveLength(2);
		}
	});

	it("response_format json_schema: llama.cpp's grammar makes the answer match the schema", async () => {
		const m = marker("json");
		const schema = {
			type: "object",
			properties: { ok: { type: "boolean" } },
			required: ["ok"],
			additionalProperties: false,
		};
		const res = await openai(key.key).chat.completions.create({
			model: "engines/qwen",
			max_tokens: 40,
			response_format: { type: "json_schema", json_schema: { name: "answer", schema, strict: true } },
			messages: [{ role: "user", content: m }],
		});
		const parsed = JSON.parse(res.choices[0]?.message.content ?? "") as { ok: unknown };
		expect(typeof parsed.ok).toBe("boolean");
	});

	it("tools with tool_choice required: a call of the offered function, billed as llama.cpp counted", async () => {
		const m = marker("tools");
		const tools = [
			{
				type: "function" as const,
				function: {
					name: "get_weather",
					parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris", "Oslo"] } }, required: ["city"] },
				},
			},
		];
		const body = {
			model: "engines/qwen",
			max_tokens: 60,
			tools,
			tool_choice: "required" as const,
			messages: [{ role: "user" as const, content: m }],
			logit_bias: TOOL_CALL_NUDGE,
		};
		const { data, response } = await openai(key.key).chat.completions.create(body).withResponse();
		const calls = data.choices[0]?.message.tool_calls ?? [];
		expect(calls.length).toBeGreaterThan(0);
		const call = calls[0];
		if (call?.type !== "function") throw new Error("no function call");
		expect(call.function.name).toBe("get_weather");
		// The arguments are the model's raw text: this random-weight model's are not always valid JSON
		// (llama.cpp relays them as generated; `tool_call_repair` is the gateway's answer to that).
		expect(call.function.arguments).toMatch(/^\s*\{/);
		// llama.cpp keeps generating after a complete call and may end on the token limit: `length`
		// with `tool_calls` present is its habit (../shared/engines/README.md), relayed as is.
		expect(["tool_calls", "length"]).toContain(data.choices[0]?.finish_reason);
		await expectBilledAsEngine(response.headers.get("x-request-id"), m);

		// The same through a stream: the call arrives in deltas and assembles the same way.
		const m2 = marker("tools-stream");
		const stream = await openai(key.key).chat.completions.create({
			...body,
			messages: [{ role: "user", content: m2 }],
			stream: true,
		});
		let name = "";
		let args = "";
		for await (const c of stream) {
			// The first call (the model may start another after it, cut by the token limit).
			for (const t of c.choices[0]?.delta.tool_calls ?? []) {
				if (t.index !== 0) continue;
				name += t.function?.name ?? "";
				args += t.function?.arguments ?? "";
			}
		}
		expect(name).toBe("get_weather");
		expect(args).toMatch(/^\s*\{/);
	});

	it("legacy completions: text choices and llama.cpp's counts, stream and not", async () => {
		const m = marker("legacy");
		const { data, response } = await openai(key.key)
			.completions.create({ model: "engines/qwen", prompt: `${m} once upon a time`, max_tokens: 10 })
			.withResponse();
		expect(data.object).toBe("text_completion");
		expect(typeof data.choices[0]?.text).toBe("string");
		await expectBilledAsEngine(response.headers.get("x-request-id"), m);

		const m2 = marker("legacy-stream");
		const { data: stream, response: r2 } = await openai(key.key)
			.completions.create({
				model: "engines/qwen",
				prompt: `${m2} once upon a time`,
				max_tokens: 10,
				stream: true,
				stream_options: { include_usage: true },
			})
			.withResponse();
		const chunks = [];
		for await (const c of stream) chunks.push(c);
		expect(chunks.filter((c) => c.usage)).toHaveLength(1);
		const { engine } = await expectBilledAsEngine(r2.headers.get("x-request-id"), m2);
		expect(chunks.at(-1)?.usage).toMatchObject({ prompt_tokens: engine.prompt, completion_tokens: engine.completion });
	});

	it("embeddings: vectors from the --embeddings server, billed on llama.cpp's prompt tokens", async () => {
		const m = marker("embed");
		const { data, response } = await openai(key.key)
			.embeddings.create({ model: "engines/embed", input: [`${m} first`, `${m} second text`] })
			.withResponse();
		expect(data.data.map((d) => d.index)).toEqual([0, 1]);
		expect(data.data[0]?.embedding.length).toBe(128);
		const row = await rowOf(response.headers.get("x-request-id"));
		const answers = await engineAnswers(stack().embed.url, m);
		const engineUsage = answers[0]?.usage;
		expect(engineUsage?.prompt_tokens).toBeGreaterThan(0);
		expect(row).toMatchObject({ prompt_tokens: engineUsage?.prompt_tokens, completion_tokens: 0, estimated: false });
		expect(data.usage.prompt_tokens).toBe(engineUsage?.prompt_tokens);
	});
});
