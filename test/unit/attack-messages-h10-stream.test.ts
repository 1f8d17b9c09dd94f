/**
 * Attack on the Messages stream encoder: engine streams that the OpenAI chat format allows and
 * the encoder turns into a malformed Anthropic message. Each test fails until it is fixed.
 */
import { MessageStream } from "@anthropic-ai/sdk/lib/MessageStream";
import { describe, expect, it } from "vitest";
import { MessagesStreamEncoder } from "../../src/messages/stream-encoder";
import { ChatStreamReducer } from "../../src/stream/chat-reducer";
import type { EngineEvent } from "../../src/stream/engine-events";

type Json = Record<string, unknown>;

function chunk(delta: Json, finish_reason: string | null = null): EngineEvent {
	const c = {
		id: "chatcmpl-1",
		object: "chat.completion.chunk",
		created: 1,
		model: "engine",
		choices: [{ index: 0, delta, finish_reason }],
	};
	return { type: "chunk", chunk: c, data: JSON.stringify(c) };
}

function encode(events: EngineEvent[]): string {
	const reducer = new ChatStreamReducer({ promptTokensEstimate: 42 });
	const encoder = new MessagesStreamEncoder({ model: "venym/qwen", inputTokens: 42, requestId: "req_1" });
	let out = encoder.start();
	for (const e of events) {
		const f = reducer.push(e);
		if (f) out += encoder.chunks([f]);
		const outcome = reducer.outcome;
		if (outcome) return out + encoder.finish(outcome, reducer);
	}
	throw new Error("the events never ended the stream");
}

function eventsOf(sse: string): Array<{ event: string; data: Json }> {
	return sse
		.split("\n\n")
		.filter(Boolean)
		.map((frame) => {
			const [eventLine, dataLine] = frame.split("\n");
			return {
				event: (eventLine as string).replace(/^event: /, ""),
				data: JSON.parse((dataLine as string).replace(/^data: /, "")) as Json,
			};
		});
}

async function sdkMessage(sse: string) {
	const ndjson = eventsOf(sse)
		.filter((e) => e.event !== "ping")
		.map((e) => JSON.stringify(e.data))
		.join("\n");
	return MessageStream.fromReadableStream(new Response(`${ndjson}\n`).body as ReadableStream<Uint8Array>).finalMessage();
}

const call = (index: number, fn: Json, id?: string) => ({ index, ...(id ? { id, type: "function" } : {}), function: fn });

describe("Messages stream attack", () => {
	// Known, not fixed yet (session 8 closing note): `it.fails` turns red once it is fixed.
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
