/**
 * Codex CLI on the Responses lane: its first request replayed as captured, namespace and custom
 * tool calls in the shapes it reads, the stateless reasoning round trip (sealed, opened, given to
 * the engine), and money equal to the same prompt on chat.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { MAX_OPENED_SEALS } from "../../../src/responses/reasoning-round-trip";
import codexFirstRequest from "../../fixtures/codex-first-request.json";
import { chat, createKey, engineRequestsSince, gw, lastEngineId, readSse, waitFor } from "../../support/gateway";

type Json = Record<string, unknown>;
type Item = Json & { type: string };

function post(key: string, body: Json, headers: Record<string, string> = {}): Promise<Response> {
	return gw("/v1/responses", {
		method: "POST",
		headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
		body: JSON.stringify(body),
	});
}

/** The final response of a Responses stream. */
async function streamed(res: Response): Promise<{ output: Item[]; events: Json[] }> {
	const events = (await readSse(res)).map((d) => JSON.parse(d) as Json);
	const last = events.at(-1) as { type: string; response: { output: Item[] } };
	expect(last.type).toBe("response.completed");
	return { output: last.response.output, events };
}

async function spent(keyId: string): Promise<number> {
	const ledger = env.LEDGER.get(env.LEDGER.idFromName(keyId));
	const info = await waitFor(async () => {
		const i = await ledger.info();
		return i.openHolds === 0 ? i : null;
	});
	return info.spentNanos;
}

const EXEC = {
	type: "function",
	name: "exec_command",
	description: "Runs a command.",
	strict: false,
	parameters: { type: "object", properties: { cmd: { type: "string" } }, required: ["cmd"] },
};
const NAMESPACE = {
	type: "namespace",
	name: "multi_agent_v1",
	description: "Sub-agents.",
	tools: [{ type: "function", name: "spawn_agent", parameters: { type: "object", properties: {} } }],
};
const CUSTOM = { type: "custom", name: "apply_patch", description: "Apply a patch." };
const INCLUDE = ["reasoning.encrypted_content"];

