import { describe, expect, it } from "vitest";
import { GatewayError, toErrorResponse } from "../../../src/errors";
import { referencedIds, referenceNotFound, resolveReferences } from "../../../src/responses/item-references";
import type { ResponseInputItem } from "../../../src/responses/item-schema";
import { validateResponsesRequest } from "../../../src/responses/request-schema";
import { inputItems, responsesToChat } from "../../../src/responses/to-chat";

function counter(): () => string {
	let n = 0;
	return () => String(++n);
}

function chat(body: Record<string, unknown>, history: ResponseInputItem[] = []): Record<string, unknown> {
	return responsesToChat(validateResponsesRequest({ model: "venym/qwen-27b", ...body }), history);
}

describe("responsesToChat", () => {
	it("turns a string input into one user message and keeps the model id", () => {
		expect(chat({ input: "Hi" })).toEqual({ model: "venym/qwen-27b", messages: [{ role: "user", content: "Hi" }] });
	});

	it("puts instructions first as a system message", () => {
		expect(chat({ input: "Hi", instructions: "Be brief." }).messages).toEqual([
			{ role: "system", content: "Be brief." },
			{ role: "user", content: "Hi" },
		]);
	});

	it("sends text-only content as a plain string and mixed content as parts", () => {
		const messages = chat({
			input: [
				{
					role: "user",
					content: [
						{ type: "input_text", text: "one" },
						{ type: "input_text", text: "two" },
					],
				},
				{
					role: "user",
					content: [
						{ type: "input_text", text: "Look:" },
						{ type: "input_image", image_url: "data:image/png;base64,AAAA", detail: "low" },
						{ type: "input_image", image_url: "https://example.com/a.png" },
					],
				},
			],
		}).messages;
		expect(messages).toEqual([
			{ role: "user", content: "one\ntwo" },
			{
				role: "user",
				content: [
					{ type: "text", text: "Look:" },
					{ type: "image_url", image_url: { url: "data:image/png;base64,AAAA", detail: "low" } },
					{ type: "image_url", image_url: { url: "https://example.com/a.png" } },
				],
			},
		]);
	});

	it("maps the developer role to system", () => {
		expect(chat({ input: [{ role: "developer", content: "Rules." }] }).messages).toEqual([{ role: "system", content: "Rules." }]);
	});

	it("turns assistant output_text into string content", () => {
		const messages = chat({
			input: [
				{ type: "message", role: "assistant", content: [{ type: "output_text", text: "Earlier answer", annotations: [] }] },
			],
		}).messages;
		expect(messages).toEqual([{ role: "assistant", content: "Earlier answer" }]);
	});

	it("merges consecutive function calls, and the assistant text before them, into one message", () => {
		const messages = chat({
			input: [
				{ role: "user", content: "Weather in Paris and Rome?" },
				{ role: "assistant", content: "Checking both." },
				{ type: "reasoning", id: "rs_1", summary: [] },
				{ type: "function_call", call_id: "call_a", name: "weather", arguments: '{"city":"Paris"}' },
				{ type: "function_call", call_id: "call_b", name: "weather", arguments: '{"city":"Rome"}' },
				{ type: "function_call_output", call_id: "call_a", output: "18C" },
				{ type: "function_call_output", call_id: "call_b", output: "24C" },
			],
		}).messages;
		expect(messages).toEqual([
			{ role: "user", content: "Weather in Paris and Rome?" },
			{
				role: "assistant",
				content: "Checking both.",
				tool_calls: [
					{ id: "call_a", type: "function", function: { name: "weather", arguments: '{"city":"Paris"}' } },
					{ id: "call_b", type: "function", function: { name: "weather", arguments: '{"city":"Rome"}' } },
				],
			},
			{ role: "tool", tool_call_id: "call_a", content: "18C" },
			{ role: "tool", tool_call_id: "call_b", content: "24C" },
		]);
	});

	it("starts a new assistant message for a function call after a tool result", () => {
		const messages = chat({
			input: [
				{ type: "function_call", call_id: "c1", name: "f", arguments: "{}" },
				{ type: "function_call_output", call_id: "c1", output: "1" },
				{ type: "function_call", call_id: "c2", name: "f", arguments: "{}" },
			],
		}).messages as Array<Record<string, unknown>>;
		expect(messages.map((m) => m.role)).toEqual(["assistant", "tool", "assistant"]);
		expect(messages[0]).toEqual({
			role: "assistant",
			content: null,
			tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }],
		});
	});

	it("places history before the current input and after the instructions", () => {
		const history: ResponseInputItem[] = [
			{ type: "message", id: "msg_1", role: "user", status: "completed", content: [{ type: "input_text", text: "Call f" }] },
			{ type: "reasoning", id: "rs_1", summary: [], content: [{ type: "reasoning_text", text: "thinking" }] },
			{ type: "function_call", id: "fc_1", call_id: "call_1", name: "f", arguments: "{}", status: "completed" },
		];
		const messages = chat(
			{ instructions: "Sys", input: [{ type: "function_call_output", call_id: "call_1", output: "done" }] },
			history,
		).messages;
		expect(messages).toEqual([
			{ role: "system", content: "Sys" },
			{ role: "user", content: "Call f" },
			{
				role: "assistant",
				content: null,
				tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: "{}" } }],
			},
			{ role: "tool", tool_call_id: "call_1", content: "done" },
		]);
	});

	it("nests flat function tools and omits what was not given", () => {
		const body = chat({
			input: "x",
			tools: [
				{ type: "function", name: "a", description: "A", parameters: { type: "object", properties: {} }, strict: true },
				{ type: "function", name: "b", parameters: null, strict: null },
			],
		});
		expect(body.tools).toEqual([
			{
				type: "function",
				function: { name: "a", description: "A", parameters: { type: "object", properties: {} }, strict: true },
			},
			{ type: "function", function: { name: "b" } },
		]);
	});

	it("translates a function tool_choice and passes the string ones", () => {
		const tools = [{ type: "function", name: "a" }];
		expect(chat({ input: "x", tools, tool_choice: { type: "function", name: "a" } }).tool_choice).toEqual({
			type: "function",
			function: { name: "a" },
		});
		expect(chat({ input: "x", tools, tool_choice: "required" }).tool_choice).toBe("required");
	});

	it("sends no tool_choice nor parallel_tool_calls when no tool reaches the engine", () => {
		const body = chat({ input: "x", tools: [{ type: "local_shell" }], tool_choice: "required", parallel_tool_calls: true });
		expect(body).not.toHaveProperty("tools");
		expect(body).not.toHaveProperty("tool_choice");
		expect(body).not.toHaveProperty("parallel_tool_calls");
	});

	it("translates text formats into response_format", () => {
		expect(chat({ input: "x", text: { format: { type: "json_object" } } }).response_format).toEqual({ type: "json_object" });
		expect(
			chat({
				input: "x",
				text: { format: { type: "json_schema", name: "out", schema: { type: "object" }, strict: true, description: "d" } },
			}).response_format,
		).toEqual({ type: "json_schema", json_schema: { name: "out", schema: { type: "object" }, strict: true, description: "d" } });
		expect(chat({ input: "x", text: { format: { type: "text" }, verbosity: "low" } })).not.toHaveProperty("response_format");
	});

	it("maps sampling, limits, reasoning effort, user, venym and stream", () => {
		const body = chat({
			input: "x",
			max_output_tokens: 100,
			temperature: 0.5,
			top_p: 0.8,
			reasoning: { effort: "low", summary: "auto" },
			user: "u1",
			venym: { web_search: true },
			stream: true,
			metadata: { a: "b" },
			store: false,
			truncation: "auto",
		});
		expect(body).toEqual({
			model: "venym/qwen-27b",
			messages: [{ role: "user", content: "x" }],
			max_tokens: 100,
			temperature: 0.5,
			top_p: 0.8,
			reasoning_effort: "low",
			user: "u1",
			venym: { web_search: true },
			stream: true,
		});
	});
});

