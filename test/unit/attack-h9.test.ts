// Attack findings (session h9) on the merged issue 22/23 tree: each test states the contract and
// fails on the tree it was written against. See the report for the reproduction of each.
import { describe, expect, it } from "vitest";
import { parseConfig } from "../../src/config";
import { HOLD_TTL_MS } from "../../src/ledger/durable/holds";
import { secretForms } from "../../src/redact";
import { ChatStreamReducer, type ForwardedChunk } from "../../src/stream/chat-reducer";
import { CompletionAssembler } from "../../src/stream/completion-assembler";
import { StreamSecretFilter } from "../../src/stream/secret-filter";

const head = { id: "chatcmpl-eng", object: "chat.completion.chunk", created: 1700000000, model: "engine/m" };

function chunks(...list: Record<string, unknown>[]): ForwardedChunk[] {
	return list.map((chunk) => ({ chunk, data: JSON.stringify(chunk) }));
}

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

describe("attack: the non-stream answer's size cap", () => {
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

describe("attack: refusal text is generated output", () => {
	it("a streamed refusal counts toward the completion estimate and as content reaching the client", () => {
		// OpenAI's `delta.refusal` is relayed to the client (and assembled into `message.refusal` for
		// non-stream clients), but the reducer counts neither its characters nor that it was sent:
		// with no engine usage the refusal is free, and an engine error after it bills nothing.
		const r = new ChatStreamReducer({ promptTokensEstimate: 10 });
		const refusal = "I cannot help with that request. ".repeat(40);
		r.push({ type: "chunk", chunk: { ...head, choices: [{ index: 0, delta: { role: "assistant", refusal } }] }, data: "" });
		r.push({ type: "closed" });
		const end = r.end("engine_error");
		expect(end.contentForwarded).toBe(true);
		expect(end.usage.completion_tokens).toBeGreaterThan(0);
	});
});

describe("attack: idle timeouts that outlive a hold", () => {
	const base = {
		models: [
			{
				id: "a/m",
				engine_model: "m",
				nodes: ["http://10.0.0.1:8000/v1"],
				max_output_tokens: 100,
				context_length: 8192,
				pricing: { input_usd_per_mtok: 1, output_usd_per_mtok: 2 },
			},
		],
	};
	// A request that moves nothing is not renewed (hold-keep-alive.ts): with an idle timeout past
	// HOLD_TTL_MS the hold lapses while the request still runs, the ledger hands the balance out
	// again, and the late settlement debits it anyway (key-ledger.ts settle has no hold to check):
	// one paused stream per hold overspends the key. The config should refuse such a timeout.
	for (const field of ["client_idle_timeout_ms", "stream_idle_timeout_ms"]) {
		it(`refuses ${field} longer than a hold lives`, () => {
			expect(() => parseConfig(JSON.stringify({ ...base, [field]: HOLD_TTL_MS + 60_000 }))).toThrow(new RegExp(field));
		});
	}
});

describe("attack: a node key echoed outside content, reasoning and tool arguments", () => {
	const SECRET = "node-key-0123456789abcdef";
	const forms = secretForms([SECRET]);
	const relayed = (chunk: Record<string, unknown>) => {
		const filter = new StreamSecretFilter(forms);
		const out = filter.chunk({ chunk, data: JSON.stringify(chunk) });
		return JSON.stringify(out.chunk);
	};

	it("scrubs a refusal delta", () => {
		// DELTA_FIELDS is content, reasoning_content, reasoning: `delta.refusal` is relayed as the engine sent it.
		const text = relayed({ ...head, choices: [{ index: 0, delta: { refusal: `no: Bearer ${SECRET}` } }] });
		expect(text).not.toContain(SECRET);
	});

	it("scrubs the logprobs tokens that spell the echoed key", () => {
		// The content is scrubbed, but with `logprobs: true` the same text goes out as token strings.
		const tokens = ["Bearer", " node", "-key", "-0123", "456789", "abcdef"];
		const chunk = {
			...head,
			choices: [
				{
					index: 0,
					delta: { content: tokens.join("") },
					logprobs: { content: tokens.map((token) => ({ token, logprob: -0.1, bytes: [], top_logprobs: [] })) },
				},
			],
		};
		const out = JSON.parse(relayed(chunk)) as { choices: { logprobs: { content: { token: string }[] } }[] };
		const spelled = (out.choices[0]?.logprobs.content ?? []).map((e) => e.token).join("");
		expect(spelled).not.toContain(SECRET);
	});
});