describe("Codex's first request, replayed", () => {
	it("answers 200 as a stream; its cached-only web_search is dropped, searched for nothing, billed nothing", async () => {
		const { key } = await createKey();
		const since = await lastEngineId();
		// Codex's default tool: {"type": "web_search", "external_web_access": false}, OpenAI's cached
		// index only. The gateway's live backend is not that: no search runs on every turn.
		const res = await post(key, { ...codexFirstRequest, model: "test/codex" });
		expect(res.status).toBe(200);
		expect(res.headers.get("x-venym-ignored-tools")).toBe("web_search");
		expect(res.headers.get("x-venym-web-search")).toBeNull();
		const { output, events } = await streamed(res);
		expect(output.map((i) => i.type)).toEqual(["reasoning", "message"]);
		expect(output[0]?.encrypted_content).toMatch(/^v1\./);
		const sent = await engineRequestsSince(since);
		expect(sent.map((r) => r.path).filter((p) => p.endsWith("/search"))).toEqual([]);
		const body = sent.find((r) => r.path.endsWith("/chat/completions"))?.body as Json;
		expect(body).not.toHaveProperty("client_metadata");
		expect(body.prompt_cache_key).toBe(codexFirstRequest.prompt_cache_key);
		expect(body.parallel_tool_calls).toBe(true);
		expect(JSON.stringify(events)).not.toContain("web_search_call");
	});

	it("answers 200 as a stream, a live web_search offered to the engine and run when it calls it", async () => {
		const { key } = await createKey();
		const tools = codexFirstRequest.tools.map((t) =>
			t.type === "web_search" ? { type: "web_search", external_web_access: true } : t,
		);
		const ask = (text: string) => {
			const input = codexFirstRequest.input.slice(0, -1);
			return post(key, {
				...codexFirstRequest,
				input: [...input, { type: "message", role: "user", content: [{ type: "input_text", text }] }],
				tools,
				model: "test/codex",
			});
		};
		// "say hello" needs no search: the model answers, nothing is searched.
		let since = await lastEngineId();
		const hello = await ask("say hello");
		expect(hello.status).toBe(200);
		// The only hosted tool is web_search, which this deployment serves: nothing is ignored.
		expect(hello.headers.get("x-venym-ignored-tools")).toBeNull();
		expect(hello.headers.get("x-venym-web-search")).toBeNull();
		expect((await streamed(hello)).output.map((i) => i.type)).toEqual(["reasoning", "message"]);
		const sent = (await engineRequestsSince(since)).filter((r) => r.path.endsWith("/chat/completions"));
		expect(sent).toHaveLength(1);
		const body = sent[0]?.body as Json;
		expect(body).not.toHaveProperty("client_metadata");
		expect(body.prompt_cache_key).toBe(codexFirstRequest.prompt_cache_key);
		expect(body.parallel_tool_calls).toBe(true);
		const names = (body.tools as Array<{ function: { name: string } }>).map((t) => t.function.name);
		expect(names).toContain("multi_agent_v1__close_agent");
		expect(names.at(-1)).toBe("web_search");

		// Asked to search, the model calls it: the gateway searches and asks it again.
		since = await lastEngineId();
		const search = await ask("search the tides");
		// The stream starts before the search ran: how it went is in the web_search_call item.
		expect(search.headers.get("x-venym-web-search")).toBeNull();
		const { output } = await streamed(search);
		expect(output.map((i) => i.type)).toEqual(["web_search_call", "reasoning", "message"]);
		expect(output[0]).toMatchObject({ status: "completed", action: { type: "search", query: "search the tides" } });
		expect(output[1]?.encrypted_content).toMatch(/^v1\./);
		expect(JSON.stringify(output[2])).toContain("According to [1]");
		const calls = (await engineRequestsSince(since)).map((r) => r.path);
		expect(calls.filter((p) => p.endsWith("/search"))).toHaveLength(1);
		expect(calls.filter((p) => p.endsWith("/chat/completions"))).toHaveLength(2);
	});

	it("names every tool it drops in x-venym-ignored-tools, readable cross-origin, stream or not", async () => {
		const { key } = await createKey();
		const tools = [...codexFirstRequest.tools, { type: "local_shell" }, { type: "file_search", vector_store_ids: ["vs_1"] }];
		for (const stream of [true, false]) {
			const res = await post(
				key,
				{ ...codexFirstRequest, model: "test/codex", tools, stream },
				{ origin: "https://app.example" },
			);
			expect(res.status).toBe(200);
			expect(res.headers.get("x-venym-ignored-tools")).toBe("web_search,local_shell,file_search");
			expect(res.headers.get("access-control-expose-headers")).toContain("x-venym-ignored-tools");
			await res.body?.cancel();
		}
	});

	it("keeps x-venym-ignored-tools short however many tools are dropped", async () => {
		const { key } = await createKey();
		const tools = Array.from({ length: 3000 }, (_, i) => ({ type: "local_shell", name: `${i}_${"n".repeat(60)}` }));
		const res = await post(key, { model: "test/ok", input: "hi", tools, store: false });
		expect(res.status).toBe(200);
		const header = res.headers.get("x-venym-ignored-tools") ?? "";
		expect(header.length).toBeLessThanOrEqual(4096);
		const labels = header.split(",");
		expect(labels[0]).toBe(`local_shell:0_${"n".repeat(60)}`);
		// The rest are counted, not listed.
		expect(labels.at(-1)).toBe(`+${3000 - (labels.length - 1)}`);
		await res.body?.cancel();
	});

	it("still refuses a malformed function tool, naming it", async () => {
		const { key } = await createKey();
		const tools = [...codexFirstRequest.tools, { type: "function", name: "x", parameters: "nope" }];
		const res = await post(key, { ...codexFirstRequest, model: "test/codex", tools });
		expect(res.status).toBe(400);
		expect(((await res.json()) as { error: { param: string } }).error.param).toBe(`tools[${tools.length - 1}].parameters`);
	});
});

