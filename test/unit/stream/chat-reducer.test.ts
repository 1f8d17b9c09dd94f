/** The chat stream reducer (src/stream/chat-reducer.ts): what it counts as generated and forwarded. */
import { describe, expect, it } from "vitest";
import { ChatStreamReducer } from "../../../src/stream/chat-reducer";

const head = { id: "chatcmpl-eng", object: "chat.completion.chunk", created: 1700000000, model: "engine/m" };

describe("refusal text is generated output", () => {
	it("a streamed refusal counts toward the completion estimate and as content reaching the client", () => {
		// OpenAI's `delta.refusal` is relayed to the client (and assembled into `message.refusal` for
		// non-stream clients), but the reducer counts neither its characters nor that it was sent:
		// with no engine usage the refusal is free, and an engine error after it bills nothing.
		const r = new ChatStreamReducer({ promptTokensEstimate: 10 });
		const refusal = "I cannot help with that request. ".repeat(40);
		r.push({ type: "chunk", chunk: { ...head, choices: [{ index: 0, delta: { role: "assistant", refusal } }] }, data: "" });
		r.push({ type: "closed" });
		const end = r.end("engine_error");
		expect(end.contentForwarded).toBe(true);
		expect(end.usage.completion_tokens).toBeGreaterThan(0);
	});
});
