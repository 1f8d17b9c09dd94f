import { describe, expect, it } from "vitest";
import { secretForms } from "../../../src/redact";
import { ChatSseEncoder } from "../../../src/stream/chat-sse-encoder";
import { type ChatStreamOptions, rewriteChatStream } from "../../../src/stream/chat-stream";
import { StreamSecretFilter } from "../../../src/stream/secret-filter";
import { upstreamOf } from "../../support/fake-upstream";

const SECRET = "nodesecret-0123456789abcdef";
const bytes = new TextEncoder();

function frame(delta: Record<string, unknown>, finish: string | null = null, field = "delta"): Uint8Array {
	const choice = field === "text" ? { index: 0, ...delta, finish_reason: finish } : { index: 0, delta, finish_reason: finish };
	return bytes.encode(
		`data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: "e", choices: [choice] })}\n\n`,
	);
}

async function relay(chunks: Uint8Array[], extra: Partial<ChatStreamOptions> = {}) {
	const { stream, done } = rewriteChatStream(upstreamOf(chunks).stream, {
		model: "venym/m",
		promptTokensEstimate: 5,
		secrets: [SECRET],
		...extra,
	});
	const text = await new Response(stream).text();
	await done;
	const chunksOut = text
		.split("\n\n")
		.filter((f) => f.startsWith("data: {"))
		.map((f) => JSON.parse(f.slice(6)) as { choices: Array<Record<string, unknown>> });
	return { text, chunks: chunksOut };
}

function joined(
	chunks: Array<{ choices: Array<Record<string, unknown>> }>,
	pick: (c: Record<string, unknown>) => unknown,
): string {
	let out = "";
	for (const c of chunks) for (const ch of c.choices) out += (pick(ch) as string | undefined) ?? "";
	return out;
}

const content = (ch: Record<string, unknown>) => (ch.delta as Record<string, unknown> | undefined)?.content;

const chunkHead = { id: "chatcmpl-eng", object: "chat.completion.chunk", created: 1700000000, model: "engine/m" };

describe("node secrets in a relayed stream", () => {
	const said = `key: Bearer ${SECRET} ok`;

	it("are redacted wherever the engine splits them between chunks, and nothing else changes", async () => {
		for (let cut = 1; cut < said.length; cut++) {
			for (const finish of ["stop", null]) {
				const upstream = [frame({ content: said.slice(0, cut) }), frame({ content: said.slice(cut) }), frame({}, finish)];
				if (finish === null) upstream.pop();
				const { text, chunks } = await relay([...upstream, bytes.encode("data: [DONE]\n\n")]);
				expect(text, `cut at ${cut}`).not.toContain(SECRET.slice(0, 12));
				expect(joined(chunks, content), `cut at ${cut}`).toBe("key: Bearer [redacted] ok");
			}
		}
	});

	it("are redacted in a tool call's name and id (relayed as a Responses function_call's name)", async () => {
		const call = { index: 0, id: `call_${SECRET}`, type: "function", function: { name: `run_${SECRET}`, arguments: "{}" } };
		const { text, chunks } = await relay([frame({ tool_calls: [call] }), frame({}, "tool_calls")]);
		expect(text).not.toContain(SECRET);
		type Call = { id: string; function: { name: string } };
		const delta = chunks[0]?.choices[0]?.delta as { tool_calls?: Call[] } | undefined;
		const sent = delta?.tool_calls?.[0];
		expect(sent?.function.name).toBe("run_[redacted]");
		expect(sent?.id).toBe("call_[redacted]");
	});

	it("are redacted across three pieces, in reasoning, tool-call arguments and legacy text", async () => {
		const thirds = [SECRET.slice(0, 9), SECRET.slice(9, 18), SECRET.slice(18)];
		const reasoning = await relay([...thirds.map((p) => frame({ reasoning_content: p })), frame({}, "stop")]);
		expect(joined(reasoning.chunks, (ch) => (ch.delta as Record<string, unknown>).reasoning_content)).toBe("[redacted]");
		const args = (p: string) => ({ tool_calls: [{ index: 0, function: { arguments: p } }] });
		const tools = await relay([...thirds.map((p) => frame(args(p))), frame({}, "tool_calls")]);
		expect(
			joined(tools.chunks, (ch) =>
				((ch.delta as { tool_calls?: Array<{ function: { arguments: string } }> }).tool_calls ?? [])
					.map((c) => c.function.arguments)
					.join(""),
			),
		).toBe("[redacted]");
		const legacy = await relay([...thirds.map((p) => frame({ text: `${p}` }, null, "text")), bytes.encode("data: [DONE]\n\n")], {
			encoder: new ChatSseEncoder("venym/m", undefined, "text_completion"),
		});
		expect(joined(legacy.chunks, (ch) => ch.text)).toBe("[redacted]");
		for (const r of [reasoning, tools, legacy]) expect(r.text).not.toContain(SECRET.slice(9, 18));
	});

	it("hold back only a tail that could start a secret, and give it back when it does not", async () => {
		const { chunks } = await relay([frame({ content: "the nodes" }), frame({ content: " are up" }), frame({}, "stop")]);
		expect(chunks.map((c) => content(c.choices[0] ?? {}))).toEqual(["the ", "nodes are up", undefined, undefined]);
	});

	it("cost nothing without a secret: chunks pass as the engine wrote them", async () => {
		const { chunks } = await relay([frame({ content: "the nodes" }), frame({ content: " are up" }), frame({}, "stop")], {
			secrets: [],
		});
		expect(chunks.map((c) => content(c.choices[0] ?? {}))).toEqual(["the nodes", " are up", undefined, undefined]);
	});
});

