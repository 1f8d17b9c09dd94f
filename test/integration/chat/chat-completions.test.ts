/**
 * POST /v1/chat/completions through the gateway against the real fake engine: what the
 * engine receives, and what the client gets back, streaming and not.
 */
import { env } from "cloudflare:test";
import { beforeAll, describe, expect, it } from "vitest";
import { fleetConfig, gatewayWith, model, ownEngineUrl, requestIdOf, usageRecord } from "../../support/fleet";
import { chat, createKey, type EngineRequest, engineRequests, waitFor } from "../../support/gateway";

type Json = Record<string, unknown>;

let key: string;

beforeAll(async () => {
	key = (await createKey({ name: "chat", balance_usd: 100 })).key;
});

/** A word no other request contains, so this test finds its own engine calls among everyone's. */
function marker(): string {
	return `m${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
}

async function engineCallsWith(m: string): Promise<EngineRequest[]> {
	return (await engineRequests({ contains: m })).filter(
		(r) => r.path.endsWith("/chat/completions") && JSON.stringify(r.body).includes(m),
	);
}

/** The single engine call carrying `m`. */
async function engineCall(m: string): Promise<EngineRequest> {
	const calls = await waitFor(async () => {
		const c = await engineCallsWith(m);
		return c.length > 0 && c;
	});
	expect(calls).toHaveLength(1);
	return calls[0]!;
}

function user(text: string) {
	return [{ role: "user", content: text }];
}

async function completion(body: Json): Promise<Json> {
	const res = await chat(key, body);
	const json = (await res.json()) as Json;
	expect(res.status, JSON.stringify(json)).toBe(200);
	return json;
}

interface Sse {
	raw: string;
	/** Data payloads in order, as strings. */
	data: string[];
}

async function sse(res: Response): Promise<Sse> {
	const raw = await res.text();
	const data = raw
		.split(/\r?\n\r?\n/)
		.filter((f) => f.trim())
		.map((f) =>
			f
				.split(/\r?\n/)
				.filter((l) => l.startsWith("data:"))
				.map((l) => l.slice(5).replace(/^ /, ""))
				.join("\n"),
		);
	return { raw, data };
}

async function stream(body: Json): Promise<Sse> {
	const res = await chat(key, { stream: true, ...body });
	expect(res.status).toBe(200);
	expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
	return sse(res);
}

function chunksOf(s: Sse): Json[] {
	return s.data.filter((d) => d !== "[DONE]").map((d) => JSON.parse(d) as Json);
}

function textOf(chunks: Json[], field = "content"): string {
	let out = "";
	for (const c of chunks) {
		for (const choice of (c.choices as Array<{ delta?: Json }>) ?? []) {
			const v = choice.delta?.[field];
			if (typeof v === "string") out += v;
		}
	}
	return out;
}

describe("chat completions (non-stream)", () => {
	it("answers with the requested model id while the engine receives the engine model", async () => {
		const m = marker();
		const body = await completion({ model: "test/ok", messages: user(`hello ${m}`) });
		expect(body.object).toBe("chat.completion");
		expect(body.model).toBe("test/ok");
		const choice = (body.choices as Array<{ message: Json; finish_reason: string }>)[0]!;
		expect(choice.message.role).toBe("assistant");
		expect(choice.message.content).toBe(`Echo: hello ${m}`);
		const call = await engineCall(m);
		expect(call.body?.model).toBe("engine-ok");
		expect(call.scenario).toBe("ok");
	});

	it("never sends the venym object to the engine", async () => {
		const m = marker();
		await completion({ model: "test/ok", messages: user(m), venym: { search_results: 3 } });
		expect((await engineCall(m)).body).not.toHaveProperty("venym");
	});

	it("sends the model's max_output_tokens as max_tokens when the client sent no limit", async () => {
		const m = marker();
		await completion({ model: "test/ok", messages: user(m) });
		expect((await engineCall(m)).body?.max_tokens).toBe(1000);
	});

	it("caps a larger max_tokens at max_output_tokens", async () => {
		const m = marker();
		await completion({ model: "test/ok", messages: user(m), max_tokens: 100_000 });
		expect((await engineCall(m)).body?.max_tokens).toBe(1000);
	});

	it("keeps a smaller max_tokens", async () => {
		const m = marker();
		await completion({ model: "test/ok", messages: user(m), max_tokens: 3 });
		const call = await engineCall(m);
		expect(call.body?.max_tokens).toBe(3);
	});

	it("caps max_completion_tokens too", async () => {
		const m = marker();
		await completion({ model: "test/ok", messages: user(m), max_completion_tokens: 50_000 });
		const sent = (await engineCall(m)).body!;
		expect(sent.max_completion_tokens).toBe(1000);
		expect((sent.max_tokens as number | undefined) ?? 0).toBeLessThanOrEqual(1000);
	});

	it("clamps the output to the context left after the prompt", async () => {
		// test/small-context: context_length 300, max_output_tokens 5000.
		const m = marker();
		const prompt = `${m} ${"x".repeat(400 - m.length - 1)}`; // 400 characters ≈ 100 tokens
		await completion({ model: "test/small-context", messages: user(prompt), max_tokens: 4000 });
		const capped = (await engineCall(m)).body?.max_tokens as number;
		expect(capped).toBeLessThanOrEqual(200);
		expect(capped).toBeGreaterThan(150);

		const m2 = marker();
		await completion({ model: "test/small-context", messages: user(m2) });
		const uncapped = (await engineCall(m2)).body?.max_tokens as number;
		expect(uncapped).toBeLessThan(300);
		expect(uncapped).toBeGreaterThan(capped);
	});

	it("sends the node's own key and never the client's", async () => {
		const m = marker();
		await completion({ model: "test/ok", messages: user(m) });
		const call = await engineCall(m);
		expect(call.headers.authorization).toBe(`Bearer ${env.NODE_KEY}`);
		expect(call.headers.authorization).toBe("Bearer node-secret-abc");
		expect(JSON.stringify(call)).not.toContain(key);
		expect(JSON.stringify(call)).not.toContain("vk-");
	});

	it("sends no authorization to a node without api_key_env", async () => {
		const m = marker();
		await completion({ model: "test/nousage", messages: user(m) });
		const call = await engineCall(m);
		expect(call.headers.authorization).toBeUndefined();
		expect(JSON.stringify(call)).not.toContain(key);
	});

	it("returns the engine's usage", async () => {
		const m = marker();
		const body = await completion({ model: "test/ok", messages: user(`hi ${m}`) });
		// The fake engine counts ceil(prompt chars / 4) and one token per word.
		const prompt = Math.ceil(`hi ${m}`.length / 4);
		expect(body.usage).toMatchObject({ prompt_tokens: prompt, completion_tokens: 3, total_tokens: prompt + 3 });
	});

	it("estimates usage at about four characters a token when the engine sent none", async () => {
		const m = marker();
		const body = await completion({ model: "test/nousage", messages: user(`hello there ${m}`) });
		expect(body.model).toBe("test/nousage");
		const content = (body.choices as Array<{ message: { content: string } }>)[0]!.message.content;
		expect(content).toContain(m);
		const usage = body.usage as { prompt_tokens: number; completion_tokens: number; total_tokens: number };
		expect(usage.completion_tokens).toBe(Math.ceil(content.length / 4));
		expect(usage.prompt_tokens).toBeGreaterThanOrEqual(Math.ceil(`hello there ${m}`.length / 4));
		expect(usage.prompt_tokens).toBeLessThan(50);
		expect(usage.total_tokens).toBe(usage.prompt_tokens + usage.completion_tokens);
	});

	it("passes tool calls through", async () => {
		const m = marker();
		const tools = [
			{
				type: "function",
				function: {
					name: "lookup",
					description: "look it up",
					parameters: { type: "object", properties: { query: { type: "string" } } },
				},
			},
		];
		const body = await completion({ model: "test/ok", messages: user(m), tools, tool_choice: "auto" });
		const choice = (body.choices as Array<{ message: Json; finish_reason: string }>)[0]!;
		expect(choice.finish_reason).toBe("tool_calls");
		const calls = choice.message.tool_calls as Array<{ id: string; type: string; function: { name: string; arguments: string } }>;
		expect(calls).toHaveLength(1);
		expect(calls[0]!.type).toBe("function");
		expect(calls[0]!.function.name).toBe("lookup");
		expect(JSON.parse(calls[0]!.function.arguments)).toEqual({ query: m });
		const sent = (await engineCall(m)).body!;
		expect(sent.tools).toEqual(tools);
		expect(sent.tool_choice).toBe("auto");
	});

	it("accepts a tool result turn and an assistant turn without content", async () => {
		const m = marker();
		const body = await completion({
			model: "test/ok",
			messages: [
				{ role: "user", content: m },
				{ role: "assistant", tool_calls: [{ id: "call_1", type: "function", function: { name: "lookup", arguments: "{}" } }] },
				{ role: "tool", tool_call_id: "call_1", content: "42" },
			],
		});
		expect((body.choices as Array<{ message: { content: string } }>)[0]!.message.content).toBe("Tool said: 42");
	});

	it("passes the fields chat sends to the engine untouched, and drops OpenAI's platform-only ones", async () => {
		const m = marker();
		const extra = {
			temperature: 0.3,
			top_p: 0.8,
			seed: 1234,
			logprobs: true,
			top_logprobs: 2,
			n: 1,
			stop: ["\n\nUser:"],
			presence_penalty: 0.5,
			frequency_penalty: -0.25,
			logit_bias: { "1000": -100 },
			user: "end-user-7",
			response_format: {
				type: "json_schema",
				json_schema: { name: "x", strict: true, schema: { type: "object", properties: { a: { type: "string" } } } },
			},
			tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: {} } } }],
			tool_choice: "none",
			parallel_tool_calls: false,
			reasoning_effort: "low",
			chat_template_kwargs: { enable_thinking: false },
		};
		const dropped = { metadata: { tag: "t" }, store: true, service_tier: "auto", safety_identifier: "s", verbosity: "low" };
		const messages = [
			{ role: "developer", content: "be brief" },
			{ role: "user", content: [{ type: "text", text: m }] },
		];
		await completion({ model: "test/ok", messages, ...extra, ...dropped });
		const sent = (await engineCall(m)).body!;
		for (const [k, v] of Object.entries(extra)) expect(sent[k], k).toEqual(v);
		for (const k of Object.keys(dropped)) expect(sent, k).not.toHaveProperty(k);
		expect(sent.messages).toEqual(messages);
		expect(sent.model).toBe("engine-ok");
	});

	it("accepts the :online suffix and echoes it", async () => {
		const m = marker();
		const body = await completion({ model: "test/ok:online", messages: user(m) });
		expect(body.model).toBe("test/ok:online");
		expect((await engineCall(m)).body?.model).toBe("engine-ok");
	});
});

describe("chat completions (stream)", () => {
	const quirks = [
		"test/ok",
		"test/nousage",
		"test/cumulative",
		"test/finishusage",
		"test/comments",
		"test/slow",
		"test/reasoning",
	];

	it.each(quirks)("%s: every chunk names the gateway model, one usage chunk precedes [DONE]", async (model) => {
		const m = marker();
		const s = await stream({ model, messages: user(`hi ${m}`) });
		expect(s.data.at(-1)).toBe("[DONE]");
		expect(s.data.filter((d) => d === "[DONE]")).toHaveLength(1);
		expect(s.raw.endsWith("\n\n")).toBe(true);
		const chunks = chunksOf(s);
		expect(chunks.length).toBeGreaterThan(2);
		for (const c of chunks) {
			expect(c.model).toBe(model);
			expect(c.object).toBe("chat.completion.chunk");
			expect(c).not.toHaveProperty("error");
		}
		const withUsage = chunks.filter((c) => c.usage !== undefined && c.usage !== null);
		expect(withUsage).toHaveLength(1);
		const last = chunks.at(-1)!;
		expect(last.choices).toEqual([]);
		const usage = last.usage as { prompt_tokens: number; completion_tokens: number; total_tokens: number };
		expect(usage.prompt_tokens).toBeGreaterThan(0);
		expect(usage.completion_tokens).toBeGreaterThan(0);
		expect(usage.total_tokens).toBe(usage.prompt_tokens + usage.completion_tokens);
		// The answer is whole: it finished.
		expect(chunks.some((c) => (c.choices as Array<{ finish_reason?: string }>)[0]?.finish_reason === "stop")).toBe(true);
		expect(textOf(chunks).length).toBeGreaterThan(0);
		const call = await engineCall(m);
		expect(call.body?.stream).toBe(true);
		expect(call.body?.model).toBe(`engine-${model.slice("test/".length)}`);
	});

	it("streams the answer's text intact", async () => {
		const m = marker();
		const s = await stream({ model: "test/ok", messages: user(`hello there ${m}`) });
		expect(textOf(chunksOf(s))).toBe(`Echo: hello there ${m}`);
	});

	it("forces stream_options to include_usage at the engine, even when the client said false", async () => {
		for (const stream_options of [{ include_usage: false }, undefined, { include_usage: true }]) {
			const m = marker();
			const s = await stream({ model: "test/ok", messages: user(m), ...(stream_options ? { stream_options } : {}) });
			expect(chunksOf(s).at(-1)?.usage).toBeDefined();
			expect((await engineCall(m)).body?.stream_options).toEqual({ include_usage: true });
		}
	});

	it("reports the engine's usage as is", async () => {
		const m = marker();
		const s = await stream({ model: "test/ok", messages: user(`hi ${m}`) });
		const prompt = Math.ceil(`hi ${m}`.length / 4);
		expect(chunksOf(s).at(-1)?.usage).toMatchObject({ prompt_tokens: prompt, completion_tokens: 3, total_tokens: prompt + 3 });
	});

	it("takes the last cumulative usage, never a sum", async () => {
		const m = marker();
		const s = await stream({ model: "test/cumulative", messages: user(`hi ${m}`) });
		const chunks = chunksOf(s);
		const words = textOf(chunks).split(/\s+/).filter(Boolean).length;
		const prompt = Math.ceil(`hi ${m}`.length / 4);
		expect(chunks.at(-1)?.usage).toMatchObject({ prompt_tokens: prompt, completion_tokens: words, total_tokens: prompt + words });
	});

	it("moves usage from the finish chunk to the final usage chunk", async () => {
		const m = marker();
		const s = await stream({ model: "test/finishusage", messages: user(`hi ${m}`) });
		const chunks = chunksOf(s);
		const prompt = Math.ceil(`hi ${m}`.length / 4);
		expect(chunks.at(-1)?.usage).toMatchObject({ prompt_tokens: prompt, completion_tokens: 3 });
		expect(chunks.at(-1)?.choices).toEqual([]);
	});

	it("estimates usage when the engine streams none", async () => {
		const m = marker();
		const s = await stream({ model: "test/nousage", messages: user(`hi ${m}`) });
		const chunks = chunksOf(s);
		const text = textOf(chunks);
		expect(text).toBe(`Echo: hi ${m}`);
		const usage = chunks.at(-1)?.usage as { prompt_tokens: number; completion_tokens: number; total_tokens: number };
		expect(usage.completion_tokens).toBe(Math.ceil(text.length / 4));
		expect(usage.prompt_tokens).toBeGreaterThan(0);
		expect(usage.total_tokens).toBe(usage.prompt_tokens + usage.completion_tokens);
	});

	it("forwards no engine comments and keeps multibyte text intact", async () => {
		const m = marker();
		const s = await stream({ model: "test/comments", messages: user(`hi ${m}`) });
		for (const line of s.raw.split(/\r?\n/)) {
			expect(line === "" || line.startsWith("data: "), JSON.stringify(line)).toBe(true);
		}
		expect(s.raw).not.toContain("ping");
		const text = textOf(chunksOf(s));
		expect(text).toContain("héllo 👋 世界");
		expect(text).not.toContain("\uFFFD");
	});

	it("passes reasoning through", async () => {
		const m = marker();
		const s = await stream({ model: "test/reasoning", messages: user(`hi ${m}`) });
		expect(textOf(chunksOf(s), "reasoning")).toBe("Thinking about it.");
	});

	it("streams tool calls", async () => {
		const m = marker();
		const s = await stream({
			model: "test/ok",
			messages: user(m),
			tools: [{ type: "function", function: { name: "lookup", parameters: { type: "object", properties: {} } } }],
		});
		const chunks = chunksOf(s);
		let args = "";
		let name = "";
		for (const c of chunks) {
			for (const choice of (c.choices as Array<{
				delta?: { tool_calls?: Array<{ function?: { name?: string; arguments?: string } }> };
			}>) ?? []) {
				for (const tc of choice.delta?.tool_calls ?? []) {
					name += tc.function?.name ?? "";
					args += tc.function?.arguments ?? "";
				}
			}
		}
		expect(name).toBe("lookup");
		expect(JSON.parse(args)).toEqual({ query: m });
		expect(s.data.at(-1)).toBe("[DONE]");
	});

	it.each(["test/midstream", "test/midflat", "test/cut"])(
		"%s: an engine failure ends with an error frame and no [DONE]",
		async (model) => {
			const m = marker();
			const s = await stream({ model, messages: user(`hi ${m}`) });
			expect(s.data).not.toContain("[DONE]");
			const chunks = chunksOf(s);
			// What arrived before the failure was forwarded.
			expect(textOf(chunks).length).toBeGreaterThan(0);
			const last = chunks.at(-1)!;
			const error = last.error as Json;
			expect(error).toBeDefined();
			expect(typeof error.message).toBe("string");
			expect(error).toHaveProperty("type");
			expect(error).toHaveProperty("code");
			expect(error).toHaveProperty("param");
			expect(chunks.filter((c) => c.error !== undefined)).toHaveLength(1);
			for (const c of chunks.slice(0, -1)) expect(c.model).toBe(model);
		},
	);
});

describe("a non-stream answer over the size cap", () => {
	const engine = ownEngineUrl("chat-size-cap");
	const node = (scenario?: string) => (scenario ? `${engine}/s/${scenario}/v1` : `${engine}/v1`);
	const gateway = gatewayWith(fleetConfig([model("big", [node()], { context_length: 10_000_000, max_output_tokens: 10_000 })]));

	it("bills what the engine processed when the assembled answer outgrows MAX_ASSEMBLED_CHARS", async () => {
		// The dev engine echoes the prompt's words, in every one of n (≤ 8) choices: 1,100 words of
		// 1,000 characters × n = 8 is 8.8 M characters, over the 8 Mi cap. The gateway answers 502
		// and settles NO_USAGE: the ~275k-token prompt and 8,800 generated tokens cost nothing, so a
		// client can burn prefill and decode for free by asking for more than the cap (large n, long output).
		const word = "a".repeat(999);
		const prompt = `${marker()} ${Array(1100).fill(word).join(" ")}`;
		const a = await gateway.chat(key, { model: "big", n: 8, messages: [{ role: "user", content: prompt }] });
		expect(a.res.status).toBe(502);
		const record = await usageRecord(requestIdOf(a));
		expect(record.prompt_tokens).toBeGreaterThan(0);
		expect(record.cost_nanos).toBeGreaterThan(0);
	});
});
