/**
 * Real engines (issue 23): the engine is always asked for a stream, the first-byte timeout runs to
 * the first token, a non-stream client's answer is assembled from the stream and equals the
 * engine's own non-stream answer, and broken tool-call JSON is repaired when the model asks for it.
 * The development engine answers a non-stream request only when the whole answer is ready, as vLLM
 * does, and its `mute` node sends a stream's headers and role chunk and then nothing.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { fleetConfig, gatewayWith, marker, model, ownEngineUrl } from "../../support/fleet";
import { createKey, engineRequests, readSse } from "../../support/gateway";

const engine = ownEngineUrl("real-engines");
const node = (scenario?: string) => (scenario ? `${engine}/s/${scenario}/v1` : `${engine}/v1`);
const FIRST_BYTE_MS = 600;

const config = {
	...fleetConfig(
		[
			model("ok", [node()], { capabilities: ["tools", "reasoning"] }),
			// 40 words, one every 50 ms: about 2 s, over three first-byte timeouts.
			model("slow", [node("slow")]),
			model("mute", [node("mute")], { fallbacks: ["ok"] }),
			model("mute-alone", [node("mute")]),
			model("reasoner", [node("reasoning")]),
			model("broken", [node("brokentool")], { tool_call_repair: true }),
			model("broken-raw", [node("brokentool")]),
		],
		{ max_attempts: 2 },
	),
	first_byte_timeout_ms: FIRST_BYTE_MS,
};
const gateway = gatewayWith(config);
let key: string;

beforeAll(async () => {
	key = (await createKey({ balance_usd: 10 })).key;
});

const TOOLS = [
	{ type: "function", function: { name: "lookup", parameters: { type: "object", properties: { query: { type: "string" } } } } },
];

type Json = Record<string, unknown>;
const choicesOf = (body: Json | null) => (body?.choices ?? []) as Json[];
const messageOf = (body: Json | null, i = 0) => (choicesOf(body)[i]?.message ?? {}) as Json;

/** The engine's own non-stream answer to the body the gateway would send (engine model, no venym). */
async function engineNonStream(body: Json): Promise<Json> {
	const res = await fetch(`${node()}/chat/completions`, {
		method: "POST",
		headers: { "content-type": "application/json" },
		body: JSON.stringify({ ...body, model: "engine-ok", stream: false }),
	});
	return (await res.json()) as Json;
}

describe("the engine is always asked for a stream", () => {
	it("serves a non-stream answer that takes longer than the first-byte timeout, from one engine request", async () => {
		const m = marker();
		const a = await gateway.chat(key, { model: "slow", messages: [{ role: "user", content: m }] });
		expect(a.res.status).toBe(200);
		expect(a.json?.object).toBe("chat.completion");
		expect(String(messageOf(a.json).content).split(" ")).toHaveLength(40);
		expect(choicesOf(a.json)[0]?.finish_reason).toBe("stop");
		const calls = await engineRequests({ contains: m }, engine);
		expect(calls).toHaveLength(1);
		expect(calls[0]?.body).toMatchObject({ stream: true, stream_options: { include_usage: true } });
	});

	it("serves a non-stream answer longer than both timeouts together, from one engine request", async () => {
		// The defaults' proportions scaled down (30 s and 60 s there): only the first token must come
		// within first_byte_timeout_ms, and each next one within stream_idle_timeout_ms of the last.
		const config = { ...fleetConfig([model("long", [node("long")])]), first_byte_timeout_ms: 500, stream_idle_timeout_ms: 1000 };
		const m = marker();
		const a = await gatewayWith(config).chat(key, { model: "long", messages: [{ role: "user", content: m }] });
		expect(a.res.status, a.text).toBe(200);
		expect(String(messageOf(a.json).content).split(" ")).toHaveLength(90);
		expect(a.ms).toBeGreaterThan(config.first_byte_timeout_ms + config.stream_idle_timeout_ms);
		const calls = await engineRequests({ contains: m }, engine);
		expect(calls).toHaveLength(1);
		expect(calls[0]?.aborted).toBe(false);
	});

	it("asks for a stream on legacy completions too, and assembles their text", async () => {
		const m = marker();
		const a = await gateway.post(key, "/v1/completions", { model: "ok", prompt: `say ${m}`, max_tokens: 5 });
		expect(a.res.status).toBe(200);
		expect(a.json).toMatchObject({ object: "text_completion", model: "ok" });
		expect(choicesOf(a.json)[0]).toMatchObject({ index: 0, text: `Echo: say ${m}`, finish_reason: "stop" });
		expect(a.json?.usage).toMatchObject({ completion_tokens: 3 });
		const [call] = await engineRequests({ contains: m }, engine);
		expect(call?.body).toMatchObject({ stream: true, stream_options: { include_usage: true } });
	});
});

