import { describe, expect, it } from "vitest";
import type { GatewayConfig } from "../../../src/config";
import { responseFromCompletion } from "../../../src/responses/from-chat";
import { hostedSearchTool, searchItem } from "../../../src/responses/hosted-search";
import { validateResponsesRequest } from "../../../src/responses/request-schema";
import { ResponsesEventBuilder } from "../../../src/responses/stream-events";
import { inputItems, responsesToChat } from "../../../src/responses/to-chat";
import { callItem, chatTools, ignoredTools, toolOrigins } from "../../../src/responses/tools";
import codexFirstRequest from "../../fixtures/codex-first-request.json";
import { responseMeta } from "../../support/response-meta";

type Json = Record<string, unknown>;

const NAMESPACE = {
	type: "namespace",
	name: "multi_agent_v1",
	description: "Sub-agents.",
	tools: [{ type: "function", name: "spawn_agent", description: "Spawn one.", parameters: { type: "object", properties: {} } }],
};
const CUSTOM = {
	type: "custom",
	name: "apply_patch",
	description: "Apply a patch.",
	format: { type: "grammar", syntax: "lark", definition: "start: PATCH" },
};
const FUNCTION = { type: "function", name: "exec_command", parameters: { type: "object" } };
const TOOLS = [FUNCTION, NAMESPACE, CUSTOM, { type: "web_search", external_web_access: false }, { type: "local_shell" }];

function request(body: Json) {
	return validateResponsesRequest({ model: "m", input: "Hi", ...body });
}

function chatBody(body: Json): Json {
	const req = request(body);
	return responsesToChat({ ...req, input: [] }, inputItems(req, () => "id") as never);
}

function completion(calls: Array<{ name: string; arguments: string }>): Json {
	const tool_calls = calls.map((c, i) => ({ id: `call_${i}`, type: "function", function: c }));
	return {
		choices: [{ index: 0, message: { role: "assistant", content: null, tool_calls }, finish_reason: "tool_calls" }],
		usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
	};
}

describe("Codex's first request", () => {
	it("validates as sent: namespace, hosted web_search, developer messages, client_metadata", () => {
		const req = validateResponsesRequest(codexFirstRequest);
		expect(req.tools?.map((t) => t.type)).toContain("namespace");
		expect(req.client_metadata).toBeTruthy();
		const body = responsesToChat({ ...req, input: [] }, inputItems(req, () => "id") as never);
		// client_metadata and include stay here; the cache key goes on (affinity), and parallel_tool_calls.
		expect(body).not.toHaveProperty("client_metadata");
		expect(body).not.toHaveProperty("include");
		expect(body.prompt_cache_key).toBe(codexFirstRequest.prompt_cache_key);
		expect(body.parallel_tool_calls).toBe(true);
		const messages = body.messages as Json[];
		expect(messages.slice(0, 2).map((m) => m.role)).toEqual(["system", "system"]);
		const names = (body.tools as Array<{ function: { name: string } }>).map((t) => t.function.name);
		expect(names).toContain("multi_agent_v1__spawn_agent");
		expect(names).not.toContain("multi_agent_v1");
		// Codex's web_search asks for the cached index only (external_web_access: false): never served.
		expect(ignoredTools(req.tools, false)).toEqual(["web_search"]);
		expect(ignoredTools(req.tools, true)).toEqual(["web_search"]);
		const live = req.tools?.map((t) => (t.type === "web_search" ? { type: "web_search" } : t)) as typeof req.tools;
		expect(ignoredTools(live, true)).toEqual([]);
	});
});

describe("tools offered → chat functions", () => {
	it("flattens a namespace, gives a custom tool one string argument, drops hosted types", () => {
		const tools = chatTools(request({ tools: TOOLS }).tools ?? []);
		expect(tools).toEqual([
			{ type: "function", function: { name: "exec_command", parameters: { type: "object" } } },
			{
				type: "function",
				function: {
					name: "multi_agent_v1__spawn_agent",
					description: "Spawn one.",
					parameters: { type: "object", properties: {} },
				},
			},
			{
				type: "function",
				function: {
					name: "apply_patch",
					description: "Apply a patch.\n\nThe input must follow this lark grammar:\nstart: PATCH",
					parameters: {
						type: "object",
						properties: { input: { type: "string", description: "The tool's whole input, as free text." } },
						required: ["input"],
						additionalProperties: false,
					},
				},
			},
		]);
	});

	it("names every dropped tool, by type and name", () => {
		const req = request({ tools: [...TOOLS, { type: "file_search", vector_store_ids: [] }, { type: "mcp", name: "x y" }] });
		expect(ignoredTools(req.tools, false)).toEqual(["web_search", "local_shell", "file_search", "mcp:x_y"]);
		expect(ignoredTools(req.tools, true)).toEqual(["web_search", "local_shell", "file_search", "mcp:x_y"]);
	});

	it("points tool_choice at a namespace's function or a custom tool by its engine name", () => {
		const ns = chatBody({ tools: TOOLS, tool_choice: { type: "function", name: "spawn_agent", namespace: "multi_agent_v1" } });
		expect(ns.tool_choice).toEqual({ type: "function", function: { name: "multi_agent_v1__spawn_agent" } });
		const custom = chatBody({ tools: TOOLS, tool_choice: { type: "custom", name: "apply_patch" } });
		expect(custom.tool_choice).toEqual({ type: "function", function: { name: "apply_patch" } });
	});
});