describe("tool calls in the shape of the tool offered", () => {
	const base = { model: "test/ok", input: "do it", tools: [EXEC, NAMESPACE, CUSTOM], store: false };

	for (const stream of [false, true]) {
		it(`a namespace's function and a custom tool (${stream ? "stream" : "JSON"})`, async () => {
			const { key } = await createKey();
			const since = await lastEngineId();
			const nsRes = await post(key, {
				...base,
				stream,
				tool_choice: { type: "function", name: "spawn_agent", namespace: "multi_agent_v1" },
			});
			const customRes = await post(key, { ...base, stream, tool_choice: { type: "custom", name: "apply_patch" } });
			const outputs = await Promise.all(
				[nsRes, customRes].map(async (r) =>
					stream ? (await streamed(r)).output : ((await r.json()) as { output: Item[] }).output,
				),
			);
			const [nsCall] = outputs[0]?.filter((i) => i.type !== "reasoning") ?? [];
			expect(nsCall).toMatchObject({ type: "function_call", name: "spawn_agent", namespace: "multi_agent_v1" });
			const [customCall] = outputs[1]?.filter((i) => i.type !== "reasoning") ?? [];
			expect(customCall).toMatchObject({ type: "custom_tool_call", name: "apply_patch", input: expect.any(String) });
			expect(customCall).not.toHaveProperty("arguments");
			// The engine saw each under its flat name.
			const choices = (await engineRequestsSince(since)).map((r) => (r.body as Json).tool_choice);
			expect(choices).toEqual(
				expect.arrayContaining([
					{ type: "function", function: { name: "multi_agent_v1__spawn_agent" } },
					{ type: "function", function: { name: "apply_patch" } },
				]),
			);
		});
	}

	it("offers a namespace's long names within 64 characters, and maps the call and its replay back", async () => {
		const { key } = await createKey();
		const [ns, fn] = ["n".repeat(64), "f".repeat(64)];
		const tools = [{ type: "namespace", name: ns, tools: [{ type: "function", name: fn, parameters: { type: "object" } }] }];
		const since = await lastEngineId();
		const res = await post(key, { model: "test/ok", input: "do it", tools, tool_choice: "required", store: false });
		expect(res.status).toBe(200);
		const call = ((await res.json()) as { output: Item[] }).output.find((i) => i.type === "function_call") as Item;
		expect(call).toMatchObject({ name: fn, namespace: ns });
		const [first] = await engineRequestsSince(since);
		const offeredTools = (first?.body?.tools ?? []) as Array<{ function: { name: string } }>;
		const offered = offeredTools[0]?.function.name ?? "";
		expect(offered.length).toBeLessThanOrEqual(64);
		const again = await lastEngineId();
		const replay = await post(key, {
			model: "test/ok",
			tools,
			store: false,
			input: [{ role: "user", content: "do it" }, call, { type: "function_call_output", call_id: call.call_id, output: "ok" }],
		});
		expect(replay.status).toBe(200);
		const messages = (await engineRequestsSince(again))[0]?.body?.messages as Array<{
			tool_calls?: Array<{ function: { name: string } }>;
		}>;
		expect(messages.find((m) => m.tool_calls)?.tool_calls?.[0]?.function.name).toBe(offered);
	});

	it("takes the calls and their outputs back in a stateless history", async () => {
		const { key } = await createKey();
		const since = await lastEngineId();
		const res = await post(key, {
			...base,
			input: [
				{ type: "message", role: "developer", content: [{ type: "input_text", text: "Be brief." }] },
				{ type: "message", role: "user", content: [{ type: "input_text", text: "do it" }] },
				{ type: "web_search_call", id: "ws_other", status: "completed", action: { type: "search", query: "q" } },
				{
					type: "function_call",
					id: "fc_other",
					call_id: "c1",
					name: "spawn_agent",
					namespace: "multi_agent_v1",
					arguments: "{}",
				},
				{ type: "function_call_output", call_id: "c1", output: [{ type: "input_text", text: "spawned" }] },
				{ type: "custom_tool_call", id: "ctc_other", call_id: "c2", name: "apply_patch", input: "PATCH" },
				{ type: "custom_tool_call_output", call_id: "c2", output: "applied" },
			],
		});
		expect(res.status).toBe(200);
		const messages = (await engineRequestsSince(since))[0]?.body?.messages as Json[];
		expect(messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "tool", "assistant", "tool"]);
		expect(messages[2]?.tool_calls).toEqual([
			{ id: "c1", type: "function", function: { name: "multi_agent_v1__spawn_agent", arguments: "{}" } },
		]);
		expect(messages[4]?.tool_calls).toEqual([
			{ id: "c2", type: "function", function: { name: "apply_patch", arguments: '{"input":"PATCH"}' } },
		]);
		expect(
			messages
				.slice(3)
				.filter((m) => m.role === "tool")
				.map((m) => m.content),
		).toEqual(["spawned", "applied"]);
	});
});