describe("inputItems", () => {
	it("turns a string input into one user message item with an id", () => {
		const req = validateResponsesRequest({ model: "m", input: "Hi" });
		expect(inputItems(req, counter())).toEqual([
			{ type: "message", id: "msg_1", role: "user", status: "completed", content: [{ type: "input_text", text: "Hi" }] },
		]);
	});

	it("normalises every item kind, keeping ids the client sent", () => {
		const req = validateResponsesRequest({
			model: "m",
			input: [
				{ role: "user", content: "q" },
				{ role: "assistant", content: "a" },
				{ type: "message", id: "msg_old", role: "assistant", content: [{ type: "output_text", text: "b", annotations: [] }] },
				{ role: "user", content: [{ type: "input_image", image_url: "https://x/y.png" }] },
				{ type: "function_call", call_id: "c", name: "f", arguments: "{}" },
				{ type: "function_call_output", call_id: "c", output: "r" },
				{ type: "reasoning", summary: [{ type: "summary_text", text: "s" }] },
			],
		});
		expect(inputItems(req, counter())).toEqual([
			{ type: "message", id: "msg_1", role: "user", status: "completed", content: [{ type: "input_text", text: "q" }] },
			{
				type: "message",
				id: "msg_2",
				role: "assistant",
				status: "completed",
				content: [{ type: "output_text", annotations: [], logprobs: [], text: "a" }],
			},
			{
				type: "message",
				id: "msg_old",
				role: "assistant",
				status: "completed",
				content: [{ type: "output_text", annotations: [], logprobs: [], text: "b" }],
			},
			{
				type: "message",
				id: "msg_3",
				role: "user",
				status: "completed",
				content: [{ type: "input_image", image_url: "https://x/y.png", detail: "auto" }],
			},
			{ type: "function_call", id: "fc_4", call_id: "c", name: "f", arguments: "{}", status: "completed" },
			{ type: "function_call_output", id: "fco_5", call_id: "c", output: "r", status: "completed" },
			{ type: "reasoning", id: "rs_6", summary: [{ type: "summary_text", text: "s" }] },
		]);
	});

	it("gives the same chat messages when replayed as history", () => {
		const req = validateResponsesRequest({
			model: "m",
			input: [
				{
					role: "user",
					content: [
						{ type: "input_text", text: "q" },
						{ type: "input_image", image_url: "https://x/y.png" },
					],
				},
				{ role: "assistant", content: "a" },
				{ type: "function_call", call_id: "c", name: "f", arguments: "{}" },
				{ type: "function_call_output", call_id: "c", output: "r" },
			],
		});
		const direct = responsesToChat(req, []).messages;
		const replayed = responsesToChat({ ...req, input: [] }, resolveReferences(inputItems(req, counter()), [])).messages;
		expect(replayed).toEqual(direct);
	});
});

