/**
 * A stream whose client goes away without cancelling it: workerd drops a response body it is not
 * reading when the client disconnects and fires the request's signal instead. The signal must end
 * the stream as a cancel would (done resolves client_disconnected, the engine is aborted), or
 * settlement, which waits on done, never runs and the hold stays open.
 */
import { describe, expect, it, onTestFinished, vi } from "vitest";
import { type ChatStreamOptions, rewriteChatStream, type StreamEnd } from "../../../src/stream/chat-stream";
import * as t from "../../fixtures/transcripts";
import { upstreamOf } from "../../support/fake-upstream";
import { microtasksDone } from "../../support/microtasks";

const PROMPT_ESTIMATE = 50;
const encoder = new TextEncoder();

/** The engine's frames, one per read; then it closes (its answer is complete) or hangs. */
function engine(transcript: string, end: "close" | "hang") {
	return upstreamOf(
		transcript.split(/(?<=\n\n)/).map((f) => encoder.encode(f)),
		end,
	);
}

function options(extra: Partial<ChatStreamOptions> = {}): ChatStreamOptions {
	return { model: "venym/test", promptTokensEstimate: PROMPT_ESTIMATE, ...extra };
}

/** `done`, or "pending" if nothing but a timer (there is none here) could resolve it now. */
function settledNow(done: Promise<StreamEnd>): Promise<StreamEnd | "pending"> {
	return Promise.race([done, microtasksDone().then(() => "pending" as const)]);
}

describe("a stream whose client goes away without a cancel", () => {
	it("ends client_disconnected when the signal fires after the client stopped reading, billing what was forwarded", async () => {
		const upstream = engine(t.ollamaNoUsage, "close");
		const client = new AbortController();
		const aborts: unknown[] = [];
		const { stream, done } = rewriteChatStream(upstream.stream, options({ clientSignal: client.signal }), (r) => aborts.push(r));
		const reader = stream.getReader();
		expect(new TextDecoder().decode((await reader.read()).value)).toContain("héllo");
		// The client reads no more and the runtime never cancels the body: nothing pulls, nothing ends.
		expect(await settledNow(done)).toBe("pending");

		const reason = new Error("client disconnected");
		client.abort(reason);
		const end = await done;
		expect(end.status).toBe("client_disconnected");
		expect(end.contentForwarded).toBe(true);
		// "héllo" was read and " 👋" sat in the queue: both were forwarded, " 世界" never was.
		expect(end.usage).toEqual({ prompt_tokens: PROMPT_ESTIMATE, completion_tokens: 2, total_tokens: PROMPT_ESTIMATE + 2 });
		expect(end.estimated).toBe(true);
		expect(upstream.state.cancelled).toBe(true);
		expect(aborts).toEqual([reason]);
		// The body ends (after what was already queued), so whatever still holds it stops waiting.
		expect(new TextDecoder().decode((await reader.read()).value)).toContain("👋");
		expect((await reader.read()).done).toBe(true);
	});

	it("ends client_disconnected when the signal fires while a read waits on the engine", async () => {
		const upstream = engine(`${t.ollamaNoUsage.split("\n\n")[0]}\n\n`, "hang");
		const client = new AbortController();
		const aborts: unknown[] = [];
		const { stream, done } = rewriteChatStream(upstream.stream, options({ clientSignal: client.signal }), (r) => aborts.push(r));
		const reader = stream.getReader();
		await reader.read();
		const pending = reader.read();
		client.abort("gone");
		expect((await pending).done).toBe(true);
		expect(await done).toMatchObject({ status: "client_disconnected", contentForwarded: true });
		expect(upstream.state.cancelled).toBe(true);
		expect(aborts).toEqual(["gone"]);
	});

	it("ends at once, with nothing forwarded, when the client left before the stream was made", async () => {
		const upstream = engine(t.ollamaNoUsage, "close");
		const { stream, done } = rewriteChatStream(upstream.stream, options({ clientSignal: AbortSignal.abort("gone") }));
		expect(await done).toMatchObject({ status: "client_disconnected", contentForwarded: false });
		expect(upstream.state.cancelled).toBe(true);
		expect((await stream.getReader().read()).done).toBe(true);
	});

	it("changes nothing once the stream has ended", async () => {
		const client = new AbortController();
		const aborts: unknown[] = [];
		const { stream, done } = rewriteChatStream(
			engine(t.vllmContinuousUsage, "close").stream,
			options({ clientSignal: client.signal }),
			(r) => aborts.push(r),
		);
		await new Response(stream).text();
		client.abort("late");
		expect((await done).status).toBe("completed");
		expect(aborts).toEqual([]);
	});

	it("a client that stops reading is not an idle engine: only the signal (or a cancel) ends the stream", async () => {
		// Many idle timeouts go by on a fake clock (the idle watch's timer and Date.now).
		vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
		onTestFinished(() => {
			vi.useRealTimers();
		});
		const upstream = engine(t.ollamaNoUsage, "close");
		const client = new AbortController();
		const aborts: unknown[] = [];
		const { stream, done } = rewriteChatStream(
			upstream.stream,
			options({ clientSignal: client.signal, idleTimeoutMs: 10 }),
			(r) => aborts.push(r),
		);
		await stream.getReader().read();
		// Eight idle timeouts long: backpressure, not a stalled engine.
		await vi.advanceTimersByTimeAsync(80);
		expect(await settledNow(done)).toBe("pending");
		expect(aborts).toEqual([]);
		client.abort("gone");
		expect((await done).status).toBe("client_disconnected");
	});
});