describe("engine calls → output items", () => {
	const origins = toolOrigins(request({ tools: TOOLS }).tools);

	it("a namespace's function comes back with its own name and its namespace", () => {
		expect(callItem(origins, "fc_1", "call_1", "multi_agent_v1__spawn_agent", "{}", "completed")).toEqual({
			id: "fc_1",
			type: "function_call",
			status: "completed",
			arguments: "{}",
			call_id: "call_1",
			name: "spawn_agent",
			namespace: "multi_agent_v1",
		});
	});

	it("a custom tool comes back as custom_tool_call with its input (bare input too)", () => {
		const item = callItem(origins, "fc_2", "call_2", "apply_patch", JSON.stringify({ input: "*** Begin Patch" }), "completed");
		expect(item).toEqual({
			id: "fc_2",
			type: "custom_tool_call",
			status: "completed",
			call_id: "call_2",
			name: "apply_patch",
			input: "*** Begin Patch",
		});
		expect(callItem(origins, "fc_3", "call_3", "apply_patch", "raw text", "completed")).toMatchObject({ input: "raw text" });
	});

	it("a plain function, or a name the request never offered, stays a function_call", () => {
		const item = callItem(origins, "fc_4", "call_4", "exec_command", '{"cmd":"ls"}', "completed");
		expect(item).toEqual({
			id: "fc_4",
			type: "function_call",
			status: "completed",
			arguments: '{"cmd":"ls"}',
			call_id: "call_4",
			name: "exec_command",
		});
	});

	it("the JSON answer and the stream end with the same namespace and custom items", () => {
		const meta = () => responseMeta({ tools: TOOLS, stream: true });
		const calls = [
			{ name: "multi_agent_v1__spawn_agent", arguments: "{}" },
			{ name: "apply_patch", arguments: '{"input":"*** Begin Patch"}' },
		];
		const whole = responseFromCompletion(completion(calls), meta());
		expect(whole.output.map((i) => i.type)).toEqual(["function_call", "custom_tool_call"]);
		const builder = new ResponsesEventBuilder(meta());
		const deltas = calls.map((c, index) => ({
			choices: [{ index: 0, delta: { tool_calls: [{ index, id: `call_${index}`, type: "function", function: c }] } }],
		}));
		const events = [
			...builder.start(),
			...deltas.flatMap((d) => builder.chunk(d)),
			...builder.chunk({ choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] }),
			...builder.chunk({ choices: [], usage: completion([]).usage }),
			...builder.finish(),
		];
		expect(builder.response().output).toEqual(whole.output);
		const types = events.map((e) => e.type);
		expect(types).toContain("response.custom_tool_call_input.done");
		// A custom tool's input is never streamed as JSON arguments.
		const argDeltas = events.filter((e) => e.type === "response.function_call_arguments.delta");
		expect(argDeltas.every((e) => (e as { output_index: number }).output_index === 0)).toBe(true);
		const done = events.find((e) => e.type === "response.custom_tool_call_input.done") as unknown as { input: string };
		expect(done.input).toBe("*** Begin Patch");
	});
});

describe("earlier turns → chat messages", () => {
	it("replays namespaced and custom calls under their engine names, with their outputs", () => {
		const body = chatBody({
			tools: TOOLS,
			input: [
				{ role: "developer", content: "Be brief." },
				{ role: "user", content: "Go" },
				{ type: "web_search_call", id: "ws_1", status: "completed", action: { type: "search", query: "q" } },
				{ type: "function_call", call_id: "c1", name: "spawn_agent", namespace: "multi_agent_v1", arguments: "{}" },
				{ type: "custom_tool_call", call_id: "c2", name: "apply_patch", input: "PATCH" },
				{ type: "function_call_output", call_id: "c1", output: [{ type: "input_text", text: "spawned" }] },
				{ type: "custom_tool_call_output", call_id: "c2", output: "applied" },
			],
		});
		expect(body.messages).toEqual([
			{ role: "system", content: "Be brief." },
			{ role: "user", content: "Go" },
			{
				role: "assistant",
				content: null,
				tool_calls: [
					{ id: "c1", type: "function", function: { name: "multi_agent_v1__spawn_agent", arguments: "{}" } },
					{ id: "c2", type: "function", function: { name: "apply_patch", arguments: '{"input":"PATCH"}' } },
				],
			},
			{ role: "tool", tool_call_id: "c1", content: "spawned" },
			{ role: "tool", tool_call_id: "c2", content: "applied" },
		]);
	});

	it("gives opened reasoning to the next assistant message, and nothing for reasoning it did not seal", () => {
		const reasoning = (extra: Json) => ({ type: "reasoning", id: "rs_1", summary: [], ...extra });
		const opened = [{ type: "reasoning_text", text: "I plan." }];
		const turn = (item: Json) =>
			chatBody({
				input: [
					{ role: "user", content: "Go" },
					item,
					{ type: "function_call", call_id: "c1", name: "f", arguments: "{}" },
					{ type: "function_call_output", call_id: "c1", output: "ok" },
				],
			}).messages as Json[];
		expect(turn(reasoning({ encrypted_content: "v1.x", content: opened }))[1]).toMatchObject({ reasoning_content: "I plan." });
		// The client's own plain text, or a seal left unopened (no content), is not replayed.
		expect(turn(reasoning({ content: opened }))[1]).not.toHaveProperty("reasoning_content");
		expect(turn(reasoning({ encrypted_content: "v1.x" }))[1]).not.toHaveProperty("reasoning_content");
	});
});

