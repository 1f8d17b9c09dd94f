/**
 * The Messages stream encoder over the chat reducer: every Anthropic event type, in order, and
 * the official SDK's MessageStream rebuilds the same message from them.
 */
import { APIError } from "@anthropic-ai/sdk/core/error";
import { Stream } from "@anthropic-ai/sdk/core/streaming";
import { MessageStream } from "@anthropic-ai/sdk/lib/MessageStream";
import { describe, expect, it } from "vitest";
import { MessagesStreamEncoder } from "../../../src/messages/stream-encoder";
import { ChatStreamReducer } from "../../../src/stream/chat-reducer";
import { rewriteChatStream } from "../../../src/stream/chat-stream";
import type { EngineEvent } from "../../../src/stream/engine-events";
import { LiveToolCallRepair } from "../../../src/stream/tool-call-live-repair";

type Json = Record<string, unknown>;

function chunk(delta: Json, finish_reason: string | null = null, extra: Json = {}): EngineEvent {
	const c = {
		id: "chatcmpl-1",
		object: "chat.completion.chunk",
		created: 1,
		model: "engine",
		choices: [{ index: 0, delta, finish_reason, ...extra }],
	};
	return { type: "chunk", chunk: c, data: JSON.stringify(c) };
}

function usage(u: Json): EngineEvent {
	const c = { id: "chatcmpl-1", object: "chat.completion.chunk", created: 1, model: "engine", choices: [], usage: u };
	return { type: "chunk", chunk: c, data: JSON.stringify(c) };
}

const DONE: EngineEvent = { type: "done" };

/** The client's bytes for these engine events, as the stream pipeline would send them. */
function encode(events: EngineEvent[], stopSequences: string[] = []): string {
	const reducer = new ChatStreamReducer({ promptTokensEstimate: 42 });
	const encoder = new MessagesStreamEncoder({ model: "venym/qwen", inputTokens: 42, requestId: "req_1", stopSequences });
	// As the lane runs it: the live tool-call repair in front (src/chat/run-chat.ts).
	const live = new LiveToolCallRepair();
	let out = encoder.start();
	for (const e of events) {
		const f = reducer.push(e);
		if (f) out += encoder.chunks(live.push([f]));
		const outcome = reducer.outcome;
		if (outcome) return out + encoder.chunks(live.flush()) + encoder.finish(outcome, reducer);
	}
	throw new Error("the events never ended the stream");
}

function eventsOf(sse: string): Array<{ event: string; data: Json }> {
	return sse
		.split("\n\n")
		.filter(Boolean)
		.map((frame) => {
			const [eventLine, dataLine, ...rest] = frame.split("\n");
			expect(rest).toEqual([]);
			const event = (eventLine as string).replace(/^event: /, "");
			const data = JSON.parse((dataLine as string).replace(/^data: /, "")) as Json;
			expect(data.type).toBe(event);
			return { event, data };
		});
}

async function sdkMessage(sse: string) {
	const ndjson = eventsOf(sse)
		.filter((e) => e.event !== "ping")
		.map((e) => JSON.stringify(e.data))
		.join("\n");
	const body = new Response(`${ndjson}\n`).body as ReadableStream<Uint8Array>;
	return MessageStream.fromReadableStream(body).finalMessage();
}

const ENGINE_USAGE = { prompt_tokens: 30, completion_tokens: 9, total_tokens: 39, prompt_tokens_details: { cached_tokens: 10 } };

