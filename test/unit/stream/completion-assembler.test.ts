import { describe, expect, it } from "vitest";
import type { ForwardedChunk } from "../../../src/stream/chat-reducer";
import { CompletionAssembler } from "../../../src/stream/completion-assembler";

function chunks(...list: Record<string, unknown>[]): ForwardedChunk[] {
	return list.map((chunk) => ({ chunk, data: JSON.stringify(chunk) }));
}

const head = { id: "chatcmpl-eng", object: "chat.completion.chunk", created: 1700000000, model: "engine/m" };

/** One token's `logprobs.content` entry with `top_logprobs: 20`, as vLLM streams it (~1 KB of JSON). */
function logprobEntry(i: number): Record<string, unknown> {
	return {
		token: `t${i}`,
		logprob: -0.1234567,
		bytes: [116, 49],
		top_logprobs: Array.from({ length: 20 }, (_, k) => ({
			token: `alt-token-${k}`,
			logprob: -1.23456789 - k,
			bytes: [97, 108, 116, 45, 116, 111, 107],
		})),
	};
}

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

describe("the non-stream answer's size cap", () => {
	it("counts logprob entries at their size: a top_logprobs=20 answer cannot hold many times the cap", () => {
		// A client asks a non-stream chat with `logprobs: true, top_logprobs: 20` and a long answer:
		// each token's entry is ~1 KB of JSON but counts as 16 characters, so the assembled body
		// may reach ~60x MAX_ASSEMBLED_CHARS (8 Mi chars → ~500 MB) in the Worker's 128 MB isolate.
		const cap = 20_000;
		const a = new CompletionAssembler("chat.completion", cap);
		let held = 0;
		for (let i = 0; i < 1000 && !a.overflowed; i++) {
			const entry = logprobEntry(i);
			a.push(chunks({ ...head, choices: [{ index: 0, delta: { content: "x" }, logprobs: { content: [entry] } }] }));
			held += JSON.stringify(entry).length + 1;
		}
		// Either the assembler refused the answer, or what it holds is within (a small multiple of) the cap.
		if (!a.overflowed) expect(held).toBeLessThanOrEqual(2 * cap);
		expect(a.overflowed).toBe(true);
	});
});
