// The official `openai` SDK against the real gateway (wrangler dev, local D1 and Durable
// Objects) and the development engine: what an SDK user sees on the wire, end to end.
import OpenAI from "openai";
import type { ChatCompletionChunk } from "openai/resources/chat/completions";
import { beforeAll, describe, expect, it } from "vitest";
import { testGatewayConfig } from "../support/test-config";
import { createKey, engineRequestsWith, marker, openaiClient, usageFor, waitFor } from "./support";

let client: OpenAI;

beforeAll(async () => {
	client = openaiClient((await createKey({ name: "e2e-sdk", balance_usd: 50 })).key);
});

const MULTIBYTE = "héllo 👋 世界";

const user = (content: string) => [{ role: "user" as const, content }];

async function collect(stream: AsyncIterable<ChatCompletionChunk>): Promise<ChatCompletionChunk[]> {
	const chunks: ChatCompletionChunk[] = [];
	for await (const chunk of stream) chunks.push(chunk);
	return chunks;
}

const textOf = (chunks: ChatCompletionChunk[]) => chunks.map((c) => c.choices[0]?.delta.content ?? "").join("");

/** The rejection of `p`, failing the test when it resolves. */
async function rejection(p: Promise<unknown>): Promise<unknown> {
	try {
		await p;
	} catch (err) {
		return err;
	}
	throw new Error("expected the call to fail, but it succeeded");
}

/** Shape every streamed answer must have: gateway model on every chunk, one usage chunk last. */
function expectWellFormedStream(chunks: ChatCompletionChunk[], model: string) {
	expect(chunks.length).toBeGreaterThan(2);
	for (const chunk of chunks) {
		expect(chunk.object).toBe("chat.completion.chunk");
		expect(chunk.model).toBe(model);
	}
	const last = chunks.at(-1)!;
	expect(last.choices).toEqual([]);
	expect(last.usage).toBeTruthy();
	const usage = last.usage!;
	expect(usage.prompt_tokens).toBeGreaterThan(0);
	expect(usage.completion_tokens).toBeGreaterThan(0);
	expect(usage.total_tokens).toBe(usage.prompt_tokens + usage.completion_tokens);
	// Exactly one usage chunk: the others carry none (OpenAI sends null there).
	for (const chunk of chunks.slice(0, -1)) expect(chunk.usage ?? null).toBeNull();
	expect(chunks.some((c) => c.choices[0]?.finish_reason === "stop")).toBe(true);
	return usage;
}

