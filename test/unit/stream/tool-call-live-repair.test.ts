import { describe, expect, it } from "vitest";
import type { ForwardedChunk } from "../../../src/stream/chat-reducer";
import { JsonObjectPrefix } from "../../../src/stream/json-prefix";
import { LiveToolCallRepair } from "../../../src/stream/tool-call-live-repair";

describe("JsonObjectPrefix", () => {
	const safeOf = (text: string) => {
		const p = new JsonObjectPrefix();
		p.feed(text);
		return { safe: p.safe, valid: p.valid, closed: text.slice(0, p.safe) + closersAt(text.slice(0, p.safe)) };
	};
	const closersAt = (text: string) => {
		const p = new JsonObjectPrefix();
		p.feed(text);
		return p.closers();
	};

	it("sends a valid prefix up to its last safe point, never a trailing comma or space", () => {
		expect(safeOf('{"cmd": "ls').safe).toBe(11);
		expect(safeOf('{"a": 1, ').safe).toBe(7);
		expect(safeOf('{"a": 1, "b"').safe).toBe(12);
		expect(safeOf('{"a": "x\\').safe).toBe(8);
		expect(safeOf('{"a": "\\u00').safe).toBe(7);
		expect(safeOf('{"a": "\\u00e9"').safe).toBe(14);
	});

	it.each([
		['{"cmd": "ls', { cmd: "ls" }],
		['{"a": 1, ', { a: 1 }],
		['{"a": [1, 2', { a: [1, 2] }],
		['{"a": tr', { a: true }],
		['{"a": -', { a: -0 }],
		['{"a": 1.', { a: 1 }],
		['{"a"', { a: null }],
		['{"a":', { a: null }],
		['{"ke', { ke: null }],
		["", {}],
	])("closes %j into an object by appending only", (text, value) => {
		expect(JSON.parse(safeOf(text).closed)).toEqual(value);
	});

	it.each(['Sure: {"a": 1}', '{"a": 1,}', '{"a": 1} and more', '{"a": "line\nbreak"}', "[1]", '{"a": 01}'])(
		"knows %j can no longer be a valid object",
		(text) => {
			expect(safeOf(text).valid).toBe(false);
		},
	);

	it("reads a piece at a time as it reads the whole", () => {
		const text = '{"path": "/tmp/ä😀", "n": [1, 2.5e3, true, null], "o": {"k": "\\"q\\""}}';
		const p = new JsonObjectPrefix();
		for (const piece of text.match(/.{1,3}/gsu) ?? []) p.feed(piece);
		expect(p.valid).toBe(true);
		expect(p.safe).toBe(text.length);
	});
});

const head = { id: "chatcmpl-1", object: "chat.completion.chunk", created: 1, model: "m" };
const f = (choice: Record<string, unknown>): ForwardedChunk => {
	const chunk = { ...head, choices: [{ index: 0, ...choice }] };
	return { chunk, data: JSON.stringify(chunk) };
};
const args = (text: string, index = 0, extra: Record<string, unknown> = {}) =>
	f({ delta: { tool_calls: [{ index, ...extra, function: { arguments: text } }] } });
const start = (id: string, name: string, index = 0) =>
	f({ delta: { tool_calls: [{ index, id, type: "function", function: { name, arguments: "" } }] } });
const finish = () => f({ delta: {}, finish_reason: "tool_calls" });

/** Each tool call's arguments as the encoder would see them, piece by piece, by call index. */
function piecesOf(chunks: ForwardedChunk[]): Map<number, string[]> {
	const out = new Map<number, string[]>();
	for (const { chunk } of chunks) {
		for (const choice of chunk.choices as Array<{
			delta?: { tool_calls?: Array<{ index: number; function?: { arguments?: string } }> };
		}>) {
			for (const call of choice.delta?.tool_calls ?? []) {
				const a = call.function?.arguments;
				if (typeof a === "string" && a) out.set(call.index, [...(out.get(call.index) ?? []), a]);
			}
		}
	}
	return out;
}

