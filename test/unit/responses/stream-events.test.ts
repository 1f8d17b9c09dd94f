import OpenAI, { APIError } from "openai";
import { accumulateResponse } from "openai/lib/responses/ResponseAccumulator";
import type { Response as SdkResponse, ResponseStreamEvent as SdkStreamEvent } from "openai/resources/responses/responses";
import { describe, expect, it } from "vitest";
import { responseFromCompletion } from "../../../src/responses/from-chat";
import type { ResponseStreamEvent } from "../../../src/responses/stream-events";
import { encodeEvent, ResponsesEventBuilder } from "../../../src/responses/stream-events";
import { citationAnnotations } from "../../../src/search/grounding";
import type { Source } from "../../../src/types";
import { responseMeta } from "../../support/response-meta";

const meta = (body: Record<string, unknown> = {}) => responseMeta({ stream: true, ...body });

type Json = Record<string, unknown>;

function chunk(delta: Json, finish_reason: string | null = null, extra: Json = {}): Json {
	return {
		id: "chatcmpl-1",
		object: "chat.completion.chunk",
		created: 1,
		model: "venym/qwen-27b",
		choices: [{ index: 0, delta, finish_reason }],
		...extra,
	};
}

function usageChunk(usage: Json): Json {
	return { id: "chatcmpl-1", object: "chat.completion.chunk", created: 1, model: "venym/qwen-27b", choices: [], usage };
}

const USAGE = { prompt_tokens: 12, completion_tokens: 34, total_tokens: 46, completion_tokens_details: { reasoning_tokens: 8 } };

function run(chunks: Json[], m = meta()): { events: ResponseStreamEvent[]; builder: ResponsesEventBuilder } {
	const builder = new ResponsesEventBuilder(m);
	const events = [...builder.start(), ...chunks.flatMap((c) => builder.chunk(c)), ...builder.finish()];
	return { events, builder };
}

/** What every stream must satisfy, whatever its content. */
function checkInvariants(events: ResponseStreamEvent[]): void {
	expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
	expect(events.slice(0, 2).map((e) => e.type)).toEqual(["response.created", "response.in_progress"]);
	const ids: string[] = [];
	let open: number | undefined;
	for (const e of events) {
		if (e.type === "response.output_item.added") {
			expect(open).toBeUndefined();
			expect(e.output_index).toBe(ids.length);
			ids.push(e.item.id ?? "");
			open = e.output_index;
		} else if (e.type === "response.output_item.done") {
			expect(e.output_index).toBe(open);
			expect(e.item.id).toBe(ids[e.output_index]);
			open = undefined;
		} else if ("item_id" in e) {
			expect(e.output_index).toBe(open);
			expect(e.item_id).toBe(ids[e.output_index]);
			if ("content_index" in e) expect(e.content_index).toBe(0);
		}
	}
}

/** The events as the SDK's own accumulator applies them, after a JSON round trip. */
function accumulate(events: ResponseStreamEvent[]): SdkResponse | undefined {
	let snapshot: SdkResponse | undefined;
	for (const e of events) {
		const wire = JSON.parse(encodeEvent(e).split("\n")[1]?.slice("data: ".length) ?? "null") as SdkStreamEvent;
		snapshot = accumulateResponse(wire, snapshot);
	}
	return snapshot;
}

function sseResponse(events: ResponseStreamEvent[]): Response {
	return new Response(events.map(encodeEvent).join(""), { headers: { "content-type": "text/event-stream" } });
}

function sdkClient(events: ResponseStreamEvent[]): OpenAI {
	return new OpenAI({ apiKey: "vk-test", baseURL: "http://gateway.test/v1", fetch: async () => sseResponse(events) });
}

interface Scenario {
	reasoning?: string[];
	reasoningField?: "reasoning_content" | "reasoning";
	content?: string[];
	calls?: Array<{ id?: string; name: string; args: string[] }>;
	finish: string;
	sources?: Source[];
}