describe("chat completions through the openai SDK", () => {
	it("non-stream: requested model id, content, usage and gateway headers", async () => {
		const { data, response } = await client.chat.completions
			.create({ model: "test/ok", messages: user("say hi please") })
			.withResponse();
		expect(data.object).toBe("chat.completion");
		expect(data.model).toBe("test/ok");
		expect(data.choices[0]?.message.role).toBe("assistant");
		expect(data.choices[0]?.message.content).toBe("Echo: say hi please");
		expect(data.choices[0]?.finish_reason).toBe("stop");
		expect(data.usage).toBeTruthy();
		expect(data.usage!.prompt_tokens).toBeGreaterThan(0);
		expect(data.usage!.completion_tokens).toBe(4);
		expect(data.usage!.total_tokens).toBe(data.usage!.prompt_tokens + data.usage!.completion_tokens);

		const requestId = response.headers.get("x-request-id");
		expect(requestId).toBeTruthy();
		// openai-node puts the id on the object it returns, outside its declared type.
		expect((data as typeof data & { _request_id?: string })._request_id).toBe(requestId);
		const cost = Number(response.headers.get("x-venym-cost-usd"));
		expect(Number.isFinite(cost)).toBe(true);
		expect(cost).toBeGreaterThan(0);
	});

	it("stream: every chunk names the gateway model, text assembles, usage chunk comes last", async () => {
		const stream = await client.chat.completions.create({ model: "test/ok", messages: user("stream this back"), stream: true });
		const chunks = await collect(stream);
		expect(textOf(chunks)).toBe("Echo: stream this back");
		expect(chunks[0]?.choices[0]?.delta.role).toBe("assistant");
		const usage = expectWellFormedStream(chunks, "test/ok");
		expect(usage.completion_tokens).toBe(4);
	});

	it("stream: engine comments and awkward splits do not break multibyte text (test/comments)", async () => {
		const stream = await client.chat.completions.create({ model: "test/comments", messages: user("greet me"), stream: true });
		const chunks = await collect(stream);
		expect(textOf(chunks)).toBe(`Echo: greet me ${MULTIBYTE}`);
		expectWellFormedStream(chunks, "test/comments");
	});

	it("stream: cumulative engine usage is reported once, as the engine's last figure (test/cumulative)", async () => {
		const stream = await client.chat.completions.create({
			model: "test/cumulative",
			messages: user("count my words"),
			stream: true,
		});
		const chunks = await collect(stream);
		expect(textOf(chunks)).toBe("Echo: count my words");
		const usage = expectWellFormedStream(chunks, "test/cumulative");
		expect(usage.completion_tokens).toBe(4);
	});

	it("stream: usage is still present when the engine sends none (test/nousage)", async () => {
		const stream = await client.chat.completions.create({ model: "test/nousage", messages: user("no usage here"), stream: true });
		const chunks = await collect(stream);
		expect(textOf(chunks)).toBe("Echo: no usage here");
		expectWellFormedStream(chunks, "test/nousage");
	});

	it("stream helper: tool-call deltas assemble into finalChatCompletion()", async () => {
		const runner = client.chat.completions.stream({
			model: "test/ok",
			messages: user("weather in Paris"),
			tools: [
				{
					type: "function",
					function: {
						name: "lookup_weather",
						description: "Looks the weather up",
						parameters: { type: "object", properties: { query: { type: "string" } }, required: ["query"] },
					},
				},
			],
		});
		const argumentsDone: Array<{ name: string; arguments: string }> = [];
		runner.on("tool_calls.function.arguments.done", (e) => argumentsDone.push({ name: e.name, arguments: e.arguments }));
		const final = await runner.finalChatCompletion();

		expect(final.model).toBe("test/ok");
		expect(final.choices[0]?.finish_reason).toBe("tool_calls");
		const call = final.choices[0]?.message.tool_calls?.[0];
		expect(call?.type).toBe("function");
		if (call?.type !== "function") throw new Error("expected a function tool call");
		expect(call.id).toBeTruthy();
		expect(call.function.name).toBe("lookup_weather");
		expect(JSON.parse(call.function.arguments)).toEqual({ query: "weather in Paris" });
		expect(argumentsDone).toEqual([{ name: "lookup_weather", arguments: call.function.arguments }]);
		expect(final.usage?.completion_tokens).toBeGreaterThan(0);
	});

	it("stream helper: content events and finalContent()", async () => {
		const runner = client.chat.completions.stream({ model: "test/comments", messages: user("tell me") });
		const deltas: string[] = [];
		let snapshot = "";
		runner.on("content", (delta, snap) => {
			deltas.push(delta);
			snapshot = snap;
		});
		const content = await runner.finalContent();
		const expected = `Echo: tell me ${MULTIBYTE}`;
		expect(content).toBe(expected);
		expect(deltas.join("")).toBe(expected);
		expect(snapshot).toBe(expected);
		const final = await runner.finalChatCompletion();
		expect(final.model).toBe("test/comments");
		expect(final.usage?.total_tokens).toBeGreaterThan(0);
	});
});

