import { describe, expect, it } from "vitest";
import { GatewayError, toErrorResponse } from "../../../src/errors";
import { validateResponsesRequest } from "../../../src/responses/request-schema";

function rejection(body: unknown): { status: number; message: string; param: string | null; type: string } {
	try {
		validateResponsesRequest(body);
	} catch (err) {
		expect(err).toBeInstanceOf(GatewayError);
		const { status, body: wire } = toErrorResponse(err);
		return { status, message: wire.error.message, param: wire.error.param, type: wire.error.type };
	}
	throw new Error("expected the body to be rejected");
}

const base = { model: "venym/qwen-27b", input: "Hello" };

describe("validateResponsesRequest accepts", () => {
	it("a model and a string input, defaulting store to true", () => {
		expect(validateResponsesRequest(base)).toEqual({ ...base, store: true });
	});

	it("every supported field at once", () => {
		const body = {
			model: "venym/qwen-27b",
			input: [
				{ role: "developer", content: "Be brief." },
				{
					type: "message",
					role: "user",
					content: [
						{ type: "input_text", text: "What is in this image?" },
						{ type: "input_image", image_url: "https://example.com/cat.png", detail: "low" },
					],
				},
				{
					type: "message",
					id: "msg_1",
					status: "completed",
					role: "assistant",
					content: [{ type: "output_text", text: "A cat.", annotations: [], logprobs: [] }],
				},
				{ type: "reasoning", id: "rs_1", summary: [], encrypted_content: "opaque" },
				{ type: "function_call", id: "fc_1", call_id: "call_1", name: "lookup", arguments: "{}", status: "completed" },
				{ type: "function_call_output", call_id: "call_1", output: "42" },
			],
			instructions: "You are helpful.",
			max_output_tokens: 256,
			temperature: 0.2,
			top_p: 0.9,
			tools: [{ type: "function", name: "lookup", description: "Look up", parameters: { type: "object" }, strict: true }],
			tool_choice: { type: "function", name: "lookup" },
			parallel_tool_calls: false,
			text: { format: { type: "json_schema", name: "answer", schema: { type: "object" }, strict: true }, verbosity: "low" },
			reasoning: { effort: "high", summary: "auto" },
			metadata: { team: "a" },
			store: false,
			previous_response_id: "resp_1",
			background: false,
			stream: true,
			stream_options: { include_obfuscation: false },
			user: "u-1",
			venym: { web_search: true, search_results: 3 },
			truncation: "disabled",
			include: ["reasoning.encrypted_content"],
		};
		const req = validateResponsesRequest(body);
		expect(req.store).toBe(false);
		expect(req.input).toHaveLength(6);
		// An item without `type` is a message.
		expect(Array.isArray(req.input) && req.input[0]?.type).toBe("message");
	});

	it("null for optional settings, as the SDKs may send", () => {
		const req = validateResponsesRequest({
			...base,
			instructions: null,
			temperature: null,
			tools: null,
			store: null,
			reasoning: null,
		});
		expect(req.store).toBe(true);
	});

	it("item references, with the type or (as the OpenAI SDK allows) without it", () => {
		const req = validateResponsesRequest({
			model: "m",
			input: [
				{ type: "item_reference", id: "msg_1" },
				{ id: "rs_1" },
				{ type: null, id: "fc_1" },
				{ role: "user", content: "next" },
			],
		});
		expect(req.input).toEqual([
			{ type: "item_reference", id: "msg_1" },
			{ type: "item_reference", id: "rs_1" },
			{ type: "item_reference", id: "fc_1" },
			{ type: "message", role: "user", content: "next" },
		]);
	});

	it("the routing fields chat takes: fallback models (either convention) and prompt_cache_key", () => {
		const listed = validateResponsesRequest({ ...base, models: ["a", "b"], prompt_cache_key: "conv-1" });
		expect(listed).toMatchObject({ models: ["a", "b"], prompt_cache_key: "conv-1" });
		expect(validateResponsesRequest({ ...base, fallbacks: [{ model: "a" }] }).fallbacks).toEqual([{ model: "a" }]);
		expect(validateResponsesRequest({ ...base, models: null, fallbacks: [{ model: "a" }] }).fallbacks).toEqual([{ model: "a" }]);
	});

	it("background without streaming", () => {
		expect(validateResponsesRequest({ ...base, background: true, stream: false }).background).toBe(true);
	});

	it.each(["none", "auto", "required"])("tool_choice %s", (choice) => {
		expect(validateResponsesRequest({ ...base, tool_choice: choice }).tool_choice).toBe(choice);
	});
});