describe("tool_choice", () => {
	it("is not sent to the engine when no tool reaches it (vLLM refuses tool_choice without tools)", async () => {
		const { key } = await createKey();
		const since = await lastEngineId();
		for (const [tools, choice] of [
			[[{ type: "local_shell" }], "auto"],
			[[{ type: "local_shell" }, { type: "file_search" }], "required"],
			[[], "auto"],
		] as const) {
			const res = await post(key, {
				model: "test/ok",
				input: "hi",
				tools,
				tool_choice: choice,
				parallel_tool_calls: true,
				store: false,
			});
			expect(res.status).toBe(200);
		}
		const bodies = (await engineRequestsSince(since)).map((r) => r.body as Json);
		expect(bodies).toHaveLength(3);
		for (const body of bodies) {
			expect(body).not.toHaveProperty("tools");
			expect(body).not.toHaveProperty("tool_choice");
			expect(body).not.toHaveProperty("parallel_tool_calls");
		}
	});

	it("naming a tool the request does not offer is a 400 naming tool_choice, before the engine", async () => {
		const { key } = await createKey();
		const since = await lastEngineId();
		for (const choice of [
			{ type: "function", name: "nope" },
			{ type: "custom", name: "apply_patch_2" },
			{ type: "function", name: "spawn_agent", namespace: "other_ns" },
			{ type: "function", name: "local_shell" },
		]) {
			const res = await post(key, {
				model: "test/ok",
				input: "hi",
				tools: [EXEC, NAMESPACE, CUSTOM, { type: "local_shell" }],
				tool_choice: choice,
				store: false,
			});
			expect(res.status).toBe(400);
			const error = ((await res.json()) as { error: { param: string; message: string } }).error;
			expect(error.param).toBe("tool_choice");
			expect(error.message).toContain(choice.name);
		}
		expect(await engineRequestsSince(since)).toHaveLength(0);
	});
});