describe("deferred tools and venym_tool_search through the openai SDK", () => {
	const params = { type: "object", properties: {} };
	const deferred = { name: "CronList", description: "List the scheduled cron jobs", parameters: params };

	it("chat: the engine finds the deferred tool with the gateway's search and calls it; the next turn answers", async () => {
		const client = openaiClient((await createKey({ name: "sdk-tool-search" })).key);
		const tools = [{ type: "function", function: deferred, defer_loading: true }] as unknown as OpenAI.ChatCompletionTool[];
		const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: marker("tool-search") }];
		const first = await client.chat.completions.create({ model: "test/deferred-tool", max_tokens: 100, messages, tools });
		const call = first.choices[0]?.message.tool_calls?.[0] as OpenAI.ChatCompletionMessageFunctionToolCall;
		expect(call.function.name).toBe("CronList");
		expect(JSON.stringify(first)).not.toContain("venym_tool_search");
		messages.push(first.choices[0]?.message as OpenAI.ChatCompletionMessageParam);
		messages.push({ role: "tool", tool_call_id: call.id, content: "No jobs." });
		const second = await client.chat.completions.create({ model: "test/deferred-tool", max_tokens: 100, messages, tools });
		expect(second.choices[0]?.message.content).toBe("Tool said: No jobs.");
	});

	it("Responses: a deferred function tool is found and called, the search not shown", async () => {
		const client = openaiClient((await createKey({ name: "sdk-tool-search-responses" })).key);
		const tools = [{ type: "function", ...deferred, strict: false, defer_loading: true }] as unknown as OpenAI.Responses.Tool[];
		const response = await client.responses.create({
			model: "test/deferred-tool",
			max_output_tokens: 100,
			input: marker("ts"),
			tools,
		});
		expect(response.output).toMatchObject([{ type: "function_call", name: "CronList" }]);
		expect(JSON.stringify(response)).not.toContain("venym_tool_search");
	});
});

