import { describe, expect, it } from "vitest";
import type { ForwardedChunk } from "../../../src/stream/chat-reducer";
import { CompletionAssembler } from "../../../src/stream/completion-assembler";

function chunks(...list: Record<string, unknown>[]): ForwardedChunk[] {
	return list.map((chunk) => ({ chunk, data: JSON.stringify(chunk) }));
}

const head = { id: "chatcmpl-eng", object: "chat.completion.chunk", created: 1700000000, model: "engine/m" };

describe("CompletionAssembler (chat)", () => {
	it("puts text, reasoning in the stream's own field, finish reason and fingerprint together", () => {
		const a = new CompletionAssembler("chat.completion");
		a.push(
			chunks(
				{ ...head, system_fingerprint: "fp_1", choices: [{ index: 0, delta: { role: "assistant", content: "" } }] },
				{ ...head, choices: [{ index: 0, delta: { reasoning_content: "Think " } }] },
				{ ...head, choices: [{ index: 0, delta: { reasoning_content: "hard." } }] },
				{ ...head, choices: [{ index: 0, delta: { content: "Hel" } }] },
				{ ...head, choices: [{ index: 0, delta: { content: "lo" }, finish_reason: "stop" }] },
			),
		);
		const body = a.body("venym/m", { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 });
		expect(body).toEqual({
			id: "chatcmpl-eng",
			object: "chat.completion",
			created: 1700000000,
			model: "venym/m",
			system_fingerprint: "fp_1",
			choices: [
				{
					index: 0,
					message: { role: "assistant", content: "Hello", reasoning_content: "Think hard." },
					logprobs: null,
					finish_reason: "stop",
				},
			],
			usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 },
		});
	});

	it("assembles tool calls by index, with null content when the turn only calls tools", () => {
		const a = new CompletionAssembler("chat.completion");
		a.push(
			chunks(
				{ ...head, choices: [{ index: 0, delta: { role: "assistant", content: "" } }] },
				{
					...head,
					choices: [
						{
							index: 0,
							delta: { tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "get", arguments: "" } }] },
						},
					],
				},
				{ ...head, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '{"q":' } }] } }] },
				{
					...head,
					choices: [
						{
							index: 0,
							delta: { tool_calls: [{ index: 1, id: "call_b", type: "function", function: { name: "put", arguments: "{}" } }] },
						},
					],
				},
				{ ...head, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '"x"}' } }] } }] },
				{ ...head, choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] },
			),
		);
		const choice = (a.body("m", {}).choices as Record<string, unknown>[])[0];
		expect(choice).toEqual({
			index: 0,
			message: {
				role: "assistant",
				content: null,
				tool_calls: [
					{ id: "call_a", type: "function", function: { name: "get", arguments: '{"q":"x"}' } },
					{ id: "call_b", type: "function", function: { name: "put", arguments: "{}" } },
				],
			},
			logprobs: null,
			finish_reason: "tool_calls",
		});
	});

	it("keeps every choice of n > 1 apart, in index order, with their logprobs", () => {
		const a = new CompletionAssembler("chat.completion");
		const lp = (t: string) => ({ content: [{ token: t, logprob: -0.5, bytes: null, top_logprobs: [] }] });
		a.push(
			chunks(
				{ ...head, choices: [{ index: 1, delta: { role: "assistant", content: "B" }, logprobs: lp("B") }] },
				{ ...head, choices: [{ index: 0, delta: { role: "assistant", content: "A" }, logprobs: lp("A") }] },
				{ ...head, choices: [{ index: 0, delta: { content: "a" }, logprobs: lp("a"), finish_reason: "length" }] },
				{ ...head, choices: [{ index: 1, delta: {}, finish_reason: "stop" }] },
			),
		);
		const choices = a.body("m", {}).choices as Array<Record<string, unknown>>;
		expect(choices.map((c) => [c.index, (c.message as { content: string }).content, c.finish_reason])).toEqual([
			[0, "Aa", "length"],
			[1, "B", "stop"],
		]);
		expect((choices[0]!.logprobs as { content: Array<{ token: string }> }).content.map((t) => t.token)).toEqual(["A", "a"]);
	});

	it("gives up keeping text past its cap and says so", () => {
		const a = new CompletionAssembler("chat.completion", 10);
		a.push(chunks({ ...head, choices: [{ index: 0, delta: { content: "123456" } }] }));
		expect(a.overflowed).toBe(false);
		a.push(chunks({ ...head, choices: [{ index: 0, delta: { content: "789012" } }] }));
		expect(a.overflowed).toBe(true);
	});
});

describe("CompletionAssembler (legacy completions)", () => {
	it("joins text and the parallel logprobs arrays per choice", () => {
		const a = new CompletionAssembler("text_completion");
		const c = { id: "cmpl-1", object: "text_completion", created: 5, model: "e" };
		a.push(
			chunks(
				{
					...c,
					choices: [
						{
							index: 0,
							text: "Hi",
							logprobs: { tokens: ["Hi"], token_logprobs: [-1], top_logprobs: [null], text_offset: [0] },
							finish_reason: null,
						},
					],
				},
				{
					...c,
					choices: [
						{
							index: 0,
							text: "!",
							logprobs: { tokens: ["!"], token_logprobs: [-2], top_logprobs: [null], text_offset: [2] },
							finish_reason: "stop",
						},
					],
				},
			),
		);
		expect(a.body("venym/m", { prompt_tokens: 1 })).toEqual({
			id: "cmpl-1",
			object: "text_completion",
			created: 5,
			model: "venym/m",
			choices: [
				{
					index: 0,
					text: "Hi!",
					logprobs: { tokens: ["Hi", "!"], token_logprobs: [-1, -2], top_logprobs: [null, null], text_offset: [0, 2] },
					finish_reason: "stop",
				},
			],
			usage: { prompt_tokens: 1 },
		});
	});
});