/** The stream an engine would send for a scenario, through the gateway. */
function streamOf(s: Scenario): Json[] {
	const out: Json[] = [];
	if (s.sources) out.push({ object: "venym.sources", sources: s.sources });
	out.push(chunk({ role: "assistant", content: "" }));
	for (const r of s.reasoning ?? []) out.push(chunk({ [s.reasoningField ?? "reasoning_content"]: r }));
	for (const c of s.content ?? []) out.push(chunk({ content: c }));
	for (const [index, call] of (s.calls ?? []).entries()) {
		const [first = "", ...rest] = call.args;
		const head: Json = { index, type: "function", function: { name: call.name, arguments: first } };
		if (call.id) head.id = call.id;
		out.push(chunk({ tool_calls: [head] }));
		for (const a of rest) out.push(chunk({ tool_calls: [{ index, function: { arguments: a } }] }));
	}
	out.push(chunk({}, s.finish));
	out.push(usageChunk(USAGE));
	return out;
}

/** The non-streaming completion for the same scenario, as the gateway returns it. */
function completionOf(s: Scenario): Json {
	const content = (s.content ?? []).join("");
	const message: Json = { role: "assistant", content: content || null };
	if (s.reasoning) message[s.reasoningField ?? "reasoning_content"] = s.reasoning.join("");
	if (s.calls) {
		message.tool_calls = s.calls.map((c) => ({
			...(c.id ? { id: c.id } : {}),
			type: "function",
			function: { name: c.name, arguments: c.args.join("") },
		}));
	}
	if (s.sources) message.annotations = citationAnnotations(content, s.sources);
	return { object: "chat.completion", choices: [{ index: 0, message, finish_reason: s.finish }], usage: USAGE };
}

const SOURCES: Source[] = [
	{ title: "Paris - Wikipedia", url: "https://en.wikipedia.org/wiki/Paris" },
	{ title: "Insee", url: "https://www.insee.fr/" },
];

const scenarios: Array<[string, Scenario]> = [
	["plain text", { content: ["Hel", "lo ", "wörld 👋"], finish: "stop" }],
	["reasoning then text", { reasoning: ["Let me ", "think."], content: ["Four."], finish: "stop" }],
	["reasoning in the `reasoning` field", { reasoning: ["Hmm"], reasoningField: "reasoning", content: ["Ok"], finish: "stop" }],
	[
		"reasoning, text and two tool calls",
		{
			reasoning: ["Need weather."],
			content: ["Checking."],
			calls: [
				{ id: "call_a", name: "weather", args: ['{"city":', '"Paris"}'] },
				{ id: "call_b", name: "weather", args: ['{"city":"Rome"}'] },
			],
			finish: "tool_calls",
		},
	],
	["a tool call without an engine id", { calls: [{ name: "f", args: ["{}"] }], finish: "tool_calls" }],
	["text cut short by length", { content: ["Once upon", " a"], finish: "length" }],
	["a tool call cut short by length", { content: ["x"], calls: [{ id: "c", name: "f", args: ['{"a":'] }], finish: "length" }],
	["reasoning cut short by length", { reasoning: ["I am still"], finish: "length" }],
	["an empty answer", { finish: "stop" }],
	["a filtered answer", { content: ["Some"], finish: "content_filter" }],
	[
		"text citing web-search sources",
		{ content: ["Paris has 2.1M people [2]", " and is the capital [1]. [9]"], finish: "stop", sources: SOURCES },
	],
];