describe("errors arrive as typed SDK exceptions", () => {
	it("bad key → AuthenticationError 401 invalid_api_key", async () => {
		const bad = openaiClient("vk-not-a-real-key-0000000000000000");
		const err = await rejection(bad.chat.completions.create({ model: "test/ok", messages: user("hi") }));
		expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
		const e = err as InstanceType<typeof OpenAI.AuthenticationError>;
		expect(e.status).toBe(401);
		expect(e.code).toBe("invalid_api_key");
	});

	it("unknown model → NotFoundError model_not_found", async () => {
		const err = await rejection(client.chat.completions.create({ model: "test/does-not-exist", messages: user("hi") }));
		expect(err).toBeInstanceOf(OpenAI.NotFoundError);
		const e = err as InstanceType<typeof OpenAI.NotFoundError>;
		expect(e.status).toBe(404);
		expect(e.code).toBe("model_not_found");
	});

	it("invalid body → BadRequestError with param", async () => {
		const empty = await rejection(client.chat.completions.create({ model: "test/ok", messages: [] }));
		expect(empty).toBeInstanceOf(OpenAI.BadRequestError);
		expect((empty as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("messages");
		expect((empty as InstanceType<typeof OpenAI.BadRequestError>).type).toBe("invalid_request_error");

		const noContent = await rejection(
			client.chat.completions.create({ model: "test/ok", messages: [{ role: "user" } as never] }),
		);
		expect(noContent).toBeInstanceOf(OpenAI.BadRequestError);
		expect((noContent as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("messages[0].content");
	});

	it("engine 400 → BadRequestError with the engine's message, not retried", async () => {
		const m = marker("bad400");
		const err = await rejection(client.chat.completions.create({ model: "test/refuses", messages: user(m) }));
		expect(err).toBeInstanceOf(OpenAI.BadRequestError);
		const e = err as InstanceType<typeof OpenAI.BadRequestError>;
		expect(e.status).toBe(400);
		expect(e.message).toContain("This model's maximum context length is 4096 tokens");
		expect((await engineRequestsWith(m)).map((r) => r.scenario)).toEqual(["bad400"]);
	});

	it("every node down → InternalServerError 502 upstream_unavailable", async () => {
		const err = await rejection(client.chat.completions.create({ model: "test/all-down", messages: user("anyone?") }));
		expect(err).toBeInstanceOf(OpenAI.InternalServerError);
		const e = err as InstanceType<typeof OpenAI.InternalServerError>;
		expect(e.status).toBe(502);
		expect(e.code).toBe("upstream_unavailable");
	});

	for (const model of ["test/midstream", "test/cut"]) {
		it(`a stream that fails mid-way makes iteration throw an APIError (${model})`, async () => {
			const stream = await client.chat.completions.create({ model, messages: user("long answer please"), stream: true });
			const received: ChatCompletionChunk[] = [];
			const err = await rejection(
				(async () => {
					for await (const chunk of stream) received.push(chunk);
				})(),
			);
			expect(err).toBeInstanceOf(OpenAI.APIError);
			expect(err).not.toBeInstanceOf(OpenAI.APIConnectionError);
			expect((err as InstanceType<typeof OpenAI.APIError>).error).toBeTruthy();
			// Some of the answer got through before the failure, and it was not passed off as complete.
			expect(textOf(received).length).toBeGreaterThan(0);
			expect(received.some((c) => c.choices[0]?.finish_reason)).toBe(false);
			for (const chunk of received) expect(chunk.model).toBe(model);
		});
	}

	it("zero balance → 402 insufficient_balance", async () => {
		const broke = openaiClient((await createKey({ name: "e2e-broke", balance_usd: 0 })).key);
		const err = await rejection(broke.chat.completions.create({ model: "test/ok", messages: user("free lunch?") }));
		expect(err).toBeInstanceOf(OpenAI.APIError);
		const e = err as InstanceType<typeof OpenAI.APIError>;
		expect(e.status).toBe(402);
		expect(e.code).toBe("insufficient_balance");
	});
});

describe("client abort mid-stream", () => {
	it("aborting the SDK stream aborts the engine request and settles as client_disconnected", async () => {
		const created = await createKey({ name: "e2e-abort", balance_usd: 5 });
		const aborter = openaiClient(created.key);
		const m = marker("abort");
		const stream = await aborter.chat.completions.create({
			model: "test/slow",
			messages: user(`count slowly ${m}`),
			stream: true,
		});
		let seen = 0;
		try {
			for await (const _chunk of stream) {
				seen++;
				if (seen === 3) stream.controller.abort();
			}
		} catch (err) {
			// Depending on timing the SDK ends the loop quietly or reports the user abort.
			expect(err).toBeInstanceOf(OpenAI.APIUserAbortError);
		}
		// test/slow sends 40 words 50 ms apart: stopping here means the stream really ended.
		expect(seen).toBeLessThan(10);

		const engineRequest = await waitFor(
			async () => {
				const [r] = await engineRequestsWith(m);
				if (r?.finished) throw new Error("the engine finished the whole answer: the abort never reached it");
				return r?.aborted ? r : undefined;
			},
			5000,
			"engine request aborted",
		);
		expect(engineRequest.scenario).toBe("slow");

		const record = await waitFor(
			async () => (await usageFor(created.id)).find((u) => u.status === "client_disconnected"),
			8000,
			"usage record with status client_disconnected",
		);
		expect(record.model).toBe("test/slow");
	});
});

describe("models through the openai SDK", () => {
	it("models.list() returns the catalog ids", async () => {
		const page = await client.models.list();
		const ids = page.data.map((m) => m.id);
		expect(ids).toEqual(testGatewayConfig("http://unused").models.map((m) => m.id));
		for (const m of page.data) expect(m.object).toBe("model");
	});

	it("models.retrieve() works with a slash in the id (URL-encoded by the SDK)", async () => {
		const model = await client.models.retrieve("test/ok");
		expect(model.id).toBe("test/ok");
		expect(model.object).toBe("model");
		expect((model as unknown as { max_output_tokens: number }).max_output_tokens).toBe(1000);
	});
});