describe("the reasoning round trip", () => {
	const ask = { input: "Run echo hi", tools: [EXEC], store: false, include: INCLUDE };

	/** Turn 1 (a call to exec_command with sealed reasoning), then turn 2 sending it all back with the tool's output. */
	async function twoTurns(model: string, reseal: (sealed: string) => string = (s) => s, stream = false) {
		const { key } = await createKey();
		const first = await post(key, { model, ...ask, stream });
		expect(first.status).toBe(200);
		const output = stream ? (await streamed(first)).output : ((await first.json()) as { output: Item[] }).output;
		const reasoning = output.find((i) => i.type === "reasoning") as Item;
		const call = output.find((i) => i.type === "function_call") as Item;
		const since = await lastEngineId();
		const history = [
			{ type: "message", role: "user", content: "Run echo hi" },
			{ ...reasoning, encrypted_content: reseal(String(reasoning.encrypted_content)) },
			call,
			{ type: "function_call_output", call_id: call.call_id, output: "hi" },
		];
		const second = await post(key, { model, ...ask, input: history });
		expect(second.status).toBe(200);
		const answer = (await second.json()) as { output: Item[] };
		const sent = (await engineRequestsSince(since))[0]?.body?.messages as Json[];
		return { reasoning, sent: sent.find((m) => m.role === "assistant") as Json, answer };
	}

	it("seals the engine's reasoning, and gives it back to the engine as reasoning_content", async () => {
		const { reasoning, sent, answer } = await twoTurns("test/codex");
		expect(reasoning.encrypted_content).toMatch(/^v1\./);
		expect(String(reasoning.encrypted_content)).not.toContain("plan");
		expect(sent.reasoning_content).toBe("I plan the next step.");
		const text = JSON.stringify(answer.output);
		expect(text).toContain("Tool said: hi. Reasoning received: I plan the next step.");
	});

	it("seals in a stream too, on the item's done event and in the final response", async () => {
		const { reasoning, sent } = await twoTurns("test/codex", undefined, true);
		expect(reasoning.encrypted_content).toMatch(/^v1\./);
		expect(sent.reasoning_content).toBe("I plan the next step.");
	});

	it("drops reasoning whose seal does not open, and answers all the same", async () => {
		const tamper = (s: string) => `${s.slice(0, -3)}${s.at(-3) === "A" ? "B" : "A"}${s.slice(-2)}`;
		const { sent, answer } = await twoTurns("test/codex", tamper);
		expect(sent).not.toHaveProperty("reasoning_content");
		expect(JSON.stringify(answer.output)).toContain("Tool said: hi.");
		expect(JSON.stringify(answer.output)).not.toContain("Reasoning received");
	});

	it("opens at most MAX_OPENED_SEALS seals a request, the most recent ones", async () => {
		const { key } = await createKey({ balance_usd: 50 });
		const first = await post(key, { model: "test/codex", ...ask });
		const reasoning = ((await first.json()) as { output: Item[] }).output.find((i) => i.type === "reasoning") as Item;
		const turns = MAX_OPENED_SEALS + 20;
		const input: Json[] = [{ type: "message", role: "user", content: "go on" }];
		for (let i = 0; i < turns; i++) input.push(reasoning, { type: "message", role: "assistant", content: `step ${i}` });
		input.push({ type: "message", role: "user", content: "done?" });
		const since = await lastEngineId();
		const res = await post(key, { model: "test/codex", input, store: false });
		expect(res.status).toBe(200);
		const sent = (await engineRequestsSince(since))[0]?.body?.messages as Json[];
		const assistants = sent.filter((m) => m.role === "assistant");
		expect(assistants).toHaveLength(turns);
		const opened = assistants.map((m) => m.reasoning_content === "I plan the next step.");
		expect(opened.filter(Boolean)).toHaveLength(MAX_OPENED_SEALS);
		expect(opened.slice(-MAX_OPENED_SEALS).every(Boolean)).toBe(true);
	});

	it("gives no reasoning back to a model without the reasoning capability", async () => {
		const { reasoning, sent } = await twoTurns("test/codex-plain");
		expect(reasoning.encrypted_content).toMatch(/^v1\./);
		expect(sent).not.toHaveProperty("reasoning_content");
	});

	it("seals nothing unless asked with include", async () => {
		const { key } = await createKey();
		const res = await post(key, { model: "test/codex", ...ask, include: [] });
		const reasoning = ((await res.json()) as { output: Item[] }).output.find((i) => i.type === "reasoning");
		expect(reasoning?.content).toBeTruthy();
		expect(reasoning).not.toHaveProperty("encrypted_content");
	});
});

describe("GET /v1/models", () => {
	it("gives the context window under Codex's name, beside the output cap", async () => {
		const { key } = await createKey();
		const res = await gw("/v1/models/test/codex", { headers: { authorization: `Bearer ${key}` } });
		expect(await res.json()).toMatchObject({ context_length: 200_000, context_window: 200_000, max_output_tokens: 1000 });
	});

	it("gives them under Anthropic's Models API names too, on a list the Anthropic SDK pages", async () => {
		const { key } = await createKey();
		const res = await gw("/v1/models", { headers: { "x-api-key": key } });
		const list = (await res.json()) as { has_more: boolean; data: Array<Record<string, unknown>> };
		expect(list.has_more).toBe(false);
		expect(list.data.find((m) => m.id === "test/codex")).toMatchObject({ max_input_tokens: 200_000, max_tokens: 1000 });
	});
});

describe("money", () => {
	it("a Codex turn costs what the same prompt costs on chat", async () => {
		const responsesKey = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		// Without web_search, which chat would not search for either.
		const tools = codexFirstRequest.tools.filter((t) => t.type !== "web_search");
		const res = await post(responsesKey.key, { ...codexFirstRequest, model: "test/codex", tools, stream: false });
		expect(res.status).toBe(200);
		const engineBody = (await engineRequestsSince(since))[0]?.body as Json;
		const chatKey = await createKey({ balance_usd: 5 });
		const { stream_options: _, ...chatBody } = engineBody;
		const chatRes = await chat(chatKey.key, { ...chatBody, model: "test/codex", stream: false });
		expect(chatRes.status).toBe(200);
		expect(res.headers.get("x-venym-cost-usd")).toBe(chatRes.headers.get("x-venym-cost-usd"));
		const [a, b] = [await spent(responsesKey.id), await spent(chatKey.id)];
		expect(a).toBeGreaterThan(0);
		expect(a).toBe(b);
	});
});