describe("the hosted web_search tool", () => {
	const backend = { web_search: { provider: "searxng", url: "http://search.test" } } as unknown as GatewayConfig;
	const none = {} as GatewayConfig;
	const web = { type: "web_search", external_web_access: true };
	const offered = (body: Json, config: GatewayConfig) => hostedSearchTool(request(body), config);

	it("is offered to the engine as a tool when the gateway has a backend, on every turn", () => {
		expect(offered({ tools: [web], input: "news?" }, backend)).toEqual({ required: false });
		expect(offered({ tools: [{ type: "web_search_preview" }] }, backend)).toEqual({ required: false });
		const loop = [
			{ role: "user", content: "news?" },
			{ type: "function_call", call_id: "c1", name: "exec_command", arguments: "{}" },
			{ type: "function_call_output", call_id: "c1", output: "ok" },
		];
		// The model decides whether a turn needs a search: a tool loop's turn is offered it too.
		expect(offered({ tools: [web, FUNCTION], input: loop }, backend)).toEqual({ required: false });
		expect(offered({ tools: [web], input: "news?" }, none)).toBeUndefined();
		expect(offered({ tools: [FUNCTION], input: "news?" }, backend)).toBeUndefined();
		// venym.web_search decides instead: false searches nothing, true searches once up front (as on chat).
		expect(offered({ tools: [web], venym: { web_search: false } }, backend)).toBeUndefined();
		expect(offered({ tools: [web], venym: { web_search: true } }, backend)).toBeUndefined();
		// Cached-only (Codex's default): the live backend is not what it asked for.
		expect(offered({ tools: [{ type: "web_search", external_web_access: false }] }, backend)).toBeUndefined();
		expect(offered({ tools: [web], tool_choice: "none" }, backend)).toBeUndefined();
	});

	it("must be called when tool_choice names it, or requires a tool and it is the only one", () => {
		expect(offered({ tools: [web, FUNCTION], tool_choice: { type: "web_search" } }, backend)).toEqual({ required: true });
		expect(offered({ tools: [web], tool_choice: { type: "web_search_preview" } }, backend)).toEqual({ required: true });
		expect(offered({ tools: [web], tool_choice: "required" }, backend)).toEqual({ required: true });
		expect(offered({ tools: [web, FUNCTION], tool_choice: "required" }, backend)).toEqual({ required: false });
		// The engine is not told to call a function named web_search: the chat pipeline offers and chooses it.
		const body = responsesToChat(request({ tools: [web, FUNCTION], tool_choice: { type: "web_search" } }), []);
		expect(body).not.toHaveProperty("tool_choice");
		expect(() => request({ tools: [FUNCTION], tool_choice: { type: "web_search" } })).toThrow(/tool_choice/);
	});

	it("shows the search the model called as a web_search_call item: completed when the backend answered", () => {
		const sources = [{ title: "A", url: "https://a.example" }];
		const req = request({ tools: [web], input: "news?" });
		expect(searchItem(req, () => "ws_1", [], { query: "latest news", status: "ok", sources })).toEqual({
			id: "ws_1",
			type: "web_search_call",
			status: "completed",
			action: { type: "search", query: "latest news", sources: [{ type: "url", url: "https://a.example" }] },
		});
		expect(searchItem(req, () => "ws_1", [], { query: "q", status: "empty", sources: [] })?.status).toBe("completed");
		expect(searchItem(req, () => "ws_1", [], { query: "q", status: "failed", sources: [] })?.status).toBe("failed");
	});

	it("shows an up-front search (venym.web_search) that found sources, only when the tool was offered", () => {
		const sources = [{ title: "A", url: "https://a.example" }];
		expect(searchItem(request({ tools: [web], input: "news?" }), () => "ws_1", sources)).toEqual({
			id: "ws_1",
			type: "web_search_call",
			status: "completed",
			action: { type: "search", query: "news?", sources: [{ type: "url", url: "https://a.example" }] },
		});
		expect(searchItem(request({ tools: [web] }), () => "ws_1", [])).toBeUndefined();
		expect(searchItem(request({ input: "news?" }), () => "ws_1", sources)).toBeUndefined();
	});
});
