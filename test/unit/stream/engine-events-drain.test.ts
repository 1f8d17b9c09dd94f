/**
 * src/stream/engine-events.ts after `[DONE]`: the rest of the engine's body is read, not cancelled
 * (a subrequest body cancelled before its end makes workerd drop the engine connection), within a
 * byte and a time budget; the node is released once, whichever way the body ends.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { EngineEventReader } from "../../../src/stream/engine-events";
import { upstreamOf } from "../../support/fake-upstream";

const encoder = new TextEncoder();
const frame = (data: string) => encoder.encode(`data: ${data}\n\n`);
const CHUNK = frame(JSON.stringify({ choices: [{ index: 0, delta: { content: "hi" } }] }));

function reader(chunks: Uint8Array[], end: "close" | "hang" = "close") {
	const { stream, state } = upstreamOf(chunks, end);
	const ends: number[] = [];
	const events = new EngineEventReader(stream, { onEnd: () => ends.push(state.reads) });
	return { events, state, ends };
}

async function untilEnding(events: EngineEventReader) {
	for (;;) {
		const batch = await events.next();
		const last = batch.at(-1);
		if (last && last.type !== "chunk") return last.type;
	}
}

afterEach(() => {
	vi.useRealTimers();
});

describe("the engine body after [DONE]", () => {
	it("is read to its close, not cancelled, and the node released once", async () => {
		const r = reader([CHUNK, frame("[DONE]")]);
		expect(await untilEnding(r.events)).toBe("done");
		expect(r.state.cancelled).toBe(false);
		expect(r.ends).toHaveLength(1);
		// Nothing more is read afterwards.
		expect(await r.events.next()).toEqual([]);
		expect(r.ends).toHaveLength(1);
	});

	it("is cancelled when the engine goes on past the byte budget", async () => {
		const filler = encoder.encode(`: ${"x".repeat(8_000)}\n\n`);
		const r = reader([CHUNK, frame("[DONE]"), filler, filler, filler, filler]);
		expect(await untilEnding(r.events)).toBe("done");
		expect(r.state.cancelled).toBe(true);
		// Three 8 KB fillers pass the 16 KiB budget; the fourth is never read.
		expect(r.state.reads).toBeLessThan(6);
		expect(r.ends).toHaveLength(1);
	});

	it("is cancelled when the engine keeps the body open after [DONE]", async () => {
		vi.useFakeTimers();
		const r = reader([CHUNK, frame("[DONE]")], "hang");
		const ending = untilEnding(r.events);
		await vi.advanceTimersByTimeAsync(1_000);
		expect(await ending).toBe("done");
		expect(r.state.cancelled).toBe(true);
		expect(r.ends).toHaveLength(1);
	});

	it("still cancels at once after an engine error in place of [DONE]", async () => {
		const r = reader([CHUNK, frame(JSON.stringify({ error: { message: "boom" } })), CHUNK]);
		expect(await untilEnding(r.events)).toBe("error");
		await Promise.resolve();
		expect(r.state.cancelled).toBe(true);
		expect(r.ends).toHaveLength(1);
	});
});