describe("item references", () => {
	const stored: ResponseInputItem = {
		type: "message",
		id: "msg_a",
		role: "assistant",
		status: "completed",
		content: [{ type: "output_text", text: "earlier answer", annotations: [], logprobs: [] }],
	};
	const reasoning: ResponseInputItem = { type: "reasoning", id: "rs_a", summary: [] };
	const req = validateResponsesRequest({
		model: "m",
		input: [
			{ role: "user", content: "q" },
			{ type: "item_reference", id: "rs_a" },
			{ type: "item_reference", id: "msg_a" },
			{ role: "user", content: "again" },
		],
	});

	it("keeps references in the input items, without taking an id for them", () => {
		const items = inputItems(req, counter());
		expect(items.map((i) => [i.type, i.id])).toEqual([
			["message", "msg_1"],
			["item_reference", "rs_a"],
			["item_reference", "msg_a"],
			["message", "msg_2"],
		]);
		expect(referencedIds(items)).toEqual(["rs_a", "msg_a"]);
	});

	it("replaces each reference with its resolved item, in order", () => {
		const resolved = resolveReferences(inputItems(req, counter()), [reasoning, stored]);
		expect(resolved.map((i) => i.id)).toEqual(["msg_1", "rs_a", "msg_a", "msg_2"]);
		expect(resolved[2]).toBe(stored);
	});

	it("translates resolved references like replayed items: reasoning dropped, the message kept", () => {
		const items = resolveReferences(inputItems(req, counter()), [reasoning, stored]);
		expect(responsesToChat({ ...req, input: [] }, items).messages).toEqual([
			{ role: "user", content: "q" },
			{ role: "assistant", content: "earlier answer" },
			{ role: "user", content: "again" },
		]);
	});

	it("refuses to translate an unresolved reference", () => {
		expect(() => responsesToChat(req, [])).toThrow(/not resolved/);
	});

	it("refuses a resolution that does not match the references", () => {
		expect(() => resolveReferences(inputItems(req, counter()), [stored])).toThrow();
		expect(() => resolveReferences(inputItems(req, counter()), [reasoning, stored, stored])).toThrow();
	});

	it("names the id and the first input item referencing it in the 404", () => {
		const err = referenceNotFound(req.input, "msg_a");
		expect(err).toBeInstanceOf(GatewayError);
		const { status, body } = toErrorResponse(err);
		expect(status).toBe(404);
		expect(body.error).toMatchObject({ code: "not_found", param: "input[2].id", message: "Item with id 'msg_a' not found." });
	});
});