describe("MessagesStreamEncoder", () => {
	it("sends thinking, text and tool_use blocks with every event type, in order", async () => {
		const sse = encode([
			chunk({ role: "assistant", content: "" }),
			chunk({ reasoning_content: "Let me " }),
			chunk({ reasoning_content: "think." }),
			chunk({ content: "Sure," }),
			chunk({ content: " running it." }),
			chunk({ tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "Bash", arguments: "" } }] }),
			chunk({ tool_calls: [{ index: 0, function: { arguments: '{"command":' } }] }),
			chunk({ tool_calls: [{ index: 0, function: { arguments: '"ls"}' } }] }),
			chunk({ tool_calls: [{ index: 1, id: "call_2", type: "function", function: { name: "Read", arguments: "{}" } }] }),
			chunk({}, "tool_calls"),
			usage(ENGINE_USAGE),
			DONE,
		]);
		const events = eventsOf(sse);
		expect(
			events.map((e) => [
				e.event,
				(e.data.delta as Json | undefined)?.type ?? (e.data.content_block as Json | undefined)?.type ?? e.data.index ?? null,
			]),
		).toEqual([
			["message_start", null],
			["ping", null],
			["content_block_start", "thinking"],
			["content_block_delta", "thinking_delta"],
			["content_block_delta", "thinking_delta"],
			["content_block_delta", "signature_delta"],
			["content_block_stop", 0],
			["content_block_start", "text"],
			["content_block_delta", "text_delta"],
			["content_block_delta", "text_delta"],
			["content_block_stop", 1],
			// A tool call's input goes out as the engine streams it, one input_json_delta per piece.
			["content_block_start", "tool_use"],
			["content_block_delta", "input_json_delta"],
			["content_block_delta", "input_json_delta"],
			["content_block_stop", 2],
			["content_block_start", "tool_use"],
			["content_block_delta", "input_json_delta"],
			["content_block_stop", 3],
			["message_delta", null],
			["message_stop", null],
		]);
		const start = events[0]?.data.message as Json;
		expect(start).toMatchObject({ type: "message", role: "assistant", model: "venym/qwen", content: [], stop_reason: null });
		expect(start.usage).toMatchObject({ input_tokens: 42, output_tokens: 0 });
		expect(events.at(-2)?.data).toEqual({
			type: "message_delta",
			delta: { stop_reason: "tool_use", stop_sequence: null },
			usage: { input_tokens: 20, output_tokens: 9, cache_read_input_tokens: 10, cache_creation_input_tokens: 0 },
		});

		const message = await sdkMessage(sse);
		expect(message.content).toEqual([
			{ type: "thinking", thinking: "Let me think.", signature: expect.any(String) },
			{ type: "text", text: "Sure, running it." },
			{ type: "tool_use", id: "call_1", name: "Bash", input: { command: "ls" } },
			{ type: "tool_use", id: "call_2", name: "Read", input: {} },
		]);
		expect(message.usage).toMatchObject({ input_tokens: 20, output_tokens: 9, cache_read_input_tokens: 10 });
		expect(message.stop_reason).toBe("tool_use");
	});

	it("says which stop sequence matched, and estimates usage the engine never sent", async () => {
		const sse = encode([chunk({ content: "Hello there" }), chunk({}, "stop", { stop_reason: "END" }), DONE], ["END"]);
		const delta = eventsOf(sse).at(-2)?.data as { delta: Json; usage: Json };
		expect(delta.delta).toEqual({ stop_reason: "stop_sequence", stop_sequence: "END" });
		// No engine usage: the prompt estimate and ~4 characters a token.
		expect(delta.usage).toMatchObject({ input_tokens: 42, output_tokens: 3 });
		const message = await sdkMessage(sse);
		expect(message).toMatchObject({
			stop_reason: "stop_sequence",
			stop_sequence: "END",
			content: [{ type: "text", text: "Hello there" }],
		});
	});

	it("ends an engine failure with an error event and no message_stop", () => {
		const events = eventsOf(
			encode([
				chunk({ content: "partial" }),
				{ type: "error", error: { message: "CUDA out of memory", type: "server_error", code: null } },
			]),
		);
		expect(events.map((e) => e.event)).toEqual(["message_start", "ping", "content_block_start", "content_block_delta", "error"]);
		expect(events.at(-1)?.data).toEqual({
			type: "error",
			error: { type: "api_error", message: "The model engine failed while streaming the response." },
			request_id: "req_1",
		});
		const idle = eventsOf(encode([{ type: "error", error: { message: "idle", type: "server_error", code: null }, idle: true }]));
		// An engine gone quiet is a timeout, as the same cause is over HTTP (504 timeout_error), not an internal error.
		expect(idle.at(-1)?.data.error).toMatchObject({ type: "timeout_error", message: expect.stringMatching(/stopped sending/) });
		// An engine that closes without finishing is a failure too.
		expect(eventsOf(encode([chunk({ content: "a" }), { type: "closed" }])).at(-1)?.event).toBe("error");
	});

	it("gives the Anthropic SDK a stalled engine as an APIError of type timeout_error, thrown as it throws api_error", async () => {
		const thrown = async (events: EngineEvent[]) => {
			const res = new Response(encode(events), { headers: { "content-type": "text/event-stream" } });
			try {
				for await (const _ of Stream.fromSSEResponse(res, new AbortController())) {
					// Read to the error event.
				}
			} catch (err) {
				return err;
			}
			return null;
		};
		const idle = await thrown([
			chunk({ content: "a" }),
			{ type: "error", error: { message: "idle", type: "server_error", code: null }, idle: true },
		]);
		const failed = await thrown([
			chunk({ content: "a" }),
			{ type: "error", error: { message: "oom", type: "server_error", code: null } },
		]);
		expect(idle).toBeInstanceOf(APIError);
		expect(failed).toBeInstanceOf(APIError);
		expect([(idle as APIError).type, (failed as APIError).type]).toEqual(["timeout_error", "api_error"]);
		expect((idle as APIError).constructor).toBe((failed as APIError).constructor);
	});

	it("answers a stream with no content with a whole, empty message", async () => {
		const sse = encode([chunk({ role: "assistant", content: "" }, "stop"), DONE]);
		expect(eventsOf(sse).map((e) => e.event)).toEqual(["message_start", "ping", "message_delta", "message_stop"]);
		expect((await sdkMessage(sse)).content).toEqual([]);
	});
});

