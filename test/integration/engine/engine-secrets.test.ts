/**
 * A node's key never reaches a client or a log line through engine text: an engine that echoes
 * the Authorization the gateway sent it (dev/engine-scenarios.mjs `echoauth*`), in completion
 * text split over two stream frames, in a mid-stream error, or in a 200 error body; and written
 * with JSON escapes (`echoauthescaped`) where the client decodes them: a tool call's arguments,
 * content a client parses, an embeddings answer's raw JSON.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type ErrorBody, info, ping } from "../../support/billing";
import { fleetConfig, gatewayWith, marker, model, nodeUrl, setNode } from "../../support/fleet";
import { chat, createKey, readSse, waitFor } from "../../support/gateway";
import { TEST_NODE_KEY } from "../../support/test-config";

const logs: string[] = [];
let key: string;
const t = marker("sec");
const nodes = {
	content: `${t}content`,
	mid: `${t}mid`,
	err200: `${t}err200`,
	escaped: `${t}escaped`,
	escapedEmbed: `${t}escembed`,
};
const keyed = (name: string) => ({ url: nodeUrl(name), api_key_env: "NODE_KEY" });
// Not a test of timeouts: a busy host may take longer than the fleet config's 600 ms to a first byte.
const gw = gatewayWith({
	...fleetConfig([
		model("echo", [keyed(nodes.content)], { max_output_tokens: 200 }),
		model("mid", [keyed(nodes.mid)]),
		model("err200", [keyed(nodes.err200)]),
		model("escaped", [keyed(nodes.escaped)], { max_output_tokens: 200, capabilities: ["tools"] }),
		model("escaped-embed", [keyed(nodes.escapedEmbed)], {
			capabilities: ["embeddings"],
			max_output_tokens: undefined,
			pricing: { input_usd_per_mtok: 1 },
		}),
	]),
	first_byte_timeout_ms: 10_000,
});

beforeAll(async () => {
	key = (await createKey({ name: "engine-secrets", balance_usd: 10 })).key;
	await setNode(nodes.content, { scenario: "echoauthcontent" });
	await setNode(nodes.mid, { scenario: "echoauthmid" });
	await setNode(nodes.err200, { scenario: "echoauth200" });
	await setNode(nodes.escaped, { scenario: "echoauthescaped" });
	await setNode(nodes.escapedEmbed, { scenario: "echoauthescaped" });
	for (const method of ["warn", "error"] as const) {
		vi.spyOn(console, method).mockImplementation((...args: unknown[]) => {
			logs.push(args.map(String).join(" "));
		});
	}
});

afterAll(() => {
	vi.restoreAllMocks();
});

/** The text a stream's chunks carry, in order. */
function streamedText(frames: string[], pick: (chunk: Record<string, unknown>) => unknown): string {
	let text = "";
	for (const f of frames) {
		if (f === "[DONE]") continue;
		const v = pick(JSON.parse(f) as Record<string, unknown>);
		if (typeof v === "string") text += v;
	}
	return text;
}

const choice0 = (c: Record<string, unknown>) => (c.choices as Array<Record<string, unknown>> | undefined)?.[0];

describe("completion text that echoes the node key", () => {
	it("is redacted in a chat stream, the key split over two frames", async () => {
		const a = await gw.chat(key, { model: "echo", stream: true, messages: [{ role: "user", content: "hi" }] });
		expect(a.res.status).toBe(200);
		expect(a.text).not.toContain(TEST_NODE_KEY);
		const frames = await readSse(new Response(a.text));
		const content = streamedText(frames, (c) => (choice0(c)?.delta as Record<string, unknown> | undefined)?.content);
		expect(content).toMatch(/^Echo: hi Authorization: Bearer \[redacted\]/);
	});

	it("is redacted in a chat answer", async () => {
		const a = await gw.chat(key, { model: "echo", messages: [{ role: "user", content: "hi" }] });
		expect(a.res.status).toBe(200);
		expect(a.text).not.toContain(TEST_NODE_KEY);
		expect((choice0(a.json ?? {})?.message as { content?: string } | undefined)?.content).toMatch(
			/Authorization: Bearer \[redacted\]/,
		);
	});

	it("is redacted in legacy completions, streamed and not", async () => {
		const streamed = await gw.post(key, "/v1/completions", { model: "echo", prompt: "hi", max_tokens: 50, stream: true });
		expect(streamed.res.status).toBe(200);
		expect(streamed.text).not.toContain(TEST_NODE_KEY);
		const text = streamedText(await readSse(new Response(streamed.text)), (c) => choice0(c)?.text);
		expect(text).toBe("Echo: hi Authorization: Bearer [redacted]");
		const whole = await gw.post(key, "/v1/completions", { model: "echo", prompt: "hi", max_tokens: 50 });
		expect(whole.res.status).toBe(200);
		expect(whole.text).not.toContain(TEST_NODE_KEY);
		expect(choice0(whole.json ?? {})?.text).toBe("Echo: hi Authorization: Bearer [redacted]");
	});

	it("is redacted in Responses, streamed and not", async () => {
		const streamed = await gw.post(key, "/v1/responses", { model: "echo", input: "hi", stream: true, store: false });
		expect(streamed.res.status).toBe(200);
		expect(streamed.text).not.toContain(TEST_NODE_KEY);
		expect(streamed.text).toContain("Bearer [redacted]");
		const whole = await gw.post(key, "/v1/responses", { model: "echo", input: "hi", store: false });
		expect(whole.res.status).toBe(200);
		expect(whole.text).not.toContain(TEST_NODE_KEY);
		expect(whole.text).toContain("Bearer [redacted]");
	});
});

