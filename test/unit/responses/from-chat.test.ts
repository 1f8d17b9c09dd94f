import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { responseFromCompletion } from "../../../src/responses/from-chat";
import { cancelledResponse, failedResponse, inProgressResponse, queuedResponse } from "../../../src/responses/response-object";
import { responseMeta } from "../../support/response-meta";

const meta = responseMeta;

function completion(
	message: Record<string, unknown>,
	finish_reason = "stop",
	usage: unknown = { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
) {
	return {
		id: "chatcmpl-1",
		object: "chat.completion",
		model: "venym/qwen-27b",
		choices: [{ index: 0, message: { role: "assistant", ...message }, finish_reason }],
		usage,
	};
}

describe("responseFromCompletion", () => {
	it("builds the full response for a plain answer, echoing defaults", () => {
		expect(responseFromCompletion(completion({ content: "Hello!" }), meta())).toEqual({
			id: "resp_abc",
			object: "response",
			created_at: 1_700_000_000,
			status: "completed",
			background: false,
			error: null,
			incomplete_details: null,
			instructions: null,
			max_output_tokens: null,
			metadata: {},
			model: "venym/qwen-27b",
			output: [
				{
					id: "msg_1",
					type: "message",
					status: "completed",
					role: "assistant",
					content: [{ type: "output_text", text: "Hello!", annotations: [], logprobs: [] }],
				},
			],
			parallel_tool_calls: true,
			previous_response_id: null,
			reasoning: { effort: null, summary: null },
			store: true,
			temperature: null,
			text: { format: { type: "text" } },
			tool_choice: "auto",
			tools: [],
			top_p: null,
			truncation: "disabled",
			usage: {
				input_tokens: 10,
				input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
				output_tokens: 5,
				output_tokens_details: { reasoning_tokens: 0 },
				total_tokens: 15,
			},
		});
	});

	it("does not put the SDK-computed output_text on the wire", () => {
		expect(responseFromCompletion(completion({ content: "x" }), meta())).not.toHaveProperty("output_text");
	});

	it("echoes the request's settings", () => {
		const r = responseFromCompletion(
			completion({ content: "x" }),
			meta({
				instructions: "Sys",
				max_output_tokens: 64,
				metadata: { k: "v" },
				parallel_tool_calls: false,
				previous_response_id: "resp_prev",
				temperature: 0.3,
				top_p: 0.5,
				tool_choice: "required",
				tools: [{ type: "function", name: "f", parameters: { type: "object" } }],
				text: { format: { type: "json_object" }, verbosity: "high" },
				reasoning: { effort: "low" },
				store: false,
				background: true,
				user: "u1",
				truncation: "auto",
			}),
		);
		expect(r).toMatchObject({
			instructions: "Sys",
			max_output_tokens: 64,
			metadata: { k: "v" },
			parallel_tool_calls: false,
			previous_response_id: "resp_prev",
			temperature: 0.3,
			top_p: 0.5,
			tool_choice: "required",
			tools: [{ type: "function", name: "f", description: null, parameters: { type: "object" }, strict: null }],
			text: { format: { type: "json_object" }, verbosity: "high" },
			reasoning: { effort: "low", summary: null },
			store: false,
			background: true,
			user: "u1",
			truncation: "auto",
		});
	});

	it("orders reasoning, message and function calls, with ids from the generator", () => {
		const r = responseFromCompletion(
			completion(
				{
					reasoning_content: "Think.",
					content: "Calling.",
					tool_calls: [
						{ id: "call_a", type: "function", function: { name: "f", arguments: '{"a":1}' } },
						{ type: "function", function: { name: "g", arguments: "{}" } },
					],
				},
				"tool_calls",
			),
			meta(),
		);
		expect(r.status).toBe("completed");
		expect(r.output).toEqual([
			{ id: "rs_1", type: "reasoning", summary: [], content: [{ type: "reasoning_text", text: "Think." }] },
			{
				id: "msg_2",
				type: "message",
				status: "completed",
				role: "assistant",
				content: [{ type: "output_text", text: "Calling.", annotations: [], logprobs: [] }],
			},
			{ id: "fc_3", type: "function_call", status: "completed", call_id: "call_a", name: "f", arguments: '{"a":1}' },
			{ id: "fc_4", type: "function_call", status: "completed", call_id: "call_5", name: "g", arguments: "{}" },
		]);
	});

	it("reads reasoning from the `reasoning` field too, and leaves out an empty message beside tool calls", () => {
		const r = responseFromCompletion(
			completion({
				reasoning: "Hmm.",
				content: null,
				tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: "{}" } }],
			}),
			meta(),
		);
		expect(r.output.map((i) => i.type)).toEqual(["reasoning", "function_call"]);
	});

	it("still gives an empty message when the answer is empty", () => {
		const r = responseFromCompletion(completion({ content: "" }), meta());
		expect(r.output).toEqual([
			{
				id: "msg_1",
				type: "message",
				status: "completed",
				role: "assistant",
				content: [{ type: "output_text", text: "", annotations: [], logprobs: [] }],
			},
		]);
	});

	it("converts chat url_citation annotations to the flat Responses shape", () => {
		const r = responseFromCompletion(
			completion({
				content: "Paris [1].",
				annotations: [
					{ type: "url_citation", url_citation: { start_index: 6, end_index: 9, title: "Wiki", url: "https://w.example/paris" } },
				],
			}),
			meta(),
		);
		const message = r.output[0];
		expect(message?.type === "message" && message.content[0]?.annotations).toEqual([
			{ type: "url_citation", start_index: 6, end_index: 9, url: "https://w.example/paris", title: "Wiki" },
		]);
	});

	it("is incomplete with max_output_tokens when the engine stopped for length", () => {
		const r = responseFromCompletion(completion({ content: "Cut sh" }, "length"), meta());
		expect(r.status).toBe("incomplete");
		expect(r.incomplete_details).toEqual({ reason: "max_output_tokens" });
		expect(r.output[0]).toMatchObject({ type: "message", status: "incomplete" });
	});

	it("is incomplete with content_filter when the engine filtered the answer", () => {
		const r = responseFromCompletion(completion({ content: "" }, "content_filter"), meta());
		expect(r.status).toBe("incomplete");
		expect(r.incomplete_details).toEqual({ reason: "content_filter" });
	});

	it("marks only the last item incomplete", () => {
		const r = responseFromCompletion(
			completion(
				{ content: "a", tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: '{"x' } }] },
				"length",
			),
			meta(),
		);
		expect(r.output.map((i) => ("status" in i ? i.status : undefined))).toEqual(["completed", "incomplete"]);
	});

	it("takes cached and reasoning token details from chat usage", () => {
		const r = responseFromCompletion(
			completion({ content: "x" }, "stop", {
				prompt_tokens: 100,
				completion_tokens: 40,
				prompt_tokens_details: { cached_tokens: 64 },
				completion_tokens_details: { reasoning_tokens: 30 },
			}),
			meta(),
		);
		expect(r.usage).toEqual({
			input_tokens: 100,
			input_tokens_details: { cached_tokens: 64, cache_write_tokens: 0 },
			output_tokens: 40,
			output_tokens_details: { reasoning_tokens: 30 },
			total_tokens: 140,
		});
	});

	it("has null usage when the completion carries none", () => {
		expect(responseFromCompletion(completion({ content: "x" }, "stop", null), meta()).usage).toBeNull();
	});

	it("reads as a Response in the official SDK, which computes output_text", async () => {
		const body = responseFromCompletion(completion({ reasoning_content: "r", content: "Hello SDK" }), meta());
		const client = new OpenAI({
			apiKey: "vk-test",
			baseURL: "http://gateway.test/v1",
			fetch: async () => new Response(JSON.stringify(body), { headers: { "content-type": "application/json" } }),
		});
		const r = await client.responses.create({ model: "venym/qwen-27b", input: "Hi" });
		expect(r.output_text).toBe("Hello SDK");
		expect(r.output).toEqual(body.output);
	});
});

describe("status responses", () => {
	const m = meta({ background: true });

	it("queued and in_progress have no output and no usage", () => {
		for (const [r, status] of [
			[queuedResponse(m), "queued"],
			[inProgressResponse(m), "in_progress"],
		] as const) {
			expect(r).toMatchObject({ id: "resp_abc", status, output: [], usage: null, error: null, background: true });
		}
	});

	it("failed carries the error and whatever output and usage there was", () => {
		const partial = responseFromCompletion(completion({ content: "part" }), meta());
		const r = failedResponse(
			m,
			{ code: "server_error", message: "The engine failed." },
			{ output: partial.output, usage: partial.usage },
		);
		expect(r.status).toBe("failed");
		expect(r.error).toEqual({ code: "server_error", message: "The engine failed." });
		expect(r.output).toEqual(partial.output);
		expect(r.usage).toEqual(partial.usage);
		expect(failedResponse(m, { code: "server_error", message: "x" })).toMatchObject({ output: [], usage: null });
	});

	it("cancelled has status cancelled", () => {
		expect(cancelledResponse(m)).toMatchObject({ status: "cancelled", output: [], usage: null, error: null });
	});
});
