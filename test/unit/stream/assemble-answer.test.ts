/**
 * A non-stream client's answer, read through the chat pipe with no client stream around it
 * (pipe-engine-stream.ts `drainEngineStream`): the answer, the client leaving while the engine is
 * read, and an answer too large for a body each end the pipe once, the way the stream lane's do.
 */
import { describe, expect, it } from "vitest";
import { assembleAnswer } from "../../../src/stream/assemble-answer";
import { MAX_ASSEMBLED_CHARS } from "../../../src/stream/completion-assembler";
import { EngineEventReader } from "../../../src/stream/engine-events";
import { upstreamOf } from "../../support/fake-upstream";

const head = { id: "chatcmpl-eng", object: "chat.completion.chunk", created: 1700000000, model: "engine/m" };
const frame = (delta: Record<string, unknown>, finish: string | null = null) =>
	`data: ${JSON.stringify({ ...head, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const usage = `data: ${JSON.stringify({ ...head, choices: [], usage: { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 } })}\n\n`;
const bytes = (frames: string[]) => frames.map((f) => new TextEncoder().encode(f));

const options = (clientSignal?: AbortSignal) => ({
	object: "chat.completion" as const,
	promptTokensEstimate: 7,
	bounds: { maxPromptTokens: 100, maxCompletionTokens: 100_000 },
	idleTimeoutMs: 0,
	clientSignal,
});

describe("assembleAnswer", () => {
	it("reads the engine's stream to its end and puts the answer together", async () => {
		const upstream = upstreamOf(
			bytes([frame({ role: "assistant", content: "Hel" }), frame({ content: "lo" }, "stop"), usage, "data: [DONE]\n\n"]),
		);
		const aborts: unknown[] = [];
		const answer = await assembleAnswer(new EngineEventReader(upstream.stream), options(), (r) => aborts.push(r));
		expect(answer.end.status).toBe("completed");
		expect(answer.overflowed).toBe(false);
		expect(answer.end.usage).toEqual({ prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 });
		const body = answer.body("venym/m") as { model: string; choices: { message: { content: string } }[] };
		expect(body.model).toBe("venym/m");
		expect(body.choices[0]?.message.content).toBe("Hello");
		expect(aborts).toEqual([]);
	});

	it("ends client_disconnected, with the engine aborted, when the client leaves while the engine is read", async () => {
		const upstream = upstreamOf(bytes([frame({ role: "assistant", content: "Hel" })]), "hang");
		const client = new AbortController();
		const aborts: unknown[] = [];
		const pending = assembleAnswer(new EngineEventReader(upstream.stream), options(client.signal), (r) => aborts.push(r));
		const reason = new Error("client disconnected");
		client.abort(reason);
		const answer = await pending;
		expect(answer.end.status).toBe("client_disconnected");
		expect(answer.overflowed).toBe(false);
		expect(upstream.state.cancelled).toBe(true);
		expect(aborts).toEqual([reason]);
	});

	it("stops at an answer too large for a body: overflowed, an engine error, the engine aborted once", async () => {
		const piece = "x".repeat(1024 * 1024);
		const frames = [frame({ role: "assistant", content: piece })];
		for (let i = 0; i * piece.length <= MAX_ASSEMBLED_CHARS; i++) frames.push(frame({ content: piece }));
		const upstream = upstreamOf(bytes([...frames, "data: [DONE]\n\n"]));
		const aborts: unknown[] = [];
		const answer = await assembleAnswer(new EngineEventReader(upstream.stream), options(), (r) => aborts.push(r));
		expect(answer.overflowed).toBe(true);
		expect(answer.end.status).toBe("engine_error");
		expect(aborts).toHaveLength(1);
		expect(String(aborts[0])).toContain("too large for a non-stream response");
		expect(upstream.state.cancelled).toBe(true);
		// The engine was not read to its end.
		expect(upstream.state.reads).toBeLessThan(frames.length + 1);
	});
});

describe("assembleAnswer with a node key", () => {
	const KEY = "node-key-0123456789abcdef";
	const escaped = Array.from(KEY, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`).join("");

	it("lets no field carry it: the engine's id, fingerprint, usage extras, as written or \\u-escaped", async () => {
		for (const value of [`Bearer ${KEY}`, escaped]) {
			const raw = (s: string) => s.replace("@", value);
			const upstream = upstreamOf(
				bytes([
					raw(
						`data: {"id":"chatcmpl-@","object":"chat.completion.chunk","created":1,"model":"e","system_fingerprint":"@","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n`,
					),
					raw(
						`data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"e","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8,"debug":"@"}}\n\n`,
					),
					"data: [DONE]\n\n",
				]),
			);
			const answer = await assembleAnswer(new EngineEventReader(upstream.stream), { ...options(), secrets: [KEY] }, () => {});
			expect(answer.end.status).toBe("completed");
			const text = JSON.stringify(answer.body("venym/m"));
			expect(text, value).not.toContain(KEY);
			expect(text).toContain("hi");
		}
	});
});
