/**
 * The Messages lane's pure translations: an Anthropic request → the chat body the engine gets
 * (src/messages/to-chat.ts, after request-schema.ts), and a chat completion → an Anthropic
 * message (src/messages/from-chat.ts).
 */
import { describe, expect, it } from "vitest";
import { GatewayError } from "../../../src/errors";
import { anthropicUsage, messageFromCompletion, stopReasonOf } from "../../../src/messages/from-chat";
import { validateCountTokensRequest, validateMessagesRequest } from "../../../src/messages/request-schema";
import { messagesToChat } from "../../../src/messages/to-chat";

type Json = Record<string, unknown>;

function translate(body: Json, reasoning = true): Json {
	return messagesToChat(validateMessagesRequest({ model: "m", max_tokens: 100, ...body }).req, { reasoning });
}

function refusal(fn: () => unknown): GatewayError {
	try {
		fn();
	} catch (err) {
		expect(err).toBeInstanceOf(GatewayError);
		return err as GatewayError;
	}
	throw new Error("expected a refusal");
}

describe("Anthropic request → chat body", () => {
	it("puts system text (string or blocks) and role: system entries in system messages, in place", () => {
		const body = translate({
			system: [
				{ type: "text", text: "one", cache_control: { type: "ephemeral" } },
				{ type: "text", text: "two" },
			],
			messages: [
				{ role: "user", content: "hi" },
				{ role: "system", content: "mid-conversation" },
				{ role: "assistant", content: "hello" },
			],
		});
		expect(body.messages).toEqual([
			{ role: "system", content: "one\ntwo" },
			{ role: "user", content: "hi" },
			{ role: "system", content: "mid-conversation" },
			{ role: "assistant", content: "hello" },
		]);
	});

	it("translates images (base64 and url, never fetched) and text documents", () => {
		const body = translate({
			messages: [
				{
					role: "user",
					content: [
						{ type: "text", text: "look" },
						{ type: "image", source: { type: "base64", media_type: "image/png", data: "AAAA" } },
						{ type: "image", source: { type: "url", url: "https://example.com/a.png" } },
						{ type: "document", source: { type: "text", media_type: "text/plain", data: "doc body" }, title: "T" },
					],
				},
			],
		});
		expect(body.messages).toEqual([
			{
				role: "user",
				content: [
					{ type: "text", text: "look" },
					{ type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } },
					{ type: "image_url", image_url: { url: "https://example.com/a.png" } },
					{ type: "text", text: "T\n\ndoc body" },
				],
			},
		]);
	});

	it("turns tool_use into assistant tool_calls and tool_result into tool messages before the user's text", () => {
		const body = translate({
			messages: [
				{ role: "user", content: "run it" },
				{
					role: "assistant",
					content: [
						{ type: "thinking", thinking: "hmm", signature: "sig" },
						{ type: "text", text: "Running." },
						{ type: "tool_use", id: "toolu_1", name: "Bash", input: { command: "ls" } },
						{ type: "tool_use", id: "toolu_2", name: "Read", input: {} },
					],
				},
				{
					role: "user",
					content: [
						{ type: "text", text: "and then?" },
						{ type: "tool_result", tool_use_id: "toolu_1", content: "a.txt" },
						{
							type: "tool_result",
							tool_use_id: "toolu_2",
							is_error: true,
							content: [
								{ type: "text", text: "no such file" },
								{ type: "image", source: { type: "url", url: "https://example.com/s.png" } },
							],
						},
					],
				},
			],
		});
		expect(body.messages).toEqual([
			{ role: "user", content: "run it" },
			{
				role: "assistant",
				content: "Running.",
				tool_calls: [
					{ id: "toolu_1", type: "function", function: { name: "Bash", arguments: '{"command":"ls"}' } },
					{ id: "toolu_2", type: "function", function: { name: "Read", arguments: "{}" } },
				],
			},
			{ role: "tool", tool_call_id: "toolu_1", content: "a.txt" },
			{ role: "tool", tool_call_id: "toolu_2", content: "Error: no such file" },
			{
				role: "user",
				content: [
					{ type: "text", text: "and then?" },
					{ type: "image_url", image_url: { url: "https://example.com/s.png" } },
				],
			},
		]);
	});

	it("drops earlier thinking and server tool blocks", () => {
		const body = translate({
			messages: [
				{ role: "user", content: "q" },
				{
					role: "assistant",
					content: [
						{ type: "redacted_thinking", data: "xx" },
						{ type: "server_tool_use", id: "s", name: "web_search", input: {} },
						{ type: "tool_use", id: "t", name: "f", input: { a: 1 } },
					],
				},
			],
		});
		expect(body.messages).toEqual([
			{ role: "user", content: "q" },
			{
				role: "assistant",
				content: null,
				tool_calls: [{ id: "t", type: "function", function: { name: "f", arguments: '{"a":1}' } }],
			},
		]);
	});

	it("maps tools, tool_choice, stop_sequences, sampling and metadata.user_id", () => {
		const schema = { type: "object", properties: { q: { type: "string" } } };
		const base = { messages: [{ role: "user", content: "x" }] };
		const body = translate({
			...base,
			tools: [{ name: "search", description: "Searches", input_schema: schema, cache_control: { type: "ephemeral" } }],
			tool_choice: { type: "any", disable_parallel_tool_use: true },
			stop_sequences: ["END"],
			temperature: 0.2,
			top_p: 0.9,
			top_k: 40,
			metadata: { user_id: "u-1" },
		});
		expect(body).toEqual({
			model: "m",
			max_tokens: 100,
			messages: [{ role: "user", content: "x" }],
			tools: [{ type: "function", function: { name: "search", description: "Searches", parameters: schema } }],
			tool_choice: "required",
			parallel_tool_calls: false,
			stop: ["END"],
			temperature: 0.2,
			top_p: 0.9,
			top_k: 40,
			user: "u-1",
		});
		expect(translate({ ...base, tool_choice: { type: "auto" } }).tool_choice).toBe("auto");
		expect(translate({ ...base, tool_choice: { type: "none" } }).tool_choice).toBe("none");
		expect(translate({ ...base, tool_choice: { type: "tool", name: "search" } }).tool_choice).toEqual({
			type: "function",
			function: { name: "search" },
		});
	});

	it("switches reasoning only where the model reasons", () => {
		const base = { messages: [{ role: "user", content: "x" }] };
		expect(translate({ ...base, thinking: { type: "enabled", budget_tokens: 20_000 } })).toMatchObject({
			chat_template_kwargs: { enable_thinking: true },
			reasoning_effort: "high",
		});
		expect(translate({ ...base, thinking: { type: "adaptive" } })).toMatchObject({ reasoning_effort: "medium" });
		const off = translate({ ...base, thinking: { type: "disabled" } });
		expect(off.chat_template_kwargs).toEqual({ enable_thinking: false });
		expect(off).not.toHaveProperty("reasoning_effort");
		const plain = translate({ ...base, thinking: { type: "enabled", budget_tokens: 1024 } }, false);
		expect(plain).not.toHaveProperty("chat_template_kwargs");
		expect(plain).not.toHaveProperty("reasoning_effort");
	});

	it("builds the engine body from known fields only: dropped and unknown fields never pass", () => {
		const { req, ignored } = validateMessagesRequest({
			model: "m",
			max_tokens: 10,
			messages: [{ role: "user", content: "x" }],
			cache_control: { type: "ephemeral" },
			context_management: {},
			output_config: {},
			service_tier: "auto",
			container: "c",
			mcp_servers: [],
			newer_beta_field: true,
		});
		expect(ignored).toEqual(["newer_beta_field"]);
		const body = messagesToChat(req, { reasoning: true });
		expect(Object.keys(body).sort()).toEqual(["max_tokens", "messages", "model"]);
	});

	it("refuses what it cannot serve with a 400 naming the field", () => {
		const base = { model: "m", messages: [{ role: "user", content: "x" }] };
		// Engine internals: the one refusal list of every lane.
		for (const field of ["priority", "vllm_xargs", "n_predict"]) {
			expect(refusal(() => validateMessagesRequest({ ...base, max_tokens: 1, [field]: 1 })).options).toMatchObject({
				param: field,
				code: "unsupported_parameter",
			});
		}
		expect(refusal(() => validateMessagesRequest(base)).options.param).toBe("max_tokens");
		expect(refusal(() => validateMessagesRequest({ ...base, max_tokens: 1, stream: "yes" })).options.param).toBe("stream");
		expect(refusal(() => validateMessagesRequest({ ...base, max_tokens: 1, messages: [] })).options.param).toBe("messages");
		const block = refusal(() =>
			validateMessagesRequest({ ...base, max_tokens: 1, messages: [{ role: "user", content: [{ type: "video" }] }] }),
		);
		expect(block.options.param).toBe("messages[0].content[0].type");
		expect(block.message).toMatch(/tool_result/);
		expect(refusal(() => validateMessagesRequest({ ...base, max_tokens: 1, messages: [{ role: "user" }] })).message).toBe(
			"Missing required parameter: 'messages[0].content'.",
		);
		const server = refusal(() => translate({ ...base, tools: [{ type: "web_search_20250305", name: "web_search" }] }));
		expect(server.options.param).toBe("tools[0].type");
		expect(server.message).toMatch(/:online/);
		const misplaced = refusal(() =>
			translate({ messages: [{ role: "user", content: [{ type: "tool_use", id: "a", name: "b", input: {} }] }] }),
		);
		expect(misplaced.options.param).toBe("messages[0].content[0]");
		// count_tokens needs no max_tokens.
		expect(validateCountTokensRequest(base).req.model).toBe("m");
	});

	it("leaves a served web search server tool out of the chat tools, its tool_choice to the search round", () => {
		const search = { type: "web_search_20250305", name: "web_search", max_uses: 3, allowed_domains: ["a.com"] };
		const custom = { name: "f", input_schema: { type: "object" } };
		const served = (body: Json) =>
			messagesToChat(validateMessagesRequest({ model: "m", max_tokens: 100, ...body }).req, {
				reasoning: false,
				webSearch: true,
			});
		const messages = [{ role: "user", content: "q" }];
		// Alone: no chat tool and no choice left (the search round offers its own and makes it required).
		const alone = served({ messages, tools: [search], tool_choice: { type: "tool", name: "web_search" } });
		expect(alone).not.toHaveProperty("tools");
		expect(alone).not.toHaveProperty("tool_choice");
		const beside = served({ messages, tools: [custom, search], tool_choice: { type: "tool", name: "web_search" } });
		expect((beside.tools as Json[]).map((t) => (t.function as Json).name)).toEqual(["f"]);
		expect(beside).not.toHaveProperty("tool_choice");
		expect(served({ messages, tools: [custom, search], tool_choice: { type: "tool", name: "f" } }).tool_choice).toEqual({
			type: "function",
			function: { name: "f" },
		});
		// Without a backend: the 400 as before; other server tools are refused either way.
		expect(refusal(() => translate({ messages, tools: [search] })).options.param).toBe("tools[0].type");
		expect(refusal(() => served({ messages, tools: [{ type: "bash_20250124", name: "bash" }] })).options.param).toBe(
			"tools[0].type",
		);
	});

	it("replays an earlier web_search_tool_result as the assistant's text, never a 400", () => {
		const body = translate({
			messages: [
				{ role: "user", content: "q" },
				{
					role: "assistant",
					content: [
						{ type: "server_tool_use", id: "srvtoolu_1", name: "web_search", input: { query: "q" } },
						{
							type: "web_search_tool_result",
							tool_use_id: "srvtoolu_1",
							content: [{ type: "web_search_result", url: "https://a.com/", title: "A", encrypted_content: "x", page_age: null }],
						},
						{
							type: "web_search_tool_result",
							tool_use_id: "srvtoolu_2",
							content: { type: "web_search_tool_result_error", error_code: "unavailable" },
						},
						{ type: "text", text: "Answer [1]." },
					],
				},
			],
		});
		expect((body.messages as Json[])[1]).toEqual({
			role: "assistant",
			content: "Web search results:\n[1] A\nhttps://a.com/\n\nAnswer [1].",
		});
	});
});