describe("ResponsesEventBuilder", () => {
	it("emits the events of reasoning, a message and two function calls in order", () => {
		const { events } = run(streamOf(scenarios[3]?.[1] as Scenario));
		expect(events.map((e) => `${e.type}${"output_index" in e ? `@${e.output_index}` : ""}`)).toEqual([
			"response.created",
			"response.in_progress",
			"response.output_item.added@0",
			"response.content_part.added@0",
			"response.reasoning_text.delta@0",
			"response.reasoning_text.done@0",
			"response.content_part.done@0",
			"response.output_item.done@0",
			"response.output_item.added@1",
			"response.content_part.added@1",
			"response.output_text.delta@1",
			"response.output_text.done@1",
			"response.content_part.done@1",
			"response.output_item.done@1",
			"response.output_item.added@2",
			"response.function_call_arguments.delta@2",
			"response.function_call_arguments.delta@2",
			"response.function_call_arguments.done@2",
			"response.output_item.done@2",
			"response.output_item.added@3",
			"response.function_call_arguments.delta@3",
			"response.function_call_arguments.done@3",
			"response.output_item.done@3",
			"response.completed",
		]);
	});

	it("carries the fields of the SDK's event types", () => {
		const { events } = run(
			streamOf({ content: ["Hi"], calls: [{ id: "call_1", name: "f", args: ["{}"] }], finish: "tool_calls" }),
		);
		expect(events[0]).toMatchObject({
			type: "response.created",
			sequence_number: 0,
			response: { id: "resp_abc", status: "in_progress", output: [], usage: null },
		});
		expect(events[1]).toMatchObject({ type: "response.in_progress", sequence_number: 1, response: { status: "in_progress" } });
		expect(events.slice(2, 9)).toEqual([
			{
				type: "response.output_item.added",
				sequence_number: 2,
				output_index: 0,
				item: { id: "msg_1", type: "message", status: "in_progress", content: [], role: "assistant" },
			},
			{
				type: "response.content_part.added",
				sequence_number: 3,
				item_id: "msg_1",
				output_index: 0,
				content_index: 0,
				part: { type: "output_text", annotations: [], logprobs: [], text: "" },
			},
			{
				type: "response.output_text.delta",
				sequence_number: 4,
				item_id: "msg_1",
				output_index: 0,
				content_index: 0,
				delta: "Hi",
				logprobs: [],
			},
			{
				type: "response.output_text.done",
				sequence_number: 5,
				item_id: "msg_1",
				output_index: 0,
				content_index: 0,
				text: "Hi",
				logprobs: [],
			},
			{
				type: "response.content_part.done",
				sequence_number: 6,
				item_id: "msg_1",
				output_index: 0,
				content_index: 0,
				part: { type: "output_text", annotations: [], logprobs: [], text: "Hi" },
			},
			{
				type: "response.output_item.done",
				sequence_number: 7,
				output_index: 0,
				item: {
					id: "msg_1",
					type: "message",
					status: "completed",
					content: [{ type: "output_text", annotations: [], logprobs: [], text: "Hi" }],
					role: "assistant",
				},
			},
			{
				type: "response.output_item.added",
				sequence_number: 8,
				output_index: 1,
				item: { id: "fc_2", type: "function_call", status: "in_progress", arguments: "", call_id: "call_1", name: "f" },
			},
		]);
		expect(events.slice(9, 12)).toEqual([
			{ type: "response.function_call_arguments.delta", sequence_number: 9, item_id: "fc_2", output_index: 1, delta: "{}" },
			{ type: "response.function_call_arguments.done", sequence_number: 10, item_id: "fc_2", output_index: 1, arguments: "{}" },
			{
				type: "response.output_item.done",
				sequence_number: 11,
				output_index: 1,
				item: { id: "fc_2", type: "function_call", status: "completed", arguments: "{}", call_id: "call_1", name: "f" },
			},
		]);
	});

	describe.each(scenarios)("for %s", (_name, scenario) => {
		const { events, builder } = run(streamOf(scenario));

		it("numbers events from 0 and keeps one well-formed item open at a time", () => {
			checkInvariants(events);
		});

		it("ends with the response the non-streaming path builds from the same content", () => {
			const expected = responseFromCompletion(completionOf(scenario), meta());
			expect(builder.response()).toEqual(expected);
			const last = events.at(-1);
			expect(last?.type).toBe(expected.status === "completed" ? "response.completed" : "response.incomplete");
			expect(last && "response" in last ? last.response : undefined).toEqual(expected);
		});

		it("accumulates in the openai SDK to the same output", () => {
			const beforeEnd = accumulate(events.slice(0, -1));
			expect(beforeEnd?.output).toEqual(builder.response().output);
			expect(accumulate(events)?.output).toEqual(builder.response().output);
		});
	});

	it("makes the incomplete item and response visible in the events", () => {
		const { events } = run(streamOf({ content: ["Once"], finish: "length" }));
		const itemDone = events.find((e) => e.type === "response.output_item.done");
		expect(itemDone && "item" in itemDone && "status" in itemDone.item ? itemDone.item.status : undefined).toBe("incomplete");
		expect(events.at(-1)).toMatchObject({
			type: "response.incomplete",
			response: { status: "incomplete", incomplete_details: { reason: "max_output_tokens" } },
		});
	});

	it("emits an annotation event for each cited source before the text is done", () => {
		const { events } = run(streamOf({ content: ["See [1]", " and [2]."], finish: "stop", sources: SOURCES }));
		const types = events.map((e) => e.type);
		const annotations = events.filter((e) => e.type === "response.output_text.annotation.added");
		expect(annotations.map((e) => ("annotation" in e ? e.annotation : null))).toEqual([
			{ type: "url_citation", start_index: 4, end_index: 7, url: SOURCES[0]?.url, title: SOURCES[0]?.title },
			{ type: "url_citation", start_index: 12, end_index: 15, url: SOURCES[1]?.url, title: SOURCES[1]?.title },
		]);
		expect(annotations.map((e) => ("annotation_index" in e ? e.annotation_index : -1))).toEqual([0, 1]);
		expect(types.lastIndexOf("response.output_text.annotation.added")).toBeLessThan(types.indexOf("response.output_text.done"));
	});

	it("takes the last usage an engine repeats, with token details", () => {
		const { builder } = run([
			chunk({ content: "a" }, null, { usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 } }),
			chunk({ content: "b" }, "stop", { usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } }),
			usageChunk({ prompt_tokens: 5, completion_tokens: 2, total_tokens: 7, prompt_tokens_details: { cached_tokens: 4 } }),
		]);
		expect(builder.response().usage).toEqual({
			input_tokens: 5,
			input_tokens_details: { cached_tokens: 4, cache_write_tokens: 0 },
			output_tokens: 2,
			output_tokens_details: { reasoning_tokens: 0 },
			total_tokens: 7,
		});
	});

	it("holds arguments that arrive before the call's name", () => {
		const { events, builder } = run([
			chunk({ tool_calls: [{ index: 0, id: "call_x", type: "function", function: { arguments: '{"a"' } }] }),
			chunk({ tool_calls: [{ index: 0, function: { name: "f", arguments: ":1}" } }] }),
			chunk({}, "tool_calls"),
		]);
		checkInvariants(events);
		expect(builder.response().output).toEqual([
			{ id: "fc_1", type: "function_call", status: "completed", arguments: '{"a":1}', call_id: "call_x", name: "f" },
		]);
		const deltas = events
			.filter((e) => e.type === "response.function_call_arguments.delta")
			.map((e) => ("delta" in e ? e.delta : ""));
		expect(deltas.join("")).toBe('{"a":1}');
	});

	it("tells whole tool calls without an index apart by their ids", () => {
		const { builder } = run([
			chunk({ tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: "{}" } }] }),
			chunk({ tool_calls: [{ id: "call_2", type: "function", function: { name: "g", arguments: '{"b":2}' } }] }),
			chunk({}, "tool_calls"),
		]);
		expect(builder.response().output.map((i) => (i.type === "function_call" ? [i.call_id, i.name, i.arguments] : null))).toEqual([
			["call_1", "f", "{}"],
			["call_2", "g", '{"b":2}'],
		]);
	});

	it("ignores choices other than the first", () => {
		const { builder } = run([
			{ choices: [{ index: 1, delta: { content: "other" }, finish_reason: null }] },
			chunk({ content: "mine" }, "stop"),
		]);
		const message = builder.response().output[0];
		expect(message?.type === "message" ? message.content[0]?.text : undefined).toBe("mine");
	});

	it("starts on its own when the first call is chunk()", () => {
		const builder = new ResponsesEventBuilder(meta());
		const events = builder.chunk(chunk({ content: "x" }));
		expect(events.slice(0, 2).map((e) => e.type)).toEqual(["response.created", "response.in_progress"]);
		expect(builder.start()).toEqual([]);
	});

	it("emits nothing after it has finished", () => {
		const { builder } = run(streamOf({ content: ["x"], finish: "stop" }));
		expect(builder.chunk(chunk({ content: "late" }))).toEqual([]);
		expect(builder.finish()).toEqual([]);
		expect(builder.fail({ code: "server_error", message: "x" })).toEqual([]);
	});

	it("reports the response so far while streaming", () => {
		const builder = new ResponsesEventBuilder(meta());
		builder.start();
		builder.chunk(chunk({ content: "Par" }));
		expect(builder.response()).toMatchObject({
			status: "in_progress",
			output: [{ type: "message", status: "in_progress", content: [{ text: "Par" }] }],
		});
	});

	it("streams to the official SDK, whose final response matches ours", async () => {
		const { events, builder } = run(streamOf(scenarios[3]?.[1] as Scenario));
		const stream = sdkClient(events).responses.stream({ model: "venym/qwen-27b", input: "Hi" });
		const seen: string[] = [];
		for await (const e of stream) seen.push(e.type);
		const final = await stream.finalResponse();
		expect(seen).toEqual(events.map((e) => e.type));
		// The SDK adds its own `parsed` / `parsed_arguments` fields to what it received.
		expect(final.output).toMatchObject(builder.response().output);
		expect(final.output_text).toBe("Checking.");
		expect(final.usage).toEqual(builder.response().usage);
	});
});

