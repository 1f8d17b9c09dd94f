import { describe, expect, it } from "vitest";
import type { ForwardedChunk } from "../../../src/stream/chat-reducer";
import { repairArguments, repairBodyToolCalls, ToolCallRepairStream } from "../../../src/stream/tool-call-repair";

describe("repairArguments", () => {
	it.each([
		['{"cmd": "ls -la", "n": 3', '{"cmd": "ls -la", "n": 3}'],
		['{"a": "unterminated', '{"a": "unterminated"}'],
		['{"a": [1, 2', '{"a": [1, 2]}'],
		['{"a": 1,}', '{"a": 1}'],
		['Sure, here you go: {"a": 1} hope it helps', '{"a": 1}'],
		["", "{}"],
	])("repairs %j", (broken, fixed) => {
		const out = repairArguments(broken);
		expect(out.repaired).toBe(true);
		expect(JSON.parse(out.text)).toEqual(JSON.parse(fixed));
	});

	it("leaves valid arguments byte for byte, and what cannot be an object unchanged", () => {
		expect(repairArguments('{ "a" : 1 }')).toEqual({ text: '{ "a" : 1 }', repaired: false });
		expect(repairArguments("not json at all")).toEqual({ text: "not json at all", repaired: false });
		expect(repairArguments("[1, 2")).toEqual({ text: "[1, 2", repaired: false });
	});
});

describe("repairBodyToolCalls", () => {
	it("repairs each broken call of each choice and counts them", () => {
		const body = {
			choices: [
				{
					message: {
						tool_calls: [{ function: { name: "a", arguments: '{"x": 1' } }, { function: { name: "b", arguments: "{}" } }],
					},
				},
				{ message: { content: "hi" } },
			],
		};
		expect(repairBodyToolCalls(body)).toBe(1);
		expect(body.choices[0]?.message.tool_calls?.map((c) => JSON.parse(c.function.arguments))).toEqual([{ x: 1 }, {}]);
	});
});

const head = { id: "chatcmpl-1", object: "chat.completion.chunk", created: 1, model: "m" };
function f(chunk: Record<string, unknown>): ForwardedChunk {
	return { chunk, data: JSON.stringify(chunk) };
}

describe("ToolCallRepairStream", () => {
	it("holds a call's arguments and sends them repaired in one delta before the finish chunk", () => {
		const s = new ToolCallRepairStream();
		const out = s.push([
			f({ ...head, choices: [{ index: 0, delta: { content: "Let me look." } }] }),
			f({
				...head,
				choices: [
					{
						index: 0,
						delta: { tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "ls", arguments: '{"pa' } }] },
					},
				],
			}),
			f({ ...head, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: 'th": "/tmp' } }] } }] }),
			f({ ...head, choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] }),
		]);
		const deltas = out.map((o) => (o.chunk.choices as Array<{ delta: Record<string, unknown>; finish_reason?: unknown }>)[0]);
		expect(deltas.map((d) => d?.delta)).toEqual([
			{ content: "Let me look." },
			{ tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "ls" } }] },
			{ tool_calls: [{ index: 0, function: { arguments: '{"path": "/tmp"}' } }] },
			{},
		]);
		expect(deltas.at(-1)?.finish_reason).toBe("tool_calls");
		expect(out[0]?.data).not.toBeNull();
		expect(out[2]?.chunk.id).toBe("chatcmpl-1");
		expect(s.repaired).toBe(1);
	});

	it("sends valid arguments unchanged and counts nothing", () => {
		const s = new ToolCallRepairStream();
		const out = s.push([
			f({
				...head,
				choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: "c", function: { name: "n", arguments: '{"a":' } }] } }],
			}),
			f({ ...head, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: "1}" } }] } }] }),
			f({ ...head, choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] }),
		]);
		const args = out.flatMap((o) =>
			(o.chunk.choices as Array<{ delta: { tool_calls?: Array<{ function: { arguments?: string } }> } }>).flatMap(
				(c) => c.delta.tool_calls?.map((t) => t.function.arguments).filter((a) => a !== undefined) ?? [],
			),
		);
		expect(args).toEqual(['{"a":1}']);
		expect(s.repaired).toBe(0);
	});

	it("releases what it holds when the stream ends without a finish", () => {
		const s = new ToolCallRepairStream();
		s.push([
			f({
				...head,
				choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: "c", function: { name: "n", arguments: '{"a": 1' } }] } }],
			}),
		]);
		const out = s.flush();
		expect(out).toHaveLength(1);
		expect((out[0]!.chunk.choices as Array<{ delta: unknown }>)[0]?.delta).toEqual({
			tool_calls: [{ index: 0, function: { arguments: '{"a": 1}' } }],
		});
		expect(s.flush()).toEqual([]);
	});

	it("passes chunks without tool calls through untouched", () => {
		const s = new ToolCallRepairStream();
		const chunk = f({ ...head, choices: [{ index: 0, delta: { content: "x" } }] });
		expect(s.push([chunk])).toEqual([chunk]);
	});
});