describe("a node key echoed outside content, reasoning and tool arguments", () => {
	const SECRET = "node-key-0123456789abcdef";
	const forms = secretForms([SECRET]);
	const relayed = (chunk: Record<string, unknown>) => {
		const filter = new StreamSecretFilter(forms);
		const out = filter.chunk({ chunk, data: JSON.stringify(chunk) });
		return JSON.stringify(out.chunk);
	};

	it("scrubs a refusal delta", () => {
		// DELTA_FIELDS is content, reasoning_content, reasoning: `delta.refusal` is relayed as the engine sent it.
		const text = relayed({ ...chunkHead, choices: [{ index: 0, delta: { refusal: `no: Bearer ${SECRET}` } }] });
		expect(text).not.toContain(SECRET);
	});

	it("scrubs the logprobs tokens that spell the echoed key", () => {
		// The content is scrubbed, but with `logprobs: true` the same text goes out as token strings.
		const tokens = ["Bearer", " node", "-key", "-0123", "456789", "abcdef"];
		const chunk = {
			...chunkHead,
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

describe("a node key written with JSON escapes, as the client reads it after decoding", () => {
	/** The key with every other character (from `from`) as `\uXXXX`, hex in upper case when `upper`. */
	const escapedKey = (from = 0, upper = false) =>
		Array.from(SECRET, (c, i) => {
			const hex = c.charCodeAt(0).toString(16).padStart(4, "0");
			return i >= from && i % 2 === 0 ? `\\u${upper ? hex.toUpperCase() : hex}` : c;
		}).join("");
	type Call = { function: { arguments?: string } };
	const argsOf = (ch: Record<string, unknown>) =>
		((ch.delta as { tool_calls?: Call[] } | undefined)?.tool_calls ?? []).map((c) => c.function.arguments ?? "").join("");
	const call = (p: string) => ({ tool_calls: [{ index: 0, function: { arguments: p } }] });
	const head = { tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "run", arguments: "" } }] };

	it("are redacted in tool-call arguments wherever the engine splits them, escapes split too (\\u00 | 6e)", async () => {
		for (const upper of [false, true]) {
			const args = `{"k":"${escapedKey(0, upper)}","n":1}`;
			for (let cut = 1; cut < args.length; cut++) {
				const upstream = [frame(head), frame(call(args.slice(0, cut))), frame(call(args.slice(cut))), frame({}, "tool_calls")];
				const { text, chunks } = await relay(upstream);
				const joinedArgs = joined(chunks, argsOf);
				expect(JSON.parse(joinedArgs), `cut at ${cut}`).toEqual({ k: "[redacted]", n: 1 });
				expect(text).not.toContain(SECRET.slice(1, 12));
			}
		}
	});

	it("are redacted when the arguments come one character a frame, the key only partly escaped", async () => {
		const args = `{"k":"${escapedKey(10)}"}`;
		const { chunks } = await relay([frame(head), ...Array.from(args, (c) => frame(call(c))), frame({}, "tool_calls")]);
		expect(JSON.parse(joined(chunks, argsOf))).toEqual({ k: "[redacted]" });
	});

	it("are redacted in content a client parses (structured output), split mid-escape, and in a stream that ends without a finish chunk", async () => {
		const said = `{"auth":"Bearer\\u0020${escapedKey()}"}`;
		for (let cut = 1; cut < said.length; cut += 3) {
			for (const finish of ["stop", null]) {
				const upstream = [frame({ content: said.slice(0, cut) }), frame({ content: said.slice(cut) })];
				if (finish) upstream.push(frame({}, finish));
				const { chunks } = await relay([...upstream, bytes.encode("data: [DONE]\n\n")]);
				expect(JSON.parse(joined(chunks, content)), `cut at ${cut}`).toEqual({ auth: "Bearer [redacted]" });
			}
		}
	});

	it("are redacted when the engine escapes them in its own SSE frame (decoded before the filter)", async () => {
		const raw = `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"e","choices":[{"index":0,"delta":{"content":"${escapedKey()}"},"finish_reason":null}]}`;
		const { text, chunks } = await relay([bytes.encode(`data: ${raw}\n\n`), frame({}, "stop")]);
		expect(joined(chunks, content)).toBe("[redacted]");
		expect(text).not.toContain(SECRET);
	});

	it("hold back a bounded tail: escaped text that spells no key goes out as it comes", () => {
		const filter = new StreamSecretFilter(secretForms([SECRET]));
		const longest = Math.max(...secretForms([SECRET]).map((f) => f.length));
		let sent = "";
		let given = "";
		for (let i = 0; i < 300; i++) {
			const piece = i % 3 === 0 ? "\\u00" : i % 3 === 1 ? "41\\" : "n";
			given += piece;
			const chunk = { ...chunkHead, choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] };
			const out = filter.chunk({ chunk, data: null }).chunk as { choices: Array<{ delta: { content?: string } }> };
			sent += out.choices[0]?.delta.content ?? "";
			expect(given.length - sent.length).toBeLessThanOrEqual(6 * longest);
		}
		expect(sent).toBe(given.slice(0, sent.length));
	});
});

describe("a node key in logprobs beyond the chosen token's text", () => {
	const KEY = "node-key-0123456789abcdef";
	const forms = secretForms([KEY]);
	const utf8 = (s: string) => [...new TextEncoder().encode(s)];
	const relayedAll = (chunks: Record<string, unknown>[]) => {
		const filter = new StreamSecretFilter(forms);
		let out = "";
		for (const chunk of chunks) out += JSON.stringify(filter.chunk({ chunk, data: JSON.stringify(chunk) }).chunk);
		return out;
	};
	/** Every byte array of `text` decoded, so a key spelled in `bytes` is seen as the client decodes it. */
	const bytesSpelled = (text: string) => {
		let all = "";
		for (const m of text.matchAll(/"bytes":\[([0-9,]*)\]/g)) {
			all += new TextDecoder().decode(new Uint8Array((m[1] ?? "").split(",").filter(Boolean).map(Number)));
		}
		return all;
	};

	it("scrubs the alternatives of top_logprobs (tokens and bytes, plain and \\u-escaped)", () => {
		const escaped = Array.from(KEY, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`).join("");
		for (const alt of [KEY, `Bearer ${KEY}`, escaped]) {
			const chunk = {
				...chunkHead,
				choices: [
					{
						index: 0,
						delta: { content: "ok" },
						logprobs: {
							content: [
								{
									token: "ok",
									logprob: -0.1,
									bytes: utf8("ok"),
									top_logprobs: [{ token: alt, logprob: -2, bytes: utf8(alt) }],
								},
							],
						},
						finish_reason: "stop",
					},
				],
			};
			const text = relayedAll([chunk]);
			expect(text, alt).not.toContain(KEY);
			expect(text, alt).not.toContain(escaped);
			expect(bytesSpelled(text), alt).not.toContain(KEY);
		}
	});

	it("scrubs refusal logprobs and bytes that spell the key over several tokens", () => {
		const tokens = ["Bearer", " node", "-key", "-0123", "456789", "abcdef"];
		const entries = tokens.map((token) => ({ token, logprob: -0.1, bytes: utf8(token), top_logprobs: [] }));
		const text = relayedAll([
			{ ...chunkHead, choices: [{ index: 0, delta: { refusal: "x" }, logprobs: { refusal: entries }, finish_reason: null }] },
			{ ...chunkHead, choices: [{ index: 0, delta: {}, finish_reason: "stop" }] },
		]);
		const spelled = [...text.matchAll(/"token":"([^"]*)"/g)].map((m) => m[1]).join("");
		expect(spelled).not.toContain(KEY);
		expect(bytesSpelled(text)).not.toContain(KEY);
	});

	it("scrubs a legacy completion's logprobs: its tokens and its top_logprobs' keys", () => {
		const tokens = ["Bearer", " node", "-key", "-0123", "456789", "abcdef"];
		const legacy = (i: number, finish: string | null) => ({
			id: "cmpl-1",
			object: "text_completion",
			created: 1,
			model: "e",
			choices: [
				{
					index: 0,
					text: tokens[i] ?? "",
					logprobs:
						i < tokens.length
							? {
									tokens: [tokens[i]],
									token_logprobs: [-0.1],
									top_logprobs: [{ [KEY]: -1, [tokens[i] as string]: -0.1 }],
									text_offset: [0],
								}
							: null,
					finish_reason: finish,
				},
			],
		});
		const text = relayedAll([...tokens.map((_, i) => legacy(i, null)), legacy(tokens.length, "stop")]);
		expect(text).not.toContain(KEY);
		const spelled = (
			JSON.parse(`[${text.replaceAll('}{"id"', '},{"id"')}]`) as Array<{
				choices: Array<{ logprobs?: { tokens?: string[] } | null }>;
			}>
		)
			.flatMap((c) => c.choices.flatMap((ch) => ch.logprobs?.tokens ?? []))
			.join("");
		expect(spelled).not.toContain(KEY);
	});
});

describe("a node key in a field the filter does not read", () => {
	const escapedKey = Array.from(SECRET, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`).join("");
	const raw = (extra: string) =>
		bytes.encode(
			`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"e",${extra}"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n`,
		);

	it("is redacted in the relayed stream, as written or \\u-escaped, in a chunk or beside the usage", async () => {
		for (const value of [`Bearer ${SECRET}`, escapedKey]) {
			const usage = `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"e","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2,"debug":"${value}"}}\n\n`;
			const { text } = await relay([
				raw(`"debug":"${value}",`),
				frame({}, "stop"),
				bytes.encode(usage),
				bytes.encode("data: [DONE]\n\n"),
			]);
			expect(text, value).not.toContain(SECRET);
			expect(text, value).not.toContain(escapedKey);
			for (const f of text.split("\n\n").filter((x) => x.startsWith("data: {"))) {
				const decoded = JSON.stringify(JSON.parse(f.slice(6)));
				expect(decoded).not.toContain(SECRET);
			}
		}
	});
});