describe("LiveToolCallRepair", () => {
	it("passes valid arguments as they come, piece by piece, unchanged", () => {
		const s = new LiveToolCallRepair();
		const first = s.push([start("call_1", "Bash"), args('{"comm'), args('and": "ec')]);
		expect(piecesOf(first).get(0)).toEqual(['{"comm', 'and": "ec']);
		const rest = s.push([args('ho hi"}'), finish()]);
		expect(piecesOf(rest).get(0)).toEqual(['ho hi"}']);
		expect(s.repaired).toBe(0);
		expect(rest.at(-1)?.chunk.choices).toMatchObject([{ finish_reason: "tool_calls" }]);
	});

	it("closes arguments the engine leaves unfinished, after what was sent, before the finish", () => {
		const s = new LiveToolCallRepair();
		const out = s.push([start("call_1", "Bash"), args('{"command": "echo'), args(' hi", '), finish()]);
		const pieces = piecesOf(out).get(0) ?? [];
		expect(JSON.parse(pieces.join(""))).toEqual({ command: "echo hi" });
		expect(pieces[0]).toBe('{"command": "echo');
		expect(s.repaired).toBe(1);
	});

	it("holds what follows a break and sends the repair's rest when it keeps what was sent", () => {
		const s = new LiveToolCallRepair();
		const out = s.push([start("c", "f"), args('{"a": 1'), args(",}"), finish()]);
		expect(JSON.parse((piecesOf(out).get(0) ?? []).join(""))).toEqual({ a: 1 });
	});

	it("holds prose around the object whole and sends the repair at the end", () => {
		const s = new LiveToolCallRepair();
		const early = s.push([start("c", "f"), args('Sure! {"a": '), args("2}")]);
		expect(piecesOf(early).get(0)).toBeUndefined();
		const out = s.push([finish()]);
		expect(JSON.parse((piecesOf(out).get(0) ?? []).join(""))).toEqual({ a: 2 });
	});

	it("ends a call when the next one begins, so each goes out in turn", () => {
		const s = new LiveToolCallRepair();
		const out = s.push([start("c1", "a"), args('{"x": "1'), start("c2", "b", 1), args('{"y": 2}', 1), finish()]);
		const pieces = piecesOf(out);
		expect(JSON.parse((pieces.get(0) ?? []).join(""))).toEqual({ x: "1" });
		expect(JSON.parse((pieces.get(1) ?? []).join(""))).toEqual({ y: 2 });
		// Call 0's closing quote and brace go out before call 1 starts.
		const order = out.flatMap(({ chunk }) =>
			(chunk.choices as Array<{ delta?: { tool_calls?: Array<{ index: number }> } }>).flatMap(
				(c) => c.delta?.tool_calls?.map((t) => t.index) ?? [],
			),
		);
		expect(order.lastIndexOf(0)).toBeLessThan(order.indexOf(1));
	});

	it("sends an open call's tail at the stream's end when no finish came", () => {
		const s = new LiveToolCallRepair();
		const out = [...s.push([start("c", "f"), args('{"a": [1')]), ...s.flush()];
		expect(JSON.parse((piecesOf(out).get(0) ?? []).join(""))).toEqual({ a: [1] });
	});

	it("ends a call when text follows it, its tail first", () => {
		const s = new LiveToolCallRepair();
		const out = s.push([start("c", "f"), args('{"a": "b'), f({ delta: { content: "done" } })]);
		const tailAt = out.findIndex(({ chunk }) => JSON.stringify(chunk).includes('"arguments":"\\"}"'));
		const textAt = out.findIndex(({ chunk }) => JSON.stringify(chunk).includes('"content":"done"'));
		expect(tailAt).toBeGreaterThan(-1);
		expect(tailAt).toBeLessThan(textAt);
	});
});