describe("pings while the engine is quiet", () => {
	it("sends ping events while waiting on a silent engine, and none once it speaks", async () => {
		const text = new TextEncoder();
		let engine!: ReadableStreamDefaultController<Uint8Array>;
		const upstream = new ReadableStream<Uint8Array>({
			start(c) {
				engine = c;
			},
		});
		const encoder = new MessagesStreamEncoder({ model: "m", inputTokens: 1, requestId: "req_1", pingEveryMs: 5 });
		const { stream } = rewriteChatStream(upstream, { model: "m", promptTokensEstimate: 1, encoder });
		const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
		let seen = "";
		const pings = () => seen.split("event: ping\n").length - 1;
		// message_start brings one ping; the silent engine brings more.
		while (pings() < 3) seen += (await reader.read()).value ?? "";
		const chunkOf = (delta: Json, finish: string | null = null) =>
			`data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "e", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
		engine.enqueue(text.encode(`${chunkOf({ content: "hi" })}${chunkOf({}, "stop")}data: [DONE]\n\n`));
		engine.close();
		for (;;) {
			const { done, value } = await reader.read();
			if (done) break;
			seen += value;
		}
		const events = eventsOf(seen).map((e) => e.event);
		expect(events.slice(-5)).toEqual([
			"content_block_start",
			"content_block_delta",
			"content_block_stop",
			"message_delta",
			"message_stop",
		]);
		expect(events.slice(0, 2)).toEqual(["message_start", "ping"]);
		expect(events.filter((e) => e === "ping").length).toBeGreaterThanOrEqual(3);
	});
});

/** A tool call's fragment in a chunk's `tool_calls`: the first of a call carries its id. */
const call = (index: number, fn: Json, id?: string) => ({ index, ...(id ? { id, type: "function" } : {}), function: fn });

describe("parallel tool calls whose fragments interleave", () => {
	it("interleaved parallel tool calls (index 0, 1, 0, 1) become two whole tool_use blocks", async () => {
		// OpenAI's format keys a call's fragments by `index`, not by order: an engine may send the
		// calls' headers first and their arguments after, interleaved.
		const sse = encode([
			chunk({ role: "assistant", tool_calls: [call(0, { name: "Read", arguments: "" }, "call_a")] }),
			chunk({ tool_calls: [call(1, { name: "Grep", arguments: "" }, "call_b")] }),
			chunk({ tool_calls: [call(0, { arguments: '{"path":' })] }),
			chunk({ tool_calls: [call(1, { arguments: '{"q":' })] }),
			chunk({ tool_calls: [call(0, { arguments: '"a.txt"}' })] }),
			chunk({ tool_calls: [call(1, { arguments: '"x"}' })] }),
			chunk({}, "tool_calls"),
			{ type: "done" },
		]);
		const starts = eventsOf(sse).filter((e) => e.event === "content_block_start");
		// Before the fix: six blocks, four of them tool_use blocks with an empty name and a made-up
		// id holding a fragment of another call's arguments.
		expect(starts.map((e) => e.data.content_block)).toEqual([
			expect.objectContaining({ type: "tool_use", id: "call_a", name: "Read" }),
			expect.objectContaining({ type: "tool_use", id: "call_b", name: "Grep" }),
		]);
		const message = await sdkMessage(sse);
		expect(message.content).toEqual([
			expect.objectContaining({ type: "tool_use", id: "call_a", name: "Read", input: { path: "a.txt" } }),
			expect.objectContaining({ type: "tool_use", id: "call_b", name: "Grep", input: { q: "x" } }),
		]);
	});
});

describe("a tool call's input as it streams", () => {
	/** The SDK's MessageStream events in order: each inputJson snapshot, and each block as it ends. */
	async function sdkEvents(sse: string): Promise<string[]> {
		const ndjson = eventsOf(sse)
			.filter((e) => e.event !== "ping")
			.map((e) => JSON.stringify(e.data))
			.join("\n");
		const stream = MessageStream.fromReadableStream(new Response(`${ndjson}\n`).body as ReadableStream<Uint8Array>);
		const seen: string[] = [];
		stream.on("inputJson", (_delta, snapshot) => seen.push(`input ${JSON.stringify(snapshot)}`));
		stream.on("contentBlock", (block) => seen.push(`block ${block.type}`));
		await stream.finalMessage();
		return seen;
	}

	it("reaches the Anthropic SDK piece by piece, before its block ends", async () => {
		const sse = encode([
			chunk({ role: "assistant", tool_calls: [call(0, { name: "Bash", arguments: "" }, "call_1")] }),
			chunk({ tool_calls: [call(0, { arguments: '{"command": "ec' })] }),
			chunk({ tool_calls: [call(0, { arguments: 'ho hi", "desc' })] }),
			chunk({ tool_calls: [call(0, { arguments: 'ription": "Print hi"}' })] }),
			chunk({}, "tool_calls"),
			{ type: "done" },
		]);
		// One inputJson event per engine piece (the SDK's partial parser leaves out an unfinished string).
		expect(await sdkEvents(sse)).toEqual([
			"input {}",
			'input {"command":"echo hi"}',
			'input {"command":"echo hi","description":"Print hi"}',
			"block tool_use",
		]);
		const pieces = eventsOf(sse)
			.map((e) => e.data.delta as Json | undefined)
			.filter((d) => d?.type === "input_json_delta")
			.map((d) => d?.partial_json);
		expect(pieces).toEqual(['{"command": "ec', 'ho hi", "desc', 'ription": "Print hi"}']);
	});

	it("ends an engine's broken input as a valid object, what was streamed kept", async () => {
		const sse = encode([
			chunk({ role: "assistant", tool_calls: [call(0, { name: "Bash", arguments: '{"command": "ls' }, "call_1")] }),
			chunk({ tool_calls: [call(0, { arguments: ' -la", ' })] }),
			chunk({}, "tool_calls"),
			{ type: "done" },
		]);
		const seen = await sdkEvents(sse);
		// Each piece went out up to the trailing comma the engine broke it with; the closing came at the end.
		expect(seen).toEqual(["input {}", 'input {"command":"ls -la"}', 'input {"command":"ls -la"}', "block tool_use"]);
		const pieces = eventsOf(sse)
			.map((e) => e.data.delta as Json | undefined)
			.filter((d) => d?.type === "input_json_delta")
			.map((d) => d?.partial_json);
		expect(pieces.slice(0, 2)).toEqual(['{"command": "ls', ' -la"']);
		expect(JSON.parse(pieces.join(""))).toEqual({ command: "ls -la" });
		const message = await sdkMessage(sse);
		expect(message.content).toEqual([{ type: "tool_use", id: "call_1", name: "Bash", input: { command: "ls -la" } }]);
	});
});
