/**
 * A stream moves at the pace its client reads: the engine is read only as the client takes
 * frames (a small bounded read-ahead, never the whole answer), and a client that takes nothing
 * for `clientIdleTimeoutMs` (gone without the runtime saying so, or paused) has its stream ended
 * as client_disconnected, the engine request aborted, so settlement runs and the hold is freed.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { callEngine } from "../../../src/engine/call-engine";
import { type ChatStreamOptions, rewriteChatStream, type StreamEnd } from "../../../src/stream/chat-stream";
import { ClientIdleError } from "../../../src/stream/pipe-engine-stream";

const encoder = new TextEncoder();
const IDLE_MS = 5_000;

function frame(i: number): Uint8Array {
	const chunk = {
		id: "c",
		object: "chat.completion.chunk",
		created: 1,
		model: "m",
		choices: [{ index: 0, delta: { content: `w${i} ` } }],
	};
	return encoder.encode(`data: ${JSON.stringify(chunk)}\n\n`);
}

/** An engine that generates for as long as it is read: one frame per read, never ending on its own. */
function endlessEngine() {
	const state = { reads: 0, cancelled: false };
	const stream = new ReadableStream<Uint8Array>(
		{
			pull(controller) {
				controller.enqueue(frame(state.reads++));
			},
			cancel() {
				state.cancelled = true;
			},
		},
		{ highWaterMark: 0 },
	);
	return { stream, state };
}

function options(extra: Partial<ChatStreamOptions> = {}): ChatStreamOptions {
	return { model: "venym/test", promptTokensEstimate: 10, clientIdleTimeoutMs: IDLE_MS, ...extra };
}

/** Lets every promise chain that can move, move (fake timers stand still). */
async function drain(): Promise<void> {
	for (let i = 0; i < 50; i++) await Promise.resolve();
}

function state(done: Promise<StreamEnd>) {
	let end: StreamEnd | undefined;
	void done.then((e) => {
		end = e;
	});
	return () => end;
}

describe("a stream whose client stops reading", () => {
	beforeEach(() => {
		vi.useFakeTimers();
	});
	afterEach(() => {
		vi.useRealTimers();
	});

	it("is ended as client_disconnected after clientIdleTimeoutMs, the engine aborted, billing what was forwarded", async () => {
		const engine = endlessEngine();
		const aborts: unknown[] = [];
		const { stream, done, frames } = rewriteChatStream(engine.stream, options(), (r) => aborts.push(r));
		const ended = state(done);
		const reader = stream.getReader();
		await reader.read();
		await drain();
		const sent = frames();

		await vi.advanceTimersByTimeAsync(IDLE_MS - 1);
		expect(ended()).toBeUndefined();
		expect(engine.state.cancelled).toBe(false);

		await vi.advanceTimersByTimeAsync(1);
		const end = ended();
		expect(end).toMatchObject({ status: "client_disconnected", contentForwarded: true, clientIdleTimedOut: true });
		expect(end?.usage.completion_tokens).toBeGreaterThan(0);
		expect(engine.state.cancelled).toBe(true);
		expect(aborts).toHaveLength(1);
		expect(aborts[0]).toBeInstanceOf(ClientIdleError);
		// Nothing more was handed out while the client read nothing: no progress to renew a hold on.
		expect(frames()).toBe(sent);
		// The body is errored, so the runtime drops the connection instead of flushing into it.
		await expect(reader.read()).rejects.toBeInstanceOf(ClientIdleError);
	});

	it("is never cut while the client keeps taking frames, however long the stream lasts", async () => {
		const engine = endlessEngine();
		const { stream, done } = rewriteChatStream(engine.stream, options());
		const ended = state(done);
		const reader = stream.getReader();
		for (let i = 0; i < 10; i++) {
			await reader.read();
			await vi.advanceTimersByTimeAsync(IDLE_MS - 100);
		}
		expect(ended()).toBeUndefined();
		expect(engine.state.cancelled).toBe(false);
		await reader.cancel();
	});

	it("does not count time spent waiting on the engine against the client", async () => {
		let release!: () => void;
		const gate = new Promise<void>((r) => {
			release = r;
		});
		let reads = 0;
		const engineBody = new ReadableStream<Uint8Array>(
			{
				async pull(controller) {
					if (reads === 1) await gate;
					controller.enqueue(frame(reads++));
				},
			},
			{ highWaterMark: 0 },
		);
		const { stream, done } = rewriteChatStream(engineBody, options());
		const ended = state(done);
		const reader = stream.getReader();
		await reader.read();
		// The client asks for more; the engine takes three timeouts to answer.
		const next = reader.read();
		await vi.advanceTimersByTimeAsync(IDLE_MS * 3);
		expect(ended()).toBeUndefined();
		release();
		expect(new TextDecoder().decode((await next).value)).toContain("w1");
		await reader.cancel();
	});

	it("reads the engine no further ahead than a frame or two, whatever the engine has ready", async () => {
		const engine = endlessEngine();
		// Through the engine call, as in production (the body is read as it came).
		const answer = await callEngine({
			targets: [{ model: "m", nodes: [{ url: "http://node.test", weight: 1 } as never], body: "{}" }],
			path: "/chat/completions",
			secrets: {},
			firstByteTimeoutMs: 1000,
			fetch: async () => new Response(engine.stream, { headers: { "content-type": "text/event-stream" } }),
		});
		const { stream } = rewriteChatStream(
			answer.takeBody().body as ReadableStream<Uint8Array>,
			options({ clientIdleTimeoutMs: 0 }),
		);
		const reader = stream.getReader();
		await reader.read();
		await reader.read();
		await vi.advanceTimersByTimeAsync(60_000);
		await drain();
		// Two frames taken; the pass-through may hold a couple more, never the rest of the answer.
		expect(engine.state.reads).toBeLessThanOrEqual(6);
		await reader.cancel();
		await drain();
		expect(engine.state.cancelled).toBe(true);
	});
});
