import { APIError } from "openai/core/error";
import { Stream } from "openai/core/streaming";
import { describe, expect, it } from "vitest";
import { estimatePromptTokens, estimateTokens, IMAGE_TOKENS } from "../../../src/estimate";
import { type ChatStreamOptions, rewriteChatStream, type StreamEnd } from "../../../src/stream/chat-stream";
import type { Usage } from "../../../src/types";
import * as t from "../../fixtures/transcripts";
import { byteChunks, splittings } from "../../fixtures/transcripts/splits";
import { upstreamOf } from "../../support/fake-upstream";
import { microtasksDone } from "../../support/microtasks";

const MODEL = "venym/qwen-27b:online";
const PROMPT_ESTIMATE = 50;
const ERROR_FRAME = {
	error: {
		message: "The model engine failed while streaming the response.",
		type: "server_error",
		param: null,
		code: "upstream_unavailable",
	},
};

const encoder = new TextEncoder();

/** An upstream whose connection drops after `k` chunks. */
function droppingUpstream(chunks: Uint8Array[], k: number): ReadableStream<Uint8Array> {
	let i = 0;
	return new ReadableStream<Uint8Array>(
		{
			pull(controller) {
				const next = chunks[i++];
				if (i <= k && next) controller.enqueue(next);
				else controller.error(new TypeError("network connection was lost"));
			},
		},
		{ highWaterMark: 0 },
	);
}

function options(extra: Partial<ChatStreamOptions> = {}): ChatStreamOptions {
	return { model: MODEL, promptTokensEstimate: PROMPT_ESTIMATE, ...extra };
}

async function readText(stream: ReadableStream<Uint8Array>): Promise<string> {
	const reader = stream.getReader();
	const decoder = new TextDecoder();
	let text = "";
	for (let r = await reader.read(); !r.done; r = await reader.read()) text += decoder.decode(r.value, { stream: true });
	return text + decoder.decode();
}

/** The output's data payloads; fails unless every frame is exactly `data: <payload>\n\n`. */
function payloadsOf(text: string): string[] {
	expect(text.endsWith("\n\n")).toBe(true);
	return text
		.slice(0, -2)
		.split("\n\n")
		.map((f) => {
			expect(f.startsWith("data: ")).toBe(true);
			expect(f.slice(6)).not.toMatch(/[\r\n]/);
			return f.slice(6);
		});
}

/** The parts of an output chunk the tests look at. */
interface Chunk {
	id?: string;
	object?: string;
	model?: unknown;
	meta?: unknown;
	error?: unknown;
	choices?: { delta?: { role?: string; content?: string } }[];
	usage?: (Usage & Record<string, unknown>) | null;
}

interface Run {
	text: string;
	payloads: string[];
	json: Chunk[];
	end: StreamEnd;
}

async function run(upstream: ReadableStream<Uint8Array>, opts = options()): Promise<Run> {
	const { stream, done } = rewriteChatStream(upstream, opts);
	const text = await readText(stream);
	const payloads = payloadsOf(text);
	const json = payloads.filter((p) => p !== "[DONE]").map((p) => JSON.parse(p) as Chunk);
	return { text, payloads, json, end: await done };
}

function runText(text: string, opts = options()): Promise<Run> {
	return run(upstreamOf([encoder.encode(text)]).stream, opts);
}

function contentOf(chunks: Chunk[]): string {
	return chunks.map((c) => c.choices?.[0]?.delta?.content ?? "").join("");
}