describe("first_byte_timeout_ms runs to the first token", () => {
	for (const stream of [false, true]) {
		it(`a mute node (headers, role chunk, silence) fails over before anything reaches the client (${stream ? "stream" : "non-stream"})`, async () => {
			const m = marker();
			const a = await gateway.chat(key, { model: "mute", stream, messages: [{ role: "user", content: m }] });
			expect(a.res.status).toBe(200);
			if (stream) {
				const frames = a.text.split("\n\n").filter((f) => f.startsWith("data: "));
				expect(frames.at(-1)).toBe("data: [DONE]");
				// Nothing of the mute node's (its id) reached the client; every chunk is the one that served.
				expect(a.text).not.toContain("chatcmpl-mute");
				const roles = frames.filter((f) => f.includes('"role":"assistant"'));
				expect(roles).toHaveLength(1);
			} else {
				expect(messageOf(a.json).content).toBe(`Echo: ${m}`);
				expect(a.json?.model).toBe("ok");
			}
			const calls = await engineRequests({ contains: m }, engine);
			expect(calls.map((c) => c.scenario).sort()).toEqual(["mute", "ok"]);
			expect(calls.find((c) => c.scenario === "mute")?.aborted).toBe(true);
		});
	}

	it("a model whose only node is mute answers 504 upstream_timeout, and nothing is charged", async () => {
		const k = await createKey({ balance_usd: 1 });
		for (const stream of [false, true]) {
			const a = await gateway.chat(k.key, { model: "mute-alone", stream, messages: [{ role: "user", content: marker() }] });
			expect(a.res.status).toBe(504);
			expect((a.json?.error as Json)?.code).toBe("upstream_timeout");
		}
		const info = (await gateway.admin(`/keys/${k.id}`)).json as Json;
		expect(info.spent_usd).toBe(0);
	});
});

describe("the gateway's non-stream answer equals the engine's own", () => {
	const cases: Array<[string, Json]> = [
		["plain text", { model: "ok", messages: [{ role: "user", content: "hello there" }] }],
		["a tool call", { model: "ok", tools: TOOLS, messages: [{ role: "user", content: "find cats" }] }],
		["reasoning", { model: "reasoner", messages: [{ role: "user", content: "think first" }] }],
		["n = 2", { model: "ok", n: 2, messages: [{ role: "user", content: "two ways" }] }],
	];
	for (const [name, body] of cases) {
		it(name, async () => {
			const a = await gateway.chat(key, body);
			expect(a.res.status).toBe(200);
			// The reasoner's node streams reasoning under its own field; ask the same node for its answer.
			const direct =
				body.model === "reasoner"
					? ((await (
							await fetch(`${node("reasoning")}/chat/completions`, {
								method: "POST",
								headers: { "content-type": "application/json" },
								body: JSON.stringify({ ...body, model: "engine-reasoner", stream: false }),
							})
						).json()) as Json)
					: await engineNonStream(body);
			const mine = choicesOf(a.json);
			const theirs = choicesOf(direct);
			expect(mine).toHaveLength(theirs.length);
			for (const [i, c] of theirs.entries()) {
				const m = mine[i] as Json;
				expect(m.index).toBe(c.index);
				expect(m.finish_reason).toBe(c.finish_reason);
				const mm = m.message as Json;
				const cm = c.message as Json;
				expect(mm.role).toBe(cm.role);
				expect(mm.content).toEqual(cm.content);
				for (const field of ["reasoning_content", "reasoning"]) expect(mm[field]).toEqual(cm[field]);
				const calls = (x: Json) => ((x.tool_calls ?? []) as Json[]).map((t) => ({ type: t.type, function: t.function }));
				expect(calls(mm)).toEqual(calls(cm));
			}
			const usage = a.json?.usage as Json;
			const engineUsage = direct.usage as Json;
			expect(usage.prompt_tokens).toBe(engineUsage.prompt_tokens);
			expect(usage.completion_tokens).toBe(engineUsage.completion_tokens);
			expect(a.json).toMatchObject({ object: "chat.completion", model: body.model });
			expect(typeof a.json?.id).toBe("string");
			expect(typeof a.json?.created).toBe("number");
		});
	}
});