describe("reasoning summaries (reasoning.summary)", () => {
	const SUMMARY = { reasoning: { summary: "auto" } };
	const thinking: Scenario = { reasoning: ["Let me ", "think."], content: ["Four."], finish: "stop" };
	const NO_DETAILS = { prompt_tokens: 12, completion_tokens: 34, total_tokens: 46 };

	it.each(["auto", "concise", "detailed"])("streams the reasoning as summary events too when summary is %s", (summary) => {
		const { events, builder } = run(streamOf(thinking), meta({ reasoning: { summary } }));
		checkInvariants(events);
		expect(events.map((e) => `${e.type}${"output_index" in e ? `@${e.output_index}` : ""}`).slice(2, 13)).toEqual([
			"response.output_item.added@0",
			"response.content_part.added@0",
			"response.reasoning_summary_part.added@0",
			"response.reasoning_text.delta@0",
			"response.reasoning_summary_text.delta@0",
			"response.reasoning_text.delta@0",
			"response.reasoning_summary_text.delta@0",
			"response.reasoning_summary_text.done@0",
			"response.reasoning_summary_part.done@0",
			"response.reasoning_text.done@0",
			"response.content_part.done@0",
		]);
		const deltas = events.filter((e) => e.type === "response.reasoning_summary_text.delta");
		expect(deltas.map((e) => ("delta" in e ? e.delta : ""))).toEqual(["Let me ", "think."]);
		expect(events.find((e) => e.type === "response.reasoning_summary_part.done")).toMatchObject({
			item_id: "rs_1",
			summary_index: 0,
			part: { type: "summary_text", text: "Let me think." },
		});
		const item = { type: "reasoning", summary: [{ type: "summary_text", text: "Let me think." }] };
		expect(builder.response().output[0]).toMatchObject(item);
		// The same as the answer built in one piece, and as the SDK accumulates it.
		const whole = responseFromCompletion(completionOf(thinking) as never, meta({ reasoning: { summary } }));
		expect(whole.output).toEqual(builder.response().output);
		expect(accumulate(events)?.output[0]).toMatchObject(item);
	});

	it("reports the engine's reasoning tokens, else an estimate from the reasoning text", () => {
		const engine = run(streamOf(thinking), meta(SUMMARY)).builder.response();
		expect(engine.usage?.output_tokens_details.reasoning_tokens).toBe(8);
		const chunks = streamOf(thinking).map((c) => (c.usage ? usageChunk(NO_DETAILS) : c));
		const estimated = run(chunks, meta(SUMMARY)).builder.response();
		// "Let me think." is 13 characters: about 4 tokens.
		expect(estimated.usage?.output_tokens_details.reasoning_tokens).toBe(4);
		const whole = responseFromCompletion({ ...completionOf(thinking), usage: NO_DETAILS } as never, meta(SUMMARY));
		expect(whole.usage?.output_tokens_details.reasoning_tokens).toBe(4);
	});

	it("keeps today's reasoning items and usage without reasoning.summary", () => {
		const { events, builder } = run(
			streamOf(thinking).map((c) => (c.usage ? usageChunk(NO_DETAILS) : c)),
			meta(),
		);
		expect(events.some((e) => e.type.startsWith("response.reasoning_summary"))).toBe(false);
		expect(builder.response().output[0]).toMatchObject({ type: "reasoning", summary: [] });
		expect(builder.response().usage?.output_tokens_details.reasoning_tokens).toBe(0);
	});
});

