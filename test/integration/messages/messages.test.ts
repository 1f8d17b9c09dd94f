/**
 * POST /v1/messages (Anthropic Messages) through the gateway against the development engine:
 * the chat body the engine receives, the Anthropic message and events the client gets, the money
 * (the same hold, settlement and usage record as chat, with `lane: "messages"`), and every error
 * class in Anthropic's shape.
 */
import { describe, expect, it } from "vitest";
import { admin, type CreatedKey, chat, createKey, type EngineRequest, engineRequests, gw, waitFor } from "../../support/gateway";
import { flushUsage, ledger } from "../../support/ledger";

type Json = Record<string, unknown>;

function marker(): string {
	return `m${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
}

function messages(key: string, body: Json, headers: Record<string, string> = {}, path = "/v1/messages"): Promise<Response> {
	return gw(path, {
		method: "POST",
		headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json", ...headers },
		body: JSON.stringify(body),
	});
}

async function engineCall(m: string): Promise<EngineRequest> {
	const calls = await waitFor(async () => {
		const c = (await engineRequests({ contains: m })).filter((r) => r.path.endsWith("/chat/completions"));
		return c.length > 0 && c;
	});
	expect(calls).toHaveLength(1);
	return calls[0] as EngineRequest;
}

interface UsageRow {
	request_id: string;
	model: string;
	prompt_tokens: number;
	completion_tokens: number;
	cost_nanos: number;
	status: string;
	lane: string | null;
}

async function usageOf(key: CreatedKey, requestId: string): Promise<UsageRow> {
	return waitFor(async () => {
		await flushUsage(ledger(key.id));
		const page = (await (await admin(`/usage?key_id=${key.id}`)).json()) as { data: UsageRow[] };
		return page.data.find((r) => r.request_id === requestId);
	}, 10_000);
}

interface Event {
	event: string;
	data: Json;
}

/** An Anthropic SSE body as its events, checking that each `event:` names its data's `type`. */
async function eventsOf(res: Response): Promise<Event[]> {
	const text = await res.text();
	return text
		.split("\n\n")
		.filter((f) => f.trim())
		.map((f) => {
			const lines = f.split("\n");
			const event = (lines.find((l) => l.startsWith("event: ")) ?? "").slice(7);
			const data = JSON.parse((lines.find((l) => l.startsWith("data: ")) ?? "").slice(6)) as Json;
			expect(data.type).toBe(event);
			return { event, data };
		});
}

function errorOf(json: unknown): { type: string; error: { type: string; message: string }; request_id: string } {
	return json as { type: string; error: { type: string; message: string }; request_id: string };
}

describe("POST /v1/messages", () => {
	it("translates the request for the engine and answers an Anthropic message", async () => {
		const key = await createKey({ name: "messages-basic", balance_usd: 10 });
		const m = marker();
		const res = await messages(key.key, {
			model: "test/ok",
			max_tokens: 32_000,
			system: [{ type: "text", text: "Be brief.", cache_control: { type: "ephemeral" } }],
			messages: [{ role: "user", content: [{ type: "text", text: `hello ${m}` }] }],
			stop_sequences: ["STOP"],
			temperature: 0.5,
			metadata: { user_id: "user-1" },
			context_management: { edits: [] },
			some_future_beta: true,
		});
		const body = (await res.json()) as Json;
		expect(res.status, JSON.stringify(body)).toBe(200);
		expect(body).toMatchObject({
			type: "message",
			role: "assistant",
			model: "test/ok",
			content: [{ type: "text", text: `Echo: hello ${m}` }],
			stop_reason: "end_turn",
			stop_sequence: null,
		});
		expect(String(body.id)).toMatch(/^msg_/);
		expect(res.headers.get("x-venym-ignored-fields")).toBe("some_future_beta");
		expect(res.headers.get("request-id")).toBe(res.headers.get("x-request-id"));

		const call = await engineCall(m);
		expect(call.body).toMatchObject({
			model: "engine-ok",
			// Never refused for being large: capped at the model's max_output_tokens.
			max_tokens: 1000,
			messages: [
				{ role: "system", content: "Be brief." },
				{ role: "user", content: `hello ${m}` },
			],
			stop: ["STOP"],
			temperature: 0.5,
			user: "user-1",
		});
		for (const dropped of ["context_management", "some_future_beta", "system", "metadata", "stop_sequences"]) {
			expect(call.body).not.toHaveProperty(dropped);
		}

		const usage = body.usage as Json;
		const row = await usageOf(key, res.headers.get("x-request-id") as string);
		expect(row).toMatchObject({ lane: "messages", status: "completed", model: "test/ok" });
		expect(usage).toEqual({
			input_tokens: row.prompt_tokens,
			output_tokens: row.completion_tokens,
			cache_read_input_tokens: 0,
			cache_creation_input_tokens: 0,
		});
	});

	it("bills exactly what chat bills for the same tokens", async () => {
		const key = await createKey({ name: "messages-billing", balance_usd: 10 });
		const text = `same words ${marker()}`;
		const viaMessages = await messages(key.key, {
			model: "test/ok",
			max_tokens: 50,
			messages: [{ role: "user", content: text }],
		});
		expect(viaMessages.status).toBe(200);
		const viaChat = await chat(key.key, { model: "test/ok", max_tokens: 50, messages: [{ role: "user", content: text }] });
		expect(viaChat.status).toBe(200);
		const a = await usageOf(key, viaMessages.headers.get("x-request-id") as string);
		const b = await usageOf(key, viaChat.headers.get("x-request-id") as string);
		expect(a.lane).toBe("messages");
		expect(b.lane).toBe("chat");
		expect(a.prompt_tokens).toBe(b.prompt_tokens);
		expect(a.completion_tokens).toBe(b.completion_tokens);
		expect(a.cost_nanos).toBe(b.cost_nanos);
		expect(a.cost_nanos).toBeGreaterThan(0);
		expect(viaMessages.headers.get("x-venym-cost-usd")).toBe(viaChat.headers.get("x-venym-cost-usd"));
	});

	it("streams Anthropic's events in order and bills the stream", async () => {
		const key = await createKey({ name: "messages-stream", balance_usd: 10 });
		const m = marker();
		const res = await messages(key.key, {
			model: "test/ok",
			max_tokens: 100,
			stream: true,
			messages: [{ role: "user", content: `stream ${m}` }],
		});
		expect(res.status).toBe(200);
		expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
		const events = await eventsOf(res);
		const names = events.map((e) => e.event);
		expect(names[0]).toBe("message_start");
		expect(names[1]).toBe("ping");
		expect(names.slice(2, 3)).toEqual(["content_block_start"]);
		expect(names.slice(-3)).toEqual(["content_block_stop", "message_delta", "message_stop"]);
		const start = events[0]?.data.message as Json;
		expect(start).toMatchObject({ model: "test/ok", role: "assistant", content: [] });
		expect((start.usage as Json).input_tokens).toBeGreaterThan(0);
		const text = events
			.filter((e) => e.event === "content_block_delta")
			.map((e) => (e.data.delta as { text: string }).text)
			.join("");
		expect(text).toBe(`Echo: stream ${m}`);
		const delta = events.at(-2)?.data as { delta: Json; usage: Json };
		expect(delta.delta).toEqual({ stop_reason: "end_turn", stop_sequence: null });
		const row = await usageOf(key, res.headers.get("x-request-id") as string);
		expect(row).toMatchObject({ lane: "messages", status: "completed" });
		expect(delta.usage).toMatchObject({ input_tokens: row.prompt_tokens, output_tokens: row.completion_tokens });
	});

	it("runs a tool round trip: tool_use with an object input, then the tool_result answered", async () => {
		const key = await createKey({ name: "messages-tools", balance_usd: 10 });
		const tools = [
			{ name: "Bash", description: "Runs a command", input_schema: { type: "object", properties: { command: {} } } },
		];
		const m = marker();
		const ask = { role: "user", content: `list files ${m}` };
		const first = await messages(key.key, { model: "test/tool-loop", max_tokens: 200, tools, messages: [ask] });
		const turn = (await first.json()) as { content: Array<Json>; stop_reason: string };
		expect(first.status, JSON.stringify(turn)).toBe(200);
		expect(turn.stop_reason).toBe("tool_use");
		const use = turn.content.find((b) => b.type === "tool_use") as { id: string; name: string; input: Json };
		expect(use).toMatchObject({ name: "Bash", input: { command: "echo hi" } });
		const call = await engineCall(m);
		expect(call.body?.tools).toEqual([
			{ type: "function", function: { name: "Bash", description: "Runs a command", parameters: tools[0]?.input_schema } },
		]);

		const second = await messages(key.key, {
			model: "test/tool-loop",
			max_tokens: 200,
			stream: true,
			tools,
			messages: [
				ask,
				{ role: "assistant", content: turn.content },
				{ role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: [{ type: "text", text: "hi" }] }] },
			],
		});
		const events = await eventsOf(second);
		const answer = events
			.filter((e) => e.event === "content_block_delta")
			.map((e) => (e.data.delta as { text: string }).text)
			.join("");
		expect(answer).toBe("Tool said: hi");
		expect(events.at(-1)?.event).toBe("message_stop");
		const calls = (await engineRequests({ contains: m })).filter((r) => r.path.endsWith("/chat/completions"));
		const replayed = calls.at(-1)?.body?.messages as Json[];
		expect(replayed.slice(1)).toEqual([
			{
				role: "assistant",
				content: null,
				tool_calls: [{ id: use.id, type: "function", function: { name: "Bash", arguments: JSON.stringify(use.input) } }],
			},
			{ role: "tool", tool_call_id: use.id, content: "hi" },
		]);
	});

	it("streams a tool call as a tool_use block with input_json_delta", async () => {
		const key = await createKey({ name: "messages-tool-stream", balance_usd: 10 });
		const res = await messages(key.key, {
			model: "test/tool-loop",
			max_tokens: 200,
			stream: true,
			tools: [{ name: "Bash", input_schema: { type: "object" } }],
			messages: [{ role: "user", content: `go ${marker()}` }],
		});
		const events = await eventsOf(res);
		const start = events.find((e) => e.event === "content_block_start")?.data.content_block as Json;
		expect(start).toMatchObject({ type: "tool_use", name: "Bash", input: {} });
		const json = events
			.filter((e) => e.event === "content_block_delta")
			.map((e) => e.data.delta as { type: string; partial_json: string });
		expect(json.every((d) => d.type === "input_json_delta")).toBe(true);
		expect(JSON.parse(json.map((d) => d.partial_json).join(""))).toEqual({ command: "echo hi", description: "Print hi" });
		expect(events.find((e) => e.event === "message_delta")?.data.delta).toMatchObject({ stop_reason: "tool_use" });
	});

	it("turns thinking on with the engine's reasoning switch and answers thinking blocks", async () => {
		const key = await createKey({ name: "messages-thinking", balance_usd: 10 });
		const m = marker();
		const res = await messages(key.key, {
			model: "test/ok",
			max_tokens: 100,
			thinking: { type: "enabled", budget_tokens: 2048 },
			messages: [{ role: "user", content: `think ${m}` }],
		});
		const body = (await res.json()) as { content: Json[] };
		expect(res.status).toBe(200);
		expect(body.content[0]).toMatchObject({ type: "thinking", thinking: "Thinking about it." });
		expect(typeof body.content[0]?.signature).toBe("string");
		expect(body.content[1]).toMatchObject({ type: "text" });
		const call = await engineCall(m);
		expect(call.body).toMatchObject({ chat_template_kwargs: { enable_thinking: true }, reasoning_effort: "low" });

		const streamed = await messages(key.key, {
			model: "test/ok",
			max_tokens: 100,
			stream: true,
			thinking: { type: "adaptive" },
			messages: [{ role: "user", content: `think again ${marker()}` }],
		});
		const events = await eventsOf(streamed);
		const blocks = events.filter((e) => e.event === "content_block_start").map((e) => (e.data.content_block as Json).type);
		expect(blocks).toEqual(["thinking", "text"]);
		const deltas = events.filter((e) => e.event === "content_block_delta").map((e) => (e.data.delta as Json).type);
		expect(deltas.indexOf("signature_delta")).toBe(deltas.lastIndexOf("thinking_delta") + 1);
	});

	it("ends a stream whose engine fails with an error event, never message_stop", async () => {
		const key = await createKey({ name: "messages-midstream", balance_usd: 10 });
		const res = await messages(key.key, {
			model: "test/midstream",
			max_tokens: 100,
			stream: true,
			messages: [{ role: "user", content: `fail ${marker()}` }],
		});
		const events = await eventsOf(res);
		expect(events.at(-1)?.event).toBe("error");
		expect(events.at(-1)?.data.error).toMatchObject({ type: "api_error" });
		expect(events.map((e) => e.event)).not.toContain("message_stop");
	});

	it("runs the gateway's web search for a :online model id, its sources on the message", async () => {
		const key = await createKey({ name: "messages-online", balance_usd: 10 });
		const res = await messages(key.key, {
			model: "test/ok:online",
			max_tokens: 100,
			messages: [{ role: "user", content: `search ${marker()}` }],
		});
		const body = (await res.json()) as { model: string; content: Array<{ text: string }>; venym: { sources: unknown[] } };
		expect(res.status).toBe(200);
		expect(res.headers.get("x-venym-web-search")).toBe("ok");
		expect(body.model).toBe("test/ok:online");
		expect(body.content[0]?.text).toMatch(/^According to \[1\]/);
		expect(body.venym.sources.length).toBeGreaterThan(0);
	});

	it("accepts Authorization: Bearer and a query string", async () => {
		const key = await createKey({ name: "messages-bearer", balance_usd: 10 });
		const res = await gw("/v1/messages?beta=true", {
			method: "POST",
			headers: { authorization: `Bearer ${key.key}`, "content-type": "application/json", "anthropic-beta": "x" },
			body: JSON.stringify({ model: "test/ok", max_tokens: 10, messages: [{ role: "user", content: "hi" }] }),
		});
		expect(res.status).toBe(200);
	});
});

describe("Messages errors in Anthropic's shape", () => {
	async function expectError(res: Response, status: number, type: string): Promise<string> {
		const body = errorOf(await res.json());
		expect({ status: res.status, type: body.type, errorType: body.error.type }).toEqual({
			status,
			type: "error",
			errorType: type,
		});
		expect(body.request_id).toBe(res.headers.get("x-request-id"));
		return body.error.message;
	}
	const ask = (model = "test/ok", extra: Json = {}) => ({
		model,
		max_tokens: 20,
		messages: [{ role: "user", content: `err ${marker()}` }],
		...extra,
	});

	it("400 invalid_request_error: max_tokens missing, a wrong type, a server tool", async () => {
		const key = await createKey({ name: "messages-400", balance_usd: 10 });
		const { max_tokens: _, ...noMax } = ask();
		expect(await expectError(await messages(key.key, noMax), 400, "invalid_request_error")).toMatch(/max_tokens/);
		expect(
			await expectError(await messages(key.key, ask("test/ok", { temperature: "hot" })), 400, "invalid_request_error"),
		).toMatch(/temperature/);
		const search = ask("test/ok", { tools: [{ type: "web_search_20250305", name: "web_search" }] });
		expect(await expectError(await messages(key.key, search), 400, "invalid_request_error")).toMatch(/:online/);
		// Engine internals are refused here too (the one list every lane applies), not ignored.
		for (const field of ["n_predict", "priority", "vllm_xargs"]) {
			const res = await messages(key.key, ask("test/ok", { [field]: 5 }));
			expect(await expectError(res, 400, "invalid_request_error")).toContain(field);
		}
		const counted = await messages(key.key, { ...ask(), n_predict: 9 }, {}, "/v1/messages/count_tokens");
		expect(await expectError(counted, 400, "invalid_request_error")).toContain("n_predict");
	});

	it("401 authentication_error, 402 billing_error, 403 permission_error, 404 not_found_error", async () => {
		await expectError(await messages("vk-nope", ask()), 401, "authentication_error");
		const empty = await createKey({ name: "messages-402", balance_usd: 0 });
		await expectError(await messages(empty.key, ask()), 402, "billing_error");
		const scoped = await createKey({ name: "messages-403", balance_usd: 10, allowed_models: ["test/slow"] });
		await expectError(await messages(scoped.key, ask()), 403, "permission_error");
		const key = await createKey({ name: "messages-404", balance_usd: 10 });
		await expectError(await messages(key.key, ask("test/none")), 404, "not_found_error");
		await expectError(await gw("/v1/messages/nothing", { headers: { "x-api-key": key.key } }), 404, "not_found_error");
	});

	it("413 request_too_large and 429 rate_limit_error with retry-after", async () => {
		const key = await createKey({ name: "messages-413", balance_usd: 10, rpm: 1 });
		await expectError(await messages(key.key, ask("test/ok", { system: "x".repeat(5 * 1024 * 1024) })), 413, "request_too_large");
		expect((await messages(key.key, ask())).status).toBe(200);
		const limited = await messages(key.key, ask());
		await expectError(limited, 429, "rate_limit_error");
		expect(Number(limited.headers.get("retry-after"))).toBeGreaterThan(0);
	});

	it("502 api_error, 504 timeout_error, 529 overloaded_error when every node is busy", async () => {
		const key = await createKey({ name: "messages-5xx", balance_usd: 10 });
		await expectError(await messages(key.key, ask("test/all-down")), 502, "api_error");
		await expectError(await messages(key.key, ask("test/all-hang")), 504, "timeout_error");
		const busy = await messages(key.key, ask("test/all-busy"));
		await expectError(busy, 529, "overloaded_error");
		expect(busy.headers.get("retry-after")).not.toBeNull();
	});

	it("keeps OpenAI's shape on the other lanes", async () => {
		const res = await chat("vk-nope", { model: "test/ok", messages: [{ role: "user", content: "hi" }] });
		expect(((await res.json()) as { error: { code: string } }).error.code).toBe("invalid_api_key");
	});
});

describe("POST /v1/messages/count_tokens", () => {
	it("counts with the node's tokenizer, free and unrecorded", async () => {
		const key = await createKey({ name: "messages-count", balance_usd: 10 });
		const m = marker();
		const res = await messages(
			key.key,
			{ model: "test/ok", system: "sys", messages: [{ role: "user", content: `count ${m}` }] },
			{},
			"/v1/messages/count_tokens",
		);
		const body = (await res.json()) as { input_tokens: number };
		expect(res.status, JSON.stringify(body)).toBe(200);
		expect(res.headers.get("x-venym-token-count")).toBe("engine");
		const tokenized = (await engineRequests({ contains: m })).filter((r) => r.path === "/tokenize");
		expect(tokenized).toHaveLength(1);
		// The development engine counts ceil(chars / 4) + 3 a message.
		const chars = "sys".length + `count ${m}`.length;
		expect(body).toEqual({ input_tokens: Math.ceil(chars / 4) + 6 });
		const info = await ledger(key.id).info();
		expect(info).toMatchObject({ spentNanos: 0, heldNanos: 0 });
	});

	it("falls back to the gateway's estimate when the node cannot count", async () => {
		const key = await createKey({ name: "messages-count-est", balance_usd: 10 });
		const res = await messages(
			key.key,
			{ model: "test/all-down", messages: [{ role: "user", content: "12345678" }] },
			{},
			"/v1/messages/count_tokens",
		);
		expect(res.status).toBe(200);
		expect(res.headers.get("x-venym-token-count")).toBe("estimate");
		// 8 characters ≈ 2 tokens, plus 4 for the message.
		expect(await res.json()).toEqual({ input_tokens: 6 });
	});
});

describe("CORS for Anthropic browser clients", () => {
	it("allows Anthropic's headers on a preflight", async () => {
		const res = await gw("/v1/messages", {
			method: "OPTIONS",
			headers: {
				origin: "https://app.example",
				"access-control-request-method": "POST",
				"access-control-request-headers":
					"x-api-key, anthropic-version, anthropic-beta, anthropic-dangerous-direct-browser-access, content-type",
			},
		});
		expect(res.status).toBeLessThan(300);
		const allowed = (res.headers.get("access-control-allow-headers") ?? "").split(/,\s*/);
		expect(allowed).toEqual(
			expect.arrayContaining(["x-api-key", "anthropic-version", "anthropic-beta", "anthropic-dangerous-direct-browser-access"]),
		);
	});
});