describe("tool-call repair", () => {
	const ask = (model: string, extra: Json = {}) => ({
		model,
		tools: TOOLS,
		messages: [{ role: "user", content: `find ${marker()}` }],
		...extra,
	});
	const streamedArgs = (text: string) => {
		let args = "";
		let usageChunk: Json | undefined;
		for (const frame of text.split("\n\n")) {
			if (!frame.startsWith("data: {")) continue;
			const chunk = JSON.parse(frame.slice(6)) as Json;
			if (chunk.usage) usageChunk = chunk;
			for (const c of (chunk.choices ?? []) as Json[]) {
				for (const t of ((c.delta as Json | undefined)?.tool_calls ?? []) as Json[]) {
					args += ((t.function as Json | undefined)?.arguments as string | undefined) ?? "";
				}
			}
		}
		return { args, usageChunk };
	};

	it("repairs a non-stream answer's broken arguments and says so", async () => {
		const a = await gateway.chat(key, ask("broken"));
		expect(a.res.status).toBe(200);
		const call = (messageOf(a.json).tool_calls as Json[])[0] as Json;
		expect(JSON.parse((call.function as Json).arguments as string)).toMatchObject({ query: expect.stringMatching(/^find m/) });
		expect(a.json?.venym).toEqual({ tool_calls_repaired: 1 });
	});

	it("repairs a stream's arguments, sent in one delta, and counts it on the usage chunk", async () => {
		const a = await gateway.chat(key, ask("broken", { stream: true }));
		expect(a.res.status).toBe(200);
		const { args, usageChunk } = streamedArgs(a.text);
		expect(JSON.parse(args)).toMatchObject({ query: expect.stringMatching(/^find m/) });
		const argDeltas = a.text.split("\n\n").filter((f) => f.includes('"arguments":"{'));
		expect(argDeltas).toHaveLength(1);
		expect(usageChunk?.venym).toEqual({ tool_calls_repaired: 1 });
	});

	it("passes the engine's arguments byte for byte without the option, or when the request turns it off", async () => {
		for (const body of [ask("broken-raw"), ask("broken", { venym: { tool_call_repair: false } })]) {
			const a = await gateway.chat(key, body);
			const args = (((messageOf(a.json).tool_calls as Json[])[0] as Json).function as Json).arguments as string;
			expect(() => JSON.parse(args)).toThrow();
			expect(args).toMatch(/^\{"query":"find m[0-9a-f]+$/);
			expect(a.json?.venym).toBeUndefined();
			const s = streamedArgs((await gateway.chat(key, { ...body, stream: true })).text);
			expect(s.args).toMatch(/^\{"query":"find m[0-9a-f]+$/);
			expect(s.usageChunk?.venym).toBeUndefined();
		}
	});
});

describe("streams keep their shape", () => {
	it("a stream still ends with one usage chunk and [DONE]", async () => {
		const a = await gateway.chat(key, { model: "ok", stream: true, messages: [{ role: "user", content: marker() }] });
		const frames = await readSse(new Response(a.text));
		expect(frames.at(-1)).toBe("[DONE]");
		expect(frames.filter((f) => f.includes('"usage"'))).toHaveLength(1);
	});
});
