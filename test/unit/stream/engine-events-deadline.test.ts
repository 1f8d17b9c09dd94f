/** The request's deadline on an answer being read: a stream ends as a timeout, a body as 504, the engine request aborted. */
import { describe, expect, it } from "vitest";
import { readEngineBody } from "../../../src/engine/read-body";
import { EngineEventReader } from "../../../src/stream/engine-events";

/** A body that sends `first` and then stays open, sending nothing, until cancelled. */
function openBody(first: string): ReadableStream<Uint8Array> {
	return new ReadableStream<Uint8Array>({
		start(ctl) {
			ctl.enqueue(new TextEncoder().encode(first));
		},
	});
}

const CHUNK = `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: "hi" } }] })}\n\n`;

describe("the request's deadline", () => {
	it("ends an engine stream that is still going as a timeout, and aborts the engine request", async () => {
		const aborted: unknown[] = [];
		const reader = new EngineEventReader(openBody(CHUNK), {
			idleTimeoutMs: 60_000,
			abortEngine: (reason) => aborted.push(reason),
			deadlineAt: Date.now() + 30,
		});
		expect(await reader.firstToken()).toBe("token");
		expect((await reader.next()).map((e) => e.type)).toEqual(["chunk"]);
		const [end] = await reader.next();
		expect(end).toMatchObject({ type: "error", idle: true, error: { message: "request deadline passed (request_timeout_ms)" } });
		expect(aborted).toHaveLength(1);
		expect(await reader.next()).toEqual([]);
	});

	it("ends a body being read as 504 upstream_timeout, before its idle timeout", async () => {
		const aborted: unknown[] = [];
		const read = readEngineBody(new Response(openBody('{"data":')), {
			idleTimeoutMs: 60_000,
			abort: (reason) => aborted.push(reason),
			deadlineAt: Date.now() + 30,
		});
		await expect(read).rejects.toMatchObject({ kind: "upstream_timeout" });
		expect(aborted).toHaveLength(1);
	});
});