describe("validateResponsesRequest rejects", () => {
	it.each<[string, unknown, string | null, RegExp]>([
		["a non-object body", [1], null, /JSON object/],
		["a missing model", { input: "x" }, "model", /Missing required parameter: 'model'/],
		["a missing input", { model: "m" }, "input", /Missing required parameter: 'input'/],
		["a model of the wrong type", { model: 5, input: "x" }, "model", /Invalid value for 'model'/],
		["an input that is neither string nor array", { model: "m", input: 5 }, "input", /string or an array/],
		["an empty input array", { model: "m", input: [] }, "input", /empty array/],
		[
			"an unknown top-level field",
			{ ...base, frequency_penalty: 1 },
			"frequency_penalty",
			/^'frequency_penalty' is not supported by this gateway: /,
		],
		[
			"an unknown item type",
			{ model: "m", input: [{ type: "file_search_call", id: "x" }] },
			"input[0].type",
			/'message', 'function_call', 'function_call_output', 'custom_tool_call', 'custom_tool_call_output', 'reasoning', 'web_search_call', 'item_reference'/,
		],
		[
			"an item reference with another field",
			{ model: "m", input: [{ type: "item_reference", id: "msg_1", status: "completed" }] },
			"input[0].status",
			/Unrecognized request argument supplied: input\[0\]\.status/,
		],
		["fallback models that are not a list", { ...base, models: "a" }, "models", /expected an array/],
		["a fallback id of the wrong type", { ...base, models: ["a", 5] }, "models[1]", /expected a model id/],
		["a fallback entry without a model", { ...base, fallbacks: [{ id: "a" }] }, "fallbacks[0].model", /expected a model id/],
		[
			"both fallback conventions",
			{ ...base, models: ["a"], fallbacks: [{ model: "b" }] },
			"fallbacks",
			/either 'models' or 'fallbacks'/,
		],
		["more than 8 fallback models", { ...base, models: Array(9).fill("a") }, "models", /at most 8/],
		["an item reference without an id", { model: "m", input: [{ type: "item_reference" }] }, "input[0].id", /Missing required/],
		["an item reference with an empty id", { model: "m", input: [{ type: "item_reference", id: "" }] }, "input[0].id", /./],
		[
			"an item reference whose id is not a string",
			{ model: "m", input: [{ type: "item_reference", id: 7 }] },
			"input[0].id",
			/./,
		],
		["an unknown role", { model: "m", input: [{ role: "tool", content: "x" }] }, "input[0].role", /Invalid value/],
		[
			"an unknown content part",
			{ model: "m", input: [{ role: "user", content: [{ type: "input_file", file_id: "f" }] }] },
			"input[0].content[0].type",
			/input_text/,
		],
		[
			"a text part without text",
			{ model: "m", input: [{ role: "user", content: [{ type: "input_text" }] }] },
			"input[0].content[0].text",
			/Missing required parameter/,
		],
		[
			"an unknown field on an item",
			{ model: "m", input: [{ type: "function_call", call_id: "c", name: "f", arguments: "{}", extra: 1 }] },
			"input[0].extra",
			/Unrecognized request argument supplied: input\[0\]\.extra/,
		],
		[
			"a function_call_output whose output is neither text nor parts",
			{ model: "m", input: [{ type: "function_call_output", call_id: "c", output: 5 }] },
			"input[0].output",
			/Invalid value/,
		],
		[
			"an image given by file_id",
			{ model: "m", input: [{ role: "user", content: [{ type: "input_image", file_id: "file_1" }] }] },
			"input[0].content[0].file_id",
			/image_url/,
		],
		[
			"an image without image_url",
			{ model: "m", input: [{ role: "user", content: [{ type: "input_image" }] }] },
			"input[0].content[0].image_url",
			/Missing required parameter/,
		],
		[
			"an image outside a user message",
			{ model: "m", input: [{ role: "system", content: [{ type: "input_image", image_url: "https://x/y.png" }] }] },
			"input[0].content[0].type",
			/user messages/,
		],
		[
			"output_text in a user message",
			{ model: "m", input: [{ role: "user", content: [{ type: "output_text", text: "x" }] }] },
			"input[0].content[0].type",
			/assistant messages/,
		],
		[
			"a namespace whose function has no name",
			{ ...base, tools: [{ type: "namespace", name: "ns", tools: [{ type: "function" }] }] },
			"tools[0].tools[0].name",
			/Missing required parameter/,
		],
		[
			"a custom tool with an unknown grammar syntax",
			{ ...base, tools: [{ type: "custom", name: "c", format: { type: "grammar", syntax: "peg", definition: "x" } }] },
			"tools[0].format",
			/Invalid value/,
		],
		[
			"two tools the engine would see under one name",
			{
				...base,
				tools: [
					{ type: "function", name: "ns__f" },
					{ type: "namespace", name: "ns", tools: [{ type: "function", name: "f" }] },
				],
			},
			"tools[1].name",
			/used twice/,
		],
		[
			"a function tool with an unknown field",
			{ ...base, tools: [{ type: "function", name: "f", bogus: true }] },
			"tools[0].bogus",
			/Unrecognized/,
		],
		["a function tool without a name", { ...base, tools: [{ type: "function" }] }, "tools[0].name", /Missing required parameter/],
		["an unknown tool_choice", { ...base, tool_choice: "any" }, "tool_choice", /Invalid value for 'tool_choice'/],
		["a tool_choice of another tool type", { ...base, tool_choice: { type: "file_search" } }, "tool_choice", /"function"/],
		["a zero max_output_tokens", { ...base, max_output_tokens: 0 }, "max_output_tokens", /Invalid value/],
		["a fractional max_output_tokens", { ...base, max_output_tokens: 1.5 }, "max_output_tokens", /Invalid value/],
		["a temperature above 2", { ...base, temperature: 2.5 }, "temperature", /Invalid value/],
		[
			"a json_schema format without a name",
			{ ...base, text: { format: { type: "json_schema", schema: {} } } },
			"text.format.name",
			/Missing/,
		],
		["an unknown text format", { ...base, text: { format: { type: "xml" } } }, "text.format.type", /Invalid value/],
		["an unknown reasoning effort", { ...base, reasoning: { effort: "extreme" } }, "reasoning.effort", /Invalid value/],
		["metadata with a non-string value", { ...base, metadata: { n: 1 } }, "metadata.n", /Invalid value/],
		[
			"metadata with 17 keys",
			{ ...base, metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"])) },
			"metadata",
			/16 keys/,
		],
		["an unknown venym option", { ...base, venym: { web_search: true, depth: 2 } }, "venym.depth", /Unrecognized/],
		["too many search results", { ...base, venym: { search_results: 11 } }, "venym.search_results", /Invalid value/],
		["an unknown truncation", { ...base, truncation: "middle" }, "truncation", /Invalid value/],
		["background with streaming", { ...base, background: true, stream: true }, "background", /cannot be streamed/],
	])("%s", (_name, body, param, message) => {
		const r = rejection(body);
		expect(r.status).toBe(400);
		expect(r.type).toBe("invalid_request_error");
		expect(r.param).toBe(param);
		expect(r.message).toMatch(message);
	});
});

describe("validateResponsesRequest and OpenAI's newer platform fields", () => {
	const platform = {
		prompt_cache_retention: "24h",
		prompt_cache_options: { mode: "auto" },
		moderation: { mode: "off" },
		max_tool_calls: 3,
		context_management: [{ type: "compaction", compact_threshold: 1000 }],
		background_options: { timeout: 60 },
		access_programs: { programs: [] },
		image: { detail: "auto" },
	};

	it("accepts each one, as an official client sends it", () => {
		for (const [field, value] of Object.entries(platform)) {
			expect(() => validateResponsesRequest({ ...base, [field]: value }), field).not.toThrow();
		}
	});

	it("refuses 'conversation' and 'prompt' with what to send instead", () => {
		const conversation = rejection({ ...base, conversation: "conv_123" });
		expect(conversation).toMatchObject({ status: 400, param: "conversation" });
		expect(conversation.message).toContain("previous_response_id");
		const prompt = rejection({ ...base, prompt: { id: "pmpt_1" } });
		expect(prompt).toMatchObject({ status: 400, param: "prompt" });
		expect(prompt.message).toContain("instructions");
	});

	it("refuses a negative max_tool_calls", () => {
		expect(rejection({ ...base, max_tool_calls: -1 })).toMatchObject({ status: 400, param: "max_tool_calls" });
	});
});