function usage(prompt: number, completion: number): Usage {
	return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

interface Expectation {
	status: StreamEnd["status"];
	usage: Usage;
	estimated: boolean;
	content: string;
}

// Estimates: ceil(generated characters / 4), prompt from PROMPT_ESTIMATE.
const cases: [string, string, Expectation][] = [
	// Cumulative usage on six chunks: a sum would give 126 prompt tokens.
	[
		"vLLM continuous usage",
		t.vllmContinuousUsage,
		{ status: "completed", usage: usage(21, 5), estimated: false, content: "Hello, héllo 👋 世界" },
	],
	[
		"vLLM final usage chunk",
		t.vllmFinalUsage,
		{ status: "completed", usage: usage(14, 7), estimated: false, content: "The capital of France is Paris." },
	],
	[
		"llama.cpp usage and timings",
		t.llamacppTimings,
		{ status: "completed", usage: usage(11, 4), estimated: false, content: "Bonjour à tous" },
	],
	// "héllo 👋 世界" is 11 UTF-16 units.
	[
		"Ollama without usage",
		t.ollamaNoUsage,
		{ status: "completed", usage: usage(PROMPT_ESTIMATE, 3), estimated: true, content: "héllo 👋 世界" },
	],
	[
		"OpenAI with pings and CRLF",
		t.openaiPingCrlf,
		{ status: "completed", usage: usage(19, 8), estimated: false, content: "Two plus two is four." },
	],
	// 14 + 12 reasoning characters and 9 content characters.
	[
		"reasoning_content without usage",
		t.reasoningContentNoUsage,
		{ status: "completed", usage: usage(PROMPT_ESTIMATE, 9), estimated: true, content: "Hi there!" },
	],
	["reasoning field", t.reasoningField, { status: "completed", usage: usage(12, 13), estimated: false, content: "42" }],
	// The name "get_weather" and 18 characters of arguments.
	["tool call deltas", t.toolCallDeltas, { status: "completed", usage: usage(PROMPT_ESTIMATE, 8), estimated: true, content: "" }],
	["finish without [DONE]", t.closeAfterFinish, { status: "completed", usage: usage(9, 1), estimated: false, content: "Done" }],
	// The last cumulative usage before the error, not the sum of three.
	[
		"vLLM nested error",
		t.vllmErrorNested,
		{ status: "engine_error", usage: usage(30, 4), estimated: false, content: "Once upon a time" },
	],
	[
		"vLLM flat error",
		t.vllmErrorFlat,
		{ status: "engine_error", usage: usage(PROMPT_ESTIMATE, 3), estimated: true, content: "Sure, here" },
	],
	[
		"llama.cpp error line",
		t.llamacppErrorLine,
		{ status: "engine_error", usage: usage(PROMPT_ESTIMATE, 2), estimated: true, content: "Let me" },
	],
	[
		"early close",
		t.earlyCloseNoFinish,
		{ status: "engine_error", usage: usage(PROMPT_ESTIMATE, 4), estimated: true, content: "The answer is" },
	],
];

describe("rewriteChatStream", () => {
	describe.each(cases)("%s", (_name, transcript, expected) => {
		it("gives the same output and outcome however the engine's bytes are split", async () => {
			const whole = await runText(transcript);
			for (const { name, chunks } of splittings(transcript)) {
				const split = await run(upstreamOf(chunks).stream);
				expect(split.text, name).toBe(whole.text);
				expect(split.end, name).toEqual(whole.end);
			}
		});

		it("names the gateway model in every chunk", async () => {
			const { json } = await runText(transcript);
			const chunks = json.filter((c) => !("error" in c));
			expect(chunks.length).toBeGreaterThan(1);
			for (const chunk of chunks) expect(chunk.model).toBe(MODEL);
		});

		it("sends exactly one usage chunk, with choices [], as the last chunk", async () => {
			const { json } = await runText(transcript);
			const chunks = json.filter((c) => !("error" in c));
			const withUsage = chunks.filter((c) => c.usage !== undefined && c.usage !== null);
			expect(withUsage).toHaveLength(1);
			expect(chunks.at(-1)).toBe(withUsage[0]);
			expect(withUsage[0]?.choices).toEqual([]);
			expect(withUsage[0]?.object).toBe("chat.completion.chunk");
			expect(withUsage[0]?.id).toBe(chunks[0]?.id);
		});

		it("reports the last usage seen, or an estimate when there is none", async () => {
			const { json, end } = await runText(transcript);
			expect(end.status).toBe(expected.status);
			expect(end.usage).toEqual(expected.usage);
			expect(end.estimated).toBe(expected.estimated);
			const sent = json.filter((c) => !("error" in c)).at(-1)?.usage;
			expect(sent).toMatchObject(expected.usage);
		});

		it("forwards the engine's content unchanged", async () => {
			const { json, end } = await runText(transcript);
			expect(contentOf(json)).toBe(expected.content);
			expect(end.contentForwarded).toBe(true);
		});

		if (expected.status === "completed") {
			it("ends with [DONE] after the usage chunk", async () => {
				const { payloads, end } = await runText(transcript);
				expect(payloads.at(-1)).toBe("[DONE]");
				expect(payloads.filter((p) => p === "[DONE]")).toHaveLength(1);
				expect(JSON.parse(payloads.at(-2) ?? "").usage).toBeDefined();
				expect(end.error).toBeUndefined();
			});
		} else {
			it("ends with the usage chunk and an error frame, and no [DONE]", async () => {
				const { payloads, end } = await runText(transcript);
				expect(payloads).not.toContain("[DONE]");
				expect(JSON.parse(payloads.at(-1) ?? "")).toEqual(ERROR_FRAME);
				expect(JSON.parse(payloads.at(-2) ?? "").choices).toEqual([]);
				expect(end.error?.message).toBeTruthy();
			});
		}
	});

	it("drops engine comments", async () => {
		const { text } = await runText(t.openaiPingCrlf);
		expect(text).not.toContain("ping");
		expect(text).not.toMatch(/^:/m);
	});

	it("keeps the engine's extra usage fields", async () => {
		const { json } = await runText(t.openaiPingCrlf);
		expect(json.at(-1)?.usage?.prompt_tokens_details).toEqual({ cached_tokens: 0, audio_tokens: 0 });
		expect(json.at(-1)?.usage?.completion_tokens_details).toMatchObject({ reasoning_tokens: 0 });
	});

	it("forwards chunks that carried cumulative usage without their usage", async () => {
		const { json } = await runText(t.vllmContinuousUsage);
		const content = json.slice(0, -1);
		expect(content).toHaveLength(6);
		for (const chunk of content) expect(chunk.usage ?? null).toBeNull();
	});

	it("keeps multibyte characters intact when a read splits them", async () => {
		const bytes = encoder.encode(t.ollamaNoUsage);
		// Cut inside the four bytes of 👋 and the three bytes of 界.
		const wave = bytes.indexOf(0xf0);
		const kai = bytes.lastIndexOf(0xe7);
		const chunks = [bytes.subarray(0, wave + 2), bytes.subarray(wave + 2, kai + 1), bytes.subarray(kai + 1)];
		const { json } = await run(upstreamOf(chunks).stream);
		expect(contentOf(json)).toBe("héllo 👋 世界");
	});

	it("reports the engine's error details in done", async () => {
		expect((await runText(t.vllmErrorNested)).end.error).toEqual({
			message: "CUDA error: an illegal memory access was encountered",
			type: "InternalServerError",
			code: "500",
		});
		expect((await runText(t.vllmErrorFlat)).end.error).toEqual({
			message: "The engine loop has stopped.",
			type: "BadRequestError",
			code: "400",
		});
		const stringError =
			'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"a"}}]}\n\ndata: {"error":"model crashed"}\n\n';
		expect((await runText(stringError)).end).toMatchObject({
			status: "engine_error",
			error: { message: "model crashed" },
		});
		expect((await runText(t.earlyCloseNoFinish)).end.error?.message).toBe("upstream closed the stream early");
	});

	it("ends with an error frame when the engine sends something that is not JSON", async () => {
		const { payloads, end } = await runText(
			'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"a"}}]}\n\ndata: {"id":\n\n',
		);
		expect(end.status).toBe("engine_error");
		expect(JSON.parse(payloads.at(-1) ?? "")).toEqual(ERROR_FRAME);
	});

	it("ends with the usage chunk and an error frame wherever the connection drops before [DONE]", async () => {
		const chunks = byteChunks(encoder.encode(t.vllmFinalUsage), 97);
		for (let k = 0; k < chunks.length; k++) {
			const { payloads, json, end } = await run(droppingUpstream(chunks, k));
			expect(end.status, `drop after ${k}`).toBe("engine_error");
			expect(end.error?.message, `drop after ${k}`).toContain("network connection was lost");
			expect(payloads).not.toContain("[DONE]");
			expect(json.at(-1)).toEqual(ERROR_FRAME);
			expect(json.at(-2)?.choices).toEqual([]);
			expect(json.at(-2)?.usage?.total_tokens).toBe(end.usage.total_tokens);
			for (const chunk of json.slice(0, -1)) expect(chunk.model).toBe(MODEL);
		}
	});

	it("marks no content forwarded when the engine fails before any", async () => {
		const text = `${t.vllmErrorFlat.split("\n\n")[0]}\n\ndata: {"object":"error","message":"boom","type":"x","code":500}\n\n`;
		const { end } = await runText(text);
		expect(end.status).toBe("engine_error");
		expect(end.contentForwarded).toBe(false);
		expect(end.usage).toEqual(usage(PROMPT_ESTIMATE, 0));
	});

	it("makes the openai SDK throw an APIError on an engine error", async () => {
		const { stream } = rewriteChatStream(upstreamOf([encoder.encode(t.vllmErrorNested)]).stream, options());
		const sdk = Stream.fromSSEResponse<Chunk>(new Response(stream), new AbortController());
		const seen: Chunk[] = [];
		await expect(
			(async () => {
				for await (const chunk of sdk) seen.push(chunk);
			})(),
		).rejects.toBeInstanceOf(APIError);
		expect(contentOf(seen)).toBe("Once upon a time");
	});

	it("gives the openai SDK the usage chunk last on success", async () => {
		const { stream } = rewriteChatStream(upstreamOf([encoder.encode(t.vllmContinuousUsage)]).stream, options());
		const seen: Chunk[] = [];
		for await (const chunk of Stream.fromSSEResponse<Chunk>(new Response(stream), new AbortController())) seen.push(chunk);
		expect(seen.at(-1)?.usage).toMatchObject(usage(21, 5));
		expect(seen.at(-1)?.choices).toEqual([]);
	});

	describe("model rewriting", () => {
		const finish = '"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]';

		async function modelsOf(data: string): Promise<Chunk> {
			const { json } = await runText(`data: ${data}\n\ndata: [DONE]\n\n`);
			return json[0] ?? {};
		}

		it("swaps the model without re-serialising the engine's JSON", async () => {
			const raw = `{"id":"c1","model":"Qwen/Qwen3-27B","x": 1,${finish}}`;
			const { payloads } = await runText(`data: ${raw}\n\ndata: [DONE]\n\n`);
			expect(payloads[0]).toBe(raw.replace('"model":"Qwen/Qwen3-27B"', `"model":${JSON.stringify(MODEL)}`));
		});

		it("rewrites a spaced model field", async () => {
			expect((await modelsOf(`{"id":"c1", "model": "eng", ${finish}}`)).model).toBe(MODEL);
		});

		it("adds the model when the engine sends none", async () => {
			expect((await modelsOf(`{"id":"c1",${finish}}`)).model).toBe(MODEL);
		});

		it("rewrites only the top-level model when a nested object has the same field", async () => {
			const chunk = await modelsOf(`{"id":"c1","meta":{"model":"eng"},"model" : "eng",${finish}}`);
			expect(chunk.model).toBe(MODEL);
			expect(chunk.meta).toEqual({ model: "eng" });
		});

		it("leaves content that mentions the model untouched", async () => {
			const chunk = await modelsOf(
				`{"id":"c1","model":"eng","choices":[{"index":0,"delta":{"content":"\\"model\\":\\"eng\\" model"},"finish_reason":"stop"}]}`,
			);
			expect(chunk.model).toBe(MODEL);
			expect(chunk.choices?.[0]?.delta?.content).toBe('"model":"eng" model');
		});

		it("rewrites a model written with JSON escapes", async () => {
			expect((await modelsOf(`{"id":"c1","model":"Qwen\\/Qwen3",${finish}}`)).model).toBe(MODEL);
		});

		it("keeps a frame on one line when the engine split its JSON over data lines", async () => {
			const { json } = await runText(`data: {"id":"c1",\ndata: "model":"eng",${finish}}\n\ndata: [DONE]\n\n`);
			expect(json[0]?.model).toBe(MODEL);
		});
	});

	it("sends the sources first, shaped like a chunk, and names every chunk of the stream with one id", async () => {
		const sources = [{ title: "Paris", url: "https://example.org/paris" }];
		const { payloads } = await runText(t.vllmFinalUsage, options({ sources }));
		const first = JSON.parse(payloads[0] ?? "");
		expect(first).toMatchObject({ object: "venym.sources", model: MODEL, choices: [], sources });
		expect(first.id).toMatch(/^chatcmpl-[0-9a-f]{32}$/);
		expect(typeof first.created).toBe("number");
		const chunks = payloads
			.slice(1)
			.filter((p) => p !== "[DONE]")
			.map((p) => JSON.parse(p));
		expect(chunks[0].choices[0].delta.role).toBe("assistant");
		expect(chunks.length).toBeGreaterThan(2);
		for (const c of chunks) expect(c.id).toBe(first.id);
	});

	it("enqueues frames that arrive in one read as one output chunk", async () => {
		const frames = `${t.vllmFinalUsage.split("\n\n").slice(0, 3).join("\n\n")}\n\n`;
		const { stream } = rewriteChatStream(upstreamOf([encoder.encode(frames)], "hang").stream, options());
		const reader = stream.getReader();
		const first = await reader.read();
		expect(payloadsOf(new TextDecoder().decode(first.value))).toHaveLength(3);
		await reader.cancel();
	});

	it("reads the engine only as fast as the client reads", async () => {
		const chunks = t.vllmFinalUsage.split(/(?<=\n\n)/).map((f) => encoder.encode(f));
		expect(chunks).toHaveLength(6);
		const { stream: upstream, state } = upstreamOf(chunks);
		const { stream } = rewriteChatStream(upstream, options());
		const reader = stream.getReader();
		await reader.read();
		await microtasksDone();
		// One frame for the client's read, one for the output queue's high-water mark.
		expect(state.reads).toBe(2);
		while (!(await reader.read()).done) {}
		// After [DONE] only the body's end is read (so workerd can reuse the engine connection).
		expect(state.reads).toBe(chunks.length + 1);
		expect(state.cancelled).toBe(false);
	});

	describe("when the client cancels", () => {
		async function cancelAfterContent(transcript: string, frames: number) {
			const head = `${transcript.split("\n\n").slice(0, frames).join("\n\n")}\n\n`;
			const { stream: upstream, state } = upstreamOf(byteChunks(encoder.encode(head), 50), "hang");
			const cancels: unknown[] = [];
			const { stream, done } = rewriteChatStream(upstream, options(), (reason) => cancels.push(reason));
			const reader = stream.getReader();
			let received = "";
			while (payloadsOrNone(received).length < frames) {
				const { value } = await reader.read();
				received += new TextDecoder().decode(value);
			}
			// The engine now idles: this cancel arrives while a pull waits on it.
			await reader.cancel("client went away");
			return { state, cancels, end: await done };
		}

		function payloadsOrNone(text: string): string[] {
			return text === "" ? [] : payloadsOf(text);
		}

		it("cancels the upstream, calls onCancel and resolves client_disconnected", async () => {
			const { state, cancels, end } = await cancelAfterContent(t.ollamaNoUsage, 3);
			expect(state.cancelled).toBe(true);
			expect(state.cancelReason).toBe("client went away");
			expect(cancels).toEqual(["client went away"]);
			expect(end.status).toBe("client_disconnected");
			expect(end.contentForwarded).toBe(true);
			// "héllo 👋 世界" was forwarded: 11 characters.
			expect(end.usage).toEqual(usage(PROMPT_ESTIMATE, 3));
			expect(end.estimated).toBe(true);
		});

		it("reports the engine's last usage so far when it sent some", async () => {
			const { end } = await cancelAfterContent(t.vllmContinuousUsage, 4);
			expect(end.status).toBe("client_disconnected");
			expect(end.usage).toEqual(usage(21, 3));
			expect(end.estimated).toBe(false);
		});
	});
});

describe("estimates", () => {
	it("rounds about four characters up to a token", () => {
		expect([0, 1, 4, 5, 8, 9].map(estimateTokens)).toEqual([0, 1, 1, 2, 2, 3]);
	});

	it("counts message text, text parts, tool calls and names, plus four tokens a message", () => {
		const body = {
			messages: [
				{ role: "system", content: "abcd" },
				{
					role: "user",
					content: [
						{ type: "text", text: "efgh" },
						{ type: "image_url", image_url: { url: "https://example.org/a.png" } },
					],
				},
				{
					role: "assistant",
					content: null,
					tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }],
				},
				{ role: "tool", name: "xy", content: "z" },
			],
		};
		// 4 + 4 + 3 + 2 + 1 = 14 characters: 4 tokens, 4 × 4 for the messages, and the image part.
		expect(estimatePromptTokens(body)).toBe(20 + IMAGE_TOKENS);
	});

	it("counts tool definitions by their JSON length", () => {
		const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object" } } }];
		const without = estimatePromptTokens({ messages: [{ role: "user", content: "hi" }] });
		const withTools = estimatePromptTokens({ messages: [{ role: "user", content: "hi" }], tools });
		expect(withTools - without).toBeGreaterThanOrEqual(Math.floor(JSON.stringify(tools).length / 4));
	});

	it("counts nothing for a body that is not a chat request", () => {
		expect(estimatePromptTokens(null)).toBe(0);
		expect(estimatePromptTokens({ messages: "hi" })).toBe(0);
	});
});

describe("the stream's idle watch", () => {
	it("ends a stream whose engine goes quiet with the timeout frame and aborts the engine", async () => {
		const enc = new TextEncoder();
		let cancelled = false;
		const upstream = new ReadableStream<Uint8Array>({
			start(c) {
				c.enqueue(
					enc.encode(
						'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"e","choices":[{"index":0,"delta":{"content":"hi there"}}]}\n\n',
					),
				);
			},
			cancel() {
				cancelled = true;
			},
		});
		let aborted: unknown;
		const { stream, done } = rewriteChatStream(upstream, { model: "m", promptTokensEstimate: 5, idleTimeoutMs: 30 }, (r) => {
			aborted = r;
		});
		const text = await new Response(stream).text();
		const end = await done;
		expect(text).toContain('"code":"upstream_timeout"');
		expect(text).not.toContain("[DONE]");
		expect(end).toMatchObject({ status: "engine_error", idleTimedOut: true, contentForwarded: true });
		expect(end.usage.completion_tokens).toBe(2);
		expect(aborted).toBeInstanceOf(Error);
		expect(cancelled).toBe(true);
	});
});