describe("engine errors that echo the node key", () => {
	it("never reach a log line: a mid-stream failure, and an error in place of the answer (non-stream)", async () => {
		const mid = await gw.chat(key, { model: "mid", stream: true, messages: [{ role: "user", content: "hi" }] });
		expect(mid.res.status).toBe(200);
		const err = await gw.chat(key, { model: "err200", messages: [{ role: "user", content: "hi" }] });
		expect(err.res.status).toBe(502);
		const midLine = logs.find(
			(l) => l.includes("engine failed mid-stream") && l.includes(mid.res.headers.get("x-request-id") ?? "?"),
		);
		const errLine = logs.find(
			// The engine is always asked for a stream: its error event ends it before any content.
			(l) => l.includes("engine failed") && l.includes(err.res.headers.get("x-request-id") ?? "?"),
		);
		expect(midLine).toContain("CUDA out of memory");
		expect(errLine).toContain("model is loading");
		for (const line of [midLine, errLine]) expect(line).toContain("[redacted]");
		expect(logs.join("\n")).not.toContain(TEST_NODE_KEY);
		expect(mid.text + err.text).not.toContain(TEST_NODE_KEY);
	});
});

describe("engine refusals", () => {
	it("are cut to 1,000 characters and never carry the node's secret", async () => {
		const k = await createKey({ balance_usd: 1 });
		const res = await chat(k.key, { model: "test/echoauth", messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(400);
		const text = await res.text();
		expect(text).not.toContain(TEST_NODE_KEY);
		const body = JSON.parse(text) as ErrorBody;
		expect(body.error.message.length).toBeLessThanOrEqual(1001);
		expect(body.error.message).toContain("[redacted]");
		expect(String(body.error.param)).not.toContain(TEST_NODE_KEY);
		// The refusal released its hold (settled just after the answer went out) and cost nothing.
		const after = await waitFor(async () => {
			const i = await info(k.id);
			return i.openHolds === 0 ? i : null;
		});
		expect(after.spentNanos).toBe(0);
	});
});

describe("a node key written with JSON escapes where the client decodes them", () => {
	type Json = Record<string, unknown>;
	const ask = [{ role: "user", content: "hi" }];
	const chatTools = [{ type: "function", function: { name: "run", parameters: { type: "object" } } }];
	const responsesTools = [{ type: "function", name: "run", parameters: { type: "object" } }];
	const messagesTools = [{ name: "run", input_schema: { type: "object" } }];
	const anthropic = { "anthropic-version": "2023-06-01" };

	/** The JSON text (arguments, content) as the client reads it: parsed, with the key's place redacted. */
	function clientParses(json: string, field = "authorization"): Json {
		const value = JSON.parse(json) as Json;
		expect(JSON.stringify(value)).not.toContain(TEST_NODE_KEY);
		expect(String(value[field])).toContain("[redacted]");
		return value;
	}

	/** Each SSE event's JSON, in order. */
	const events = async (a: { text: string }) =>
		(await readSse(new Response(a.text))).filter((f) => f !== "[DONE]").map((f) => JSON.parse(f) as Json);

	const expectOk = (a: { res: Response; text: string }) => {
		expect(a.res.status, a.text.slice(0, 300)).toBe(200);
		expect(a.text).not.toContain(TEST_NODE_KEY);
	};

	it("is redacted on chat, in content and tool-call arguments, streamed and not", async () => {
		for (const tools of [undefined, chatTools]) {
			const streamed = await gw.chat(key, { model: "escaped", stream: true, messages: ask, tools });
			expectOk(streamed);
			const frames = await events(streamed);
			const delta = (c: Json) => choice0(c)?.delta as Json | undefined;
			const args = streamedText(
				frames.map((f) => JSON.stringify(f)),
				(c) => ((delta(c)?.tool_calls as Array<{ function: { arguments?: string } }> | undefined) ?? [])[0]?.function.arguments,
			);
			const content = streamedText(
				frames.map((f) => JSON.stringify(f)),
				(c) => delta(c)?.content,
			);
			clientParses(tools ? args : content);
			const whole = await gw.chat(key, { model: "escaped", messages: ask, tools });
			expectOk(whole);
			const message = choice0(whole.json ?? {})?.message as {
				content?: string;
				tool_calls?: Array<{ function: { arguments: string } }>;
			};
			clientParses(tools ? (message.tool_calls?.[0]?.function.arguments ?? "") : (message.content ?? ""));
		}
	});

	it("is redacted on Responses, in output text and function_call arguments, streamed and not", async () => {
		for (const tools of [undefined, responsesTools]) {
			const body = { model: "escaped", input: "hi", store: false, tools };
			const streamed = await gw.post(key, "/v1/responses", { ...body, stream: true });
			expectOk(streamed);
			const all = await events(streamed);
			const deltas = (type: string) =>
				all
					.filter((e) => e.type === type)
					.map((e) => e.delta)
					.join("");
			clientParses(deltas(tools ? "response.function_call_arguments.delta" : "response.output_text.delta"));
			const whole = await gw.post(key, "/v1/responses", body);
			expectOk(whole);
			const output = (whole.json?.output ?? []) as Array<Json & { content?: Array<{ text?: string }> }>;
			const call = output.find((o) => o.type === "function_call");
			const message = output.find((o) => o.type === "message");
			clientParses(tools ? String(call?.arguments) : String(message?.content?.[0]?.text));
		}
	});

	it("is redacted on Messages, in text and tool_use input (decoded by the gateway into an object), streamed and not", async () => {
		for (const tools of [undefined, messagesTools]) {
			const body = { model: "escaped", max_tokens: 100, messages: ask, tools };
			const streamed = await gw.post(key, "/v1/messages", { ...body, stream: true }, anthropic);
			expectOk(streamed);
			const all = await events(streamed);
			const deltas = (type: string, field: string) =>
				all
					.filter((e) => e.type === "content_block_delta" && (e.delta as Json).type === type)
					.map((e) => (e.delta as Json)[field])
					.join("");
			clientParses(tools ? deltas("input_json_delta", "partial_json") : deltas("text_delta", "text"));
			const whole = await gw.post(key, "/v1/messages", body, anthropic);
			expectOk(whole);
			const blocks = (whole.json?.content ?? []) as Array<Json>;
			const toolUse = blocks.find((b) => b.type === "tool_use");
			const text = blocks.find((b) => b.type === "text");
			if (tools) clientParses(JSON.stringify(toolUse?.input ?? {}));
			else clientParses(String(text?.text));
		}
	});

	it("is redacted on Gemini, in text and functionCall args (decoded by the gateway into an object), streamed and not", async () => {
		const geminiTools = [{ functionDeclarations: [{ name: "run", parametersJsonSchema: { type: "object" } }] }];
		type Part = { text?: string; functionCall?: { args: Json } };
		const partsOf = (answers: Json[]) =>
			answers.flatMap((a) =>
				((a.candidates as Array<{ content: { parts: Part[] } }> | undefined) ?? []).flatMap((c) => c.content.parts),
			);
		for (const tools of [undefined, geminiTools]) {
			const body = { contents: [{ role: "user", parts: [{ text: "hi" }] }], tools };
			const streamed = await gw.post(key, "/v1beta/models/escaped:streamGenerateContent?alt=sse", body);
			expectOk(streamed);
			const frames = partsOf(await events(streamed));
			const whole = await gw.post(key, "/v1beta/models/escaped:generateContent", body);
			expectOk(whole);
			for (const parts of [frames, partsOf([whole.json ?? {}])]) {
				const call = parts.find((p) => p.functionCall)?.functionCall;
				if (tools) clientParses(JSON.stringify(call?.args ?? {}));
				else clientParses(parts.map((p) => p.text ?? "").join(""));
			}
		}
	});

	it("is redacted in legacy completions' text, streamed and not, read with its escapes decoded", async () => {
		const decoded = (text: string) => JSON.parse(`"${text}"`) as string;
		const streamed = await gw.post(key, "/v1/completions", { model: "escaped", prompt: "hi", max_tokens: 50, stream: true });
		expectOk(streamed);
		const text = streamedText(await readSse(new Response(streamed.text)), (c) => choice0(c)?.text);
		expect(decoded(text)).toBe("Echo: hi Authorization: Bearer [redacted]");
		const whole = await gw.post(key, "/v1/completions", { model: "escaped", prompt: "hi", max_tokens: 50 });
		expectOk(whole);
		expect(decoded(String(choice0(whole.json ?? {})?.text))).toBe("Echo: hi Authorization: Bearer [redacted]");
	});

	it("is redacted in an embeddings answer whose raw JSON escapes it (the gateway relays the engine's items)", async () => {
		const a = await gw.post(key, "/v1/embeddings", { model: "escaped-embed", input: "hi" });
		expectOk(a);
		const item = (a.json?.data as Json[] | undefined)?.[0] ?? {};
		expect(String(item.echo)).toContain("[redacted]");
		expect(JSON.stringify(a.json)).not.toContain(TEST_NODE_KEY);
	});
});