describe("chat completion → Anthropic message", () => {
	const completion = (message: Json, finish_reason: string, extra: Json = {}) => ({
		id: "chatcmpl-1",
		model: "venym/qwen",
		choices: [{ index: 0, message, finish_reason, ...extra }],
		usage: { prompt_tokens: 100, completion_tokens: 20, total_tokens: 120, prompt_tokens_details: { cached_tokens: 64 } },
	});

	it("orders thinking, text and tool_use blocks and parses tool arguments into an object", () => {
		const msg = messageFromCompletion(
			completion(
				{
					role: "assistant",
					content: "Let me look.",
					reasoning_content: "Need a tool.",
					tool_calls: [{ id: "call_1", type: "function", function: { name: "Bash", arguments: '{"command":"ls"}' } }],
				},
				"tool_calls",
			),
			[],
		);
		expect(msg).toMatchObject({
			type: "message",
			role: "assistant",
			model: "venym/qwen",
			content: [
				{ type: "thinking", thinking: "Need a tool." },
				{ type: "text", text: "Let me look." },
				{ type: "tool_use", id: "call_1", name: "Bash", input: { command: "ls" } },
			],
			stop_reason: "tool_use",
			stop_sequence: null,
			usage: { input_tokens: 36, output_tokens: 20, cache_read_input_tokens: 64, cache_creation_input_tokens: 0 },
		});
		expect(msg.id).toMatch(/^msg_/);
		expect(typeof (msg.content[0] as { signature: unknown }).signature).toBe("string");
	});

	it("maps every finish reason", () => {
		expect(stopReasonOf("stop", null, [], false)).toEqual({ stop_reason: "end_turn", stop_sequence: null });
		expect(stopReasonOf("length", null, [], false)).toEqual({ stop_reason: "max_tokens", stop_sequence: null });
		expect(stopReasonOf("stop", "END", ["END"], false)).toEqual({ stop_reason: "stop_sequence", stop_sequence: "END" });
		// vLLM's stop_reason may be a token id: not one of the client's sequences.
		expect(stopReasonOf("stop", 151645, ["END"], false)).toEqual({ stop_reason: "end_turn", stop_sequence: null });
		expect(stopReasonOf("tool_calls", null, [], true).stop_reason).toBe("tool_use");
		expect(stopReasonOf("stop", null, [], true).stop_reason).toBe("tool_use");
		expect(stopReasonOf("length", null, [], true).stop_reason).toBe("max_tokens");
		expect(stopReasonOf("content_filter", null, [], false).stop_reason).toBe("refusal");
		const matched = messageFromCompletion(completion({ role: "assistant", content: "a" }, "stop", { stop_reason: "END" }), [
			"END",
		]);
		expect(matched).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: "END" });
	});

	it("puts a search round's blocks first, and counts the search in usage when the backend answered", () => {
		const round = { query: "tides", status: "ok" as const, sources: [{ title: "T", url: "https://t.example/" }] };
		const m = messageFromCompletion(completion({ role: "assistant", content: "Hi [1]." }, "stop"), [], round);
		expect(m.content.map((b) => b.type)).toEqual(["server_tool_use", "web_search_tool_result", "text"]);
		const [call, result] = m.content as unknown as [Json, Json];
		expect(call).toMatchObject({ name: "web_search", input: { query: "tides" } });
		expect(result.tool_use_id).toBe(call.id);
		const [hit] = result.content as Json[];
		expect(hit).toMatchObject({ type: "web_search_result", url: "https://t.example/", title: "T", page_age: null });
		expect(JSON.parse(atob(hit?.encrypted_content as string))).toEqual({ url: "https://t.example/", title: "T" });
		expect(m.usage.server_tool_use).toEqual({ web_search_requests: 1 });
		const skipped = messageFromCompletion(completion({ role: "assistant", content: "Hi." }, "stop"), [], {
			...round,
			status: "skipped",
			sources: [],
		});
		expect((skipped.content[1] as Json).content).toEqual({
			type: "web_search_tool_result_error",
			error_code: "invalid_tool_input",
		});
		expect(skipped.usage.server_tool_use).toEqual({ web_search_requests: 0 });
		expect(messageFromCompletion(completion({ role: "assistant", content: "Hi." }, "stop"), []).usage).not.toHaveProperty(
			"server_tool_use",
		);
	});

	it("keeps a malformed tool input an object and usage counts sane", () => {
		const msg = messageFromCompletion(
			completion(
				{ role: "assistant", content: null, tool_calls: [{ id: "c", function: { name: "f", arguments: "[1,2" } }] },
				"tool_calls",
			),
			[],
		);
		expect(msg.content).toEqual([{ type: "tool_use", id: "c", name: "f", input: {} }]);
		expect(anthropicUsage({ prompt_tokens: 5, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 50 } })).toEqual({
			input_tokens: 0,
			output_tokens: 1,
			cache_read_input_tokens: 5,
			cache_creation_input_tokens: 0,
		});
		expect(anthropicUsage(undefined)).toEqual({
			input_tokens: 0,
			output_tokens: 0,
			cache_read_input_tokens: 0,
			cache_creation_input_tokens: 0,
		});
	});
});