describe("ResponsesEventBuilder.fail", () => {
	function failed() {
		const builder = new ResponsesEventBuilder(meta());
		const events = [
			...builder.start(),
			...builder.chunk(chunk({ reasoning_content: "Thinking" })),
			...builder.chunk(chunk({ content: "Half an ans" })),
			...builder.fail({ code: "server_error", message: "The model engine failed." }, { prompt_tokens: 7, completion_tokens: 3 }),
		];
		return { builder, events };
	}

	it("emits an error event then response.failed, closing nothing more", () => {
		const { events } = failed();
		const tail = events.slice(-2);
		expect(tail[0]).toEqual({
			type: "error",
			code: "server_error",
			message: "The model engine failed.",
			param: null,
			sequence_number: events.length - 2,
		});
		expect(tail[1]?.type).toBe("response.failed");
		const afterMessageStart = events.slice(
			events.findIndex((e) => e.type === "response.content_part.added" && e.output_index === 1),
		);
		expect(afterMessageStart.map((e) => e.type)).toEqual([
			"response.content_part.added",
			"response.output_text.delta",
			"error",
			"response.failed",
		]);
		expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
	});

	it("puts the error, the output so far and the usage in the failed response", () => {
		const { events, builder } = failed();
		const response = builder.response();
		expect(events.at(-1)).toMatchObject({ response });
		expect(response).toMatchObject({
			status: "failed",
			error: { code: "server_error", message: "The model engine failed." },
			usage: { input_tokens: 7, output_tokens: 3, total_tokens: 10 },
		});
		expect(response.output).toEqual([
			{ id: "rs_1", type: "reasoning", summary: [], content: [{ type: "reasoning_text", text: "Thinking" }] },
			{
				id: "msg_2",
				type: "message",
				status: "incomplete",
				content: [{ type: "output_text", annotations: [], logprobs: [], text: "Half an ans" }],
				role: "assistant",
			},
		]);
	});

	it("surfaces in the official SDK as an APIError with the message", async () => {
		const { events } = failed();
		const stream = sdkClient(events).responses.create({ model: "venym/qwen-27b", input: "Hi", stream: true });
		const seen: string[] = [];
		const error = await (async () => {
			try {
				for await (const e of await stream) seen.push(e.type);
			} catch (err) {
				return err;
			}
		})();
		expect(error).toBeInstanceOf(APIError);
		expect((error as APIError).message).toContain("The model engine failed.");
		expect(seen.at(-1)).toBe("response.output_text.delta");
	});
});

describe("encodeEvent", () => {
	it("writes the event name, one data line and a blank line", () => {
		const [created] = new ResponsesEventBuilder(meta({ instructions: "line one\nline two" })).start();
		const frame = encodeEvent(created as ResponseStreamEvent);
		const lines = frame.split("\n");
		expect(lines[0]).toBe("event: response.created");
		expect(lines[1]?.startsWith("data: ")).toBe(true);
		expect(JSON.parse(lines[1]?.slice(6) ?? "")).toEqual(created);
		expect(lines.slice(2)).toEqual(["", ""]);
	});
});
