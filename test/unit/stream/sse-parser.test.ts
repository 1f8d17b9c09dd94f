import { describe, expect, it } from "vitest";
import { createSseParser, type SseEvent, SseOverflowError } from "../../../src/stream/sse-parser";
import * as transcripts from "../../fixtures/transcripts";
import { splittings } from "../../fixtures/transcripts/splits";

interface Parsed {
	events: SseEvent[];
	comments: string[];
}

function parse(pieces: string[], maxEventSize?: number): Parsed {
	const events: SseEvent[] = [];
	const comments: string[] = [];
	const parser = createSseParser(
		(e) => events.push(e),
		(c) => comments.push(c),
		maxEventSize,
	);
	for (const piece of pieces) parser.feed(piece);
	parser.end();
	return { events, comments };
}

/** Decodes byte reads the way callers must: one TextDecoder in streaming mode. */
function parseBytes(chunks: Uint8Array[]): Parsed {
	const decoder = new TextDecoder();
	const pieces = chunks.map((c) => decoder.decode(c, { stream: true }));
	pieces.push(decoder.decode());
	return parse(pieces);
}

describe("createSseParser", () => {
	it("dispatches an event on a blank line", () => {
		expect(parse(["data: hello\n\n"]).events).toEqual([{ data: "hello" }]);
	});

	it("does not dispatch an event before its blank line arrives", () => {
		const events: SseEvent[] = [];
		const parser = createSseParser((e) => events.push(e));
		parser.feed("data: hello\n");
		expect(events).toEqual([]);
		parser.feed("\n");
		expect(events).toEqual([{ data: "hello" }]);
	});

	it("treats LF, CRLF and lone CR line endings alike", () => {
		const expected = [{ data: "a" }, { data: "b" }];
		expect(parse(["data: a\n\ndata: b\n\n"]).events).toEqual(expected);
		expect(parse(["data: a\r\n\r\ndata: b\r\n\r\n"]).events).toEqual(expected);
		expect(parse(["data: a\r\rdata: b\r\r"]).events).toEqual(expected);
		expect(parse(["data: a\r\n\ndata: b\r\r\n"]).events).toEqual(expected);
	});

	it("reads a CR ending one piece and a LF starting the next as one line break", () => {
		// Were the LF taken for an empty line, "a" and "b" would be two events.
		expect(parse(["data: a\r", "\ndata: b\r", "\n\r", "\n"]).events).toEqual([{ data: "a\nb" }]);
	});

	it("still treats a lone CR at the end of a piece as a line break", () => {
		expect(parse(["data: a\r", "\r", "data: b\r", "\r"]).events).toEqual([{ data: "a" }, { data: "b" }]);
	});

	it("accepts data with or without the single leading space, and keeps any further spaces", () => {
		expect(parse(["data:x\n\ndata: y\n\ndata:  z\n\n"]).events).toEqual([{ data: "x" }, { data: "y" }, { data: " z" }]);
	});

	it("joins multiple data lines with LF", () => {
		expect(parse(['data: {"a":\ndata: 1}\n\n']).events).toEqual([{ data: '{"a":\n1}' }]);
	});

	it("treats a field name without a colon as an empty value", () => {
		expect(parse(["data\n\n"]).events).toEqual([{ data: "" }]);
	});

	it("passes comments to onComment and never as events", () => {
		const parsed = parse([": ping\n\n:no-space\ndata: x\n\n"]);
		expect(parsed.events).toEqual([{ data: "x" }]);
		expect(parsed.comments).toEqual(["ping", "no-space"]);
	});

	it("ignores comments when no comment callback is given", () => {
		const events: SseEvent[] = [];
		const parser = createSseParser((e) => events.push(e));
		parser.feed(": ping\n\ndata: x\n\n");
		expect(events).toEqual([{ data: "x" }]);
	});

	it("reports the event and id fields and resets them between events", () => {
		expect(parse(["event: error\nid: 7\ndata: boom\n\ndata: next\n\n"]).events).toEqual([
			{ event: "error", id: "7", data: "boom" },
			{ data: "next" },
		]);
	});

	it("ignores an id containing NUL, retry and unknown fields", () => {
		expect(parse(["id: a\0b\nretry: 10\nfoo: bar\ndata: x\n\n"]).events).toEqual([{ data: "x" }]);
	});

	it("drops an event that has fields but no data line", () => {
		expect(parse(["event: ping\n\ndata: x\n\n"]).events).toEqual([{ data: "x" }]);
	});

	it("flushes a final event that lacks its blank line on end()", () => {
		expect(parse(["data: a\n\ndata: last"]).events).toEqual([{ data: "a" }, { data: "last" }]);
		expect(parse(["data: last\n"]).events).toEqual([{ data: "last" }]);
	});

	it("keeps multibyte characters intact when a read splits them", () => {
		const bytes = new TextEncoder().encode("data: héllo 👋 世界\n\n");
		const oneByteReads = Array.from(bytes, (b) => Uint8Array.of(b));
		expect(parseBytes(oneByteReads).events).toEqual([{ data: "héllo 👋 世界" }]);
	});

	it("parses a 4 MB line fed in 64-character pieces in linear time", () => {
		const line = "x".repeat(4 * 1024 * 1024);
		const pieces: string[] = [];
		for (let i = 0; i < line.length; i += 64) pieces.push(line.slice(i, i + 64));
		pieces.unshift("data: ");
		pieces.push("\n\n");
		const started = Date.now();
		const { events } = parse(pieces, 8 * 1024 * 1024);
		expect(events).toHaveLength(1);
		expect(events[0]?.data.length).toBe(line.length);
		// Rescanning or re-copying the pending line per piece would take minutes here.
		expect(Date.now() - started).toBeLessThan(2000);
	});

	describe.each(Object.entries(transcripts))("transcript %s", (_name, text) => {
		const whole = parse([text]);

		it("yields the same events and comments however the bytes are split", () => {
			expect(whole.events.length).toBeGreaterThan(0);
			for (const { name, chunks } of splittings(text)) {
				expect(parseBytes(chunks), name).toEqual(whole);
			}
		});

		it("yields the same events when split in two at every character", () => {
			for (let i = 0; i <= text.length; i++) {
				expect(parse([text.slice(0, i), text.slice(i)]), `split at ${i}`).toEqual(whole);
			}
		});
	});

	it("finds every frame of a CRLF transcript with comments", () => {
		const { events, comments } = parse([transcripts.openaiPingCrlf]);
		expect(comments).toEqual(["ping", "ping", "ping"]);
		expect(events.map((e) => e.data.slice(0, 8))).toEqual(['{"id":"c', '{"id":"c', '{"id":"c', '{"id":"c', '{"id":"c', "[DONE]"]);
	});
});

describe("SSE event ceiling", () => {
	it("throws once a pending line or event passes the limit", () => {
		const parser = createSseParser(() => {}, undefined, 100);
		parser.feed(`data: ${"x".repeat(50)}`);
		expect(() => parser.feed("x".repeat(60))).toThrow(SseOverflowError);
		const lines = createSseParser(() => {}, undefined, 100);
		expect(() => lines.feed(`data: ${"x".repeat(40)}\ndata: ${"x".repeat(40)}\ndata: ${"x".repeat(40)}\n`)).toThrow(
			SseOverflowError,
		);
	});

	it("lets many events through whose total passes the limit", () => {
		const events: string[] = [];
		const parser = createSseParser((e) => events.push(e.data), undefined, 100);
		for (let i = 0; i < 50; i++) parser.feed(`data: ${"x".repeat(40)}\n\n`);
		expect(events).toHaveLength(50);
	});
});
