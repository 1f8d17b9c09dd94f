/**
 * What every lane refuses before anything is held or sent to an engine: engine fields that escape
 * the caps or the operator's control (400 `unsupported_parameter` naming the field), strings
 * holding a lone UTF-16 surrogate (400 `invalid_value` naming where), and sampling parameters out
 * of OpenAI's ranges (400 naming the param). Values in range still reach the engine as sent.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { FIELD_HINTS } from "../../../src/http/engine-fields";
import { info } from "../../support/billing";
import { admin, chat, createKey, engineRequests, engineRequestsSince, gw, lastEngineId } from "../../support/gateway";

interface ErrorBody {
	error: { message: string; type: string; param: string | null; code: string | null };
}

type Json = Record<string, unknown>;

let markers = 0;
/** A text unique to one request, to find it (or not) among the engine's requests. */
function marker(): string {
	return `refusal-probe-${Date.now()}-${++markers}`;
}

function postRaw(path: string, key: string, body: string): Promise<Response> {
	return gw(path, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body });
}

function post(path: string, key: string, body: Json): Promise<Response> {
	return postRaw(path, key, JSON.stringify(body));
}

async function expect400(res: Response, param: string | null, code?: string): Promise<ErrorBody["error"]> {
	const text = await res.text();
	expect(res.status, text).toBe(400);
	const { error } = JSON.parse(text) as ErrorBody;
	expect(error.param).toBe(param);
	if (code !== undefined) expect(error.code).toBe(code);
	return error;
}

/** One minimal request per lane, carrying `text` where the engine sees it. */
const LANES: Record<string, { path: string; body: (text: string) => Json }> = {
	chat: { path: "/v1/chat/completions", body: (text) => ({ model: "test/ok", messages: [{ role: "user", content: text }] }) },
	completions: { path: "/v1/completions", body: (text) => ({ model: "test/ok", prompt: text, max_tokens: 1 }) },
	embeddings: { path: "/v1/embeddings", body: (text) => ({ model: "test/embed", input: text }) },
	responses: { path: "/v1/responses", body: (text) => ({ model: "test/ok", input: text, store: false }) },
};

/** The engine fields clients send by habit: refused on every lane with their hint (the allowlist decides). */
const REFUSED = Object.keys(FIELD_HINTS);

/** One key for the file: a refused request costs nothing, and the few that run cost little. */
const k = { key: "" };
beforeAll(async () => {
	k.key = (await createKey({ balance_usd: 5 })).key;
});

function nest(levels: number): Record<string, unknown> {
	let v: Record<string, unknown> = { type: "string" };
	for (let i = 1; i < levels; i++) v = { type: "object", properties: { a: v } };
	return v;
}

/** A value that is exactly `levels` containers deep. */
function containers(levels: number): unknown {
	let v: unknown = {};
	for (let i = 1; i < levels; i++) v = { a: v };
	return v;
}

describe("engine fields that escape the caps, on every lane", () => {
	const cases = Object.keys(LANES).flatMap((lane) =>
		REFUSED.filter((field) => !(lane === "completions" && field === "best_of")).map((field) => [lane, field] as const),
	);

	it.each(cases)("%s refuses %s with 400 unsupported_parameter naming it, before the engine", async (lane, field) => {
		const { path, body } = LANES[lane] as (typeof LANES)[string];
		const probe = marker();
		const error = await expect400(await post(path, k.key, { ...body(probe), [field]: 5 }), field, "unsupported_parameter");
		expect(error.message).toContain(`'${field}'`);
		expect(await engineRequests({ contains: probe })).toEqual([]);
	});

	it.each(Object.keys(LANES))("%s refuses a chat_template inside chat_template_kwargs", async (lane) => {
		const { path, body } = LANES[lane] as (typeof LANES)[string];
		const res = await post(path, k.key, { ...body("hi"), chat_template_kwargs: { chat_template: "{{ 7*7 }}" } });
		// Chat sends the kwargs to the engine and refuses a template among them; the other lanes do not know the field.
		const param = lane === "chat" ? "chat_template_kwargs.chat_template" : "chat_template_kwargs";
		await expect400(res, param, "unsupported_parameter");
	});

	it("legacy completions refuses n_predict, which llama.cpp lets win over max_tokens", async () => {
		const probe = marker();
		const res = await post("/v1/completions", k.key, { model: "test/ok", prompt: probe, max_tokens: 1, n_predict: 200_000 });
		await expect400(res, "n_predict", "unsupported_parameter");
		expect(await engineRequests({ contains: probe })).toEqual([]);
	});

	it("legacy completions keeps best_of, its own field, and passes it on", async () => {
		const probe = marker();
		const res = await post("/v1/completions", k.key, { model: "test/ok", prompt: probe, max_tokens: 2, n: 1, best_of: 2 });
		expect(res.status, await res.clone().text()).toBe(200);
		const [call] = await engineRequests({ contains: probe });
		expect(call?.body?.best_of).toBe(2);
	});
});

describe("lone UTF-16 surrogates, on every lane", () => {
	it.each(Object.keys(LANES))("%s refuses a lone surrogate with 400 invalid_value naming where it is", async (lane) => {
		const { path, body } = LANES[lane] as (typeof LANES)[string];
		const sent = body("a\ud800b");
		const param = lane === "chat" ? "messages[0].content" : lane === "completions" ? "prompt" : "input";
		await expect400(await post(path, k.key, sent), param, "invalid_value");
	});

	it.each(Object.keys(LANES))("%s keeps emoji escaped as surrogate pairs (ensure_ascii clients)", async (lane) => {
		const { path, body } = LANES[lane] as (typeof LANES)[string];
		const probe = marker();
		// What Python's json.dumps sends for "🚀": a well-formed pair of escapes.
		const raw = JSON.stringify(body(`${probe} 🚀`)).replace("🚀", "\\ud83d\\ude80");
		const res = await postRaw(path, k.key, raw);
		expect(res.status, await res.clone().text()).toBe(200);
		const [call] = await engineRequests({ contains: probe });
		expect(JSON.stringify(call?.body)).toContain("🚀");
	});

	it("refuses a lone low surrogate in an object key, naming the key", async () => {
		const res = await post("/v1/chat/completions", k.key, { ...LANES.chat?.body("hi"), chat_template_kwargs: { "x\udc00": 1 } });
		await expect400(res, "chat_template_kwargs.x\udc00", "invalid_value");
	});

	it("refuses one in a Responses input item and in metadata", async () => {
		const item = await post("/v1/responses", k.key, {
			model: "test/ok",
			input: [
				{ role: "user", content: [{ type: "input_text", text: "ok" }] },
				{ role: "user", content: "\udfff" },
			],
		});
		await expect400(item, "input[1].content", "invalid_value");
		const meta = await post("/v1/responses", k.key, { model: "test/ok", input: "hi", metadata: { tag: "x\ud800" } });
		await expect400(meta, "metadata.tag", "invalid_value");
	});

	it("refuses one in an admin body's stored strings (key metadata, a credit note)", async () => {
		await expect400(
			await admin("/keys", { method: "POST", body: JSON.stringify({ name: "n", metadata: { team: "a\ud800" } }) }),
			"metadata.team",
			"invalid_value",
		);
		const { id } = await createKey();
		const credit = await admin(`/keys/${id}/credits`, {
			method: "POST",
			body: JSON.stringify({ amount_usd: 1, note: "\udbff" }),
		});
		await expect400(credit, "note", "invalid_value");
	});

	it("refuses one in a token's name on POST /v1/tokens", async () => {
		const parent = await createKey();
		const res = await post("/v1/tokens", parent.key, { allowed_origins: ["https://app.example.com"], name: "tok\ud800" });
		await expect400(res, "name", "invalid_value");
	});
});

describe("sampling parameters in OpenAI's ranges", () => {
	const CHAT_OUT_OF_RANGE: Array<[string, unknown, string]> = [
		["temperature", 99, "temperature"],
		["temperature", -0.1, "temperature"],
		["temperature", "0.5", "temperature"],
		["top_p", 1.5, "top_p"],
		["frequency_penalty", 2.5, "frequency_penalty"],
		["presence_penalty", -3, "presence_penalty"],
		["seed", 2 ** 53, "seed"],
		["seed", 1.5, "seed"],
		["logit_bias", { "50256": 101 }, "logit_bias.50256"],
		["logit_bias", { "50256": -100.5 }, "logit_bias.50256"],
		["stop", ["a", "b", "c", "d", "e"], "stop"],
		["stop", 7, "stop"],
		["logprobs", 3, "logprobs"],
		["top_logprobs", 21, "top_logprobs"],
		["top_logprobs", -1, "top_logprobs"],
	];

	it.each(CHAT_OUT_OF_RANGE)("chat refuses %s = %j with 400 naming %s, before the engine", async (field, value, param) => {
		const probe = marker();
		const res = await post("/v1/chat/completions", k.key, { ...LANES.chat?.body(probe), [field]: value });
		await expect400(res, param);
		expect(await engineRequests({ contains: probe })).toEqual([]);
	});

	const COMPLETION_OUT_OF_RANGE: Array<[string, unknown, string]> = [
		["temperature", 99, "temperature"],
		["top_p", -0.5, "top_p"],
		["presence_penalty", 2.01, "presence_penalty"],
		["seed", -(2 ** 53), "seed"],
		["logit_bias", { "13": 1000 }, "logit_bias.13"],
		["stop", ["1", "2", "3", "4", "5"], "stop"],
		["logprobs", 6, "logprobs"],
		["logprobs", true, "logprobs"],
	];

	it.each(COMPLETION_OUT_OF_RANGE)("legacy completions refuses %s = %j naming %s", async (field, value, param) => {
		await expect400(await post("/v1/completions", k.key, { ...LANES.completions?.body("hi"), [field]: value }), param);
	});

	it.each([
		["temperature", 2.5],
		["top_p", 1.01],
		["top_logprobs", 21],
	])("Responses refuses %s = %j naming it", async (field, value) => {
		const error = await expect400(await post("/v1/responses", k.key, { ...LANES.responses?.body("hi"), [field]: value }), field);
		expect(error.message).toMatch(/^Invalid value for/);
	});

	it.each(["/v1/chat/completions", "/v1/completions", "/v1/responses"])(
		"%s refuses a temperature that JSON makes infinite (1e999)",
		async (path) => {
			const lane = Object.values(LANES).find((l) => l.path === path);
			const raw = JSON.stringify({ ...lane?.body("hi"), temperature: 0 }).replace('"temperature":0', '"temperature":1e999');
			await expect400(await postRaw(path, k.key, raw), "temperature");
		},
	);

	it("chat passes values at the edges of the ranges to the engine as sent", async () => {
		const probe = marker();
		const edges = {
			temperature: 2,
			top_p: 0,
			frequency_penalty: -2,
			presence_penalty: 2,
			seed: Number.MAX_SAFE_INTEGER,
			logit_bias: { "50256": -100, "13": 100 },
			stop: ["a", "b", "c", "d"],
			logprobs: true,
			top_logprobs: 20,
		};
		const res = await post("/v1/chat/completions", k.key, { ...LANES.chat?.body(probe), ...edges });
		expect(res.status, await res.clone().text()).toBe(200);
		const [call] = await engineRequests({ contains: probe });
		expect(call?.body).toMatchObject(edges);
	});

	it("legacy completions passes logprobs 5 and nulls (the defaults) on", async () => {
		const probe = marker();
		const sent = { logprobs: 5, temperature: null, stop: null, seed: null };
		const res = await post("/v1/completions", k.key, { ...LANES.completions?.body(probe), ...sent });
		expect(res.status, await res.clone().text()).toBe(200);
		const [call] = await engineRequests({ contains: probe });
		expect(call?.body).toMatchObject(sent);
	});

	it("Responses accepts top_logprobs in range", async () => {
		const res = await post("/v1/responses", k.key, { ...LANES.responses?.body("hi"), top_logprobs: 20, temperature: 0 });
		expect(res.status, await res.clone().text()).toBe(200);
	});
});

describe("JSON nesting depth", () => {
	const deepTool = (levels: number) => [{ type: "function", function: { name: "f", parameters: nest(levels) } }];

	it("refuses a deeply nested tool schema with 400 before the hold (chat)", async () => {
		const k = await createKey({ balance_usd: 1 });
		const since = await lastEngineId();
		for (const stream of [false, true]) {
			const res = await chat(k.key, {
				model: "test/ok",
				stream,
				tools: deepTool(5000),
				messages: [{ role: "user", content: "hi" }],
			});
			expect(res.status).toBe(400);
			const body = (await res.json()) as ErrorBody;
			expect(body.error).toMatchObject({ type: "invalid_request_error", param: "tools[0].function.parameters" });
		}
		expect(await engineRequestsSince(since)).toHaveLength(0);
		expect((await info(k.id)).openHolds).toBe(0);
	});

	it("refuses a deep response_format schema (chat) and text.format.schema (Responses)", async () => {
		const k = await createKey({ balance_usd: 1 });
		const schema = nest(200);
		const res = await chat(k.key, {
			model: "test/ok",
			response_format: { type: "json_schema", json_schema: { name: "x", schema } },
			messages: [{ role: "user", content: "hi" }],
		});
		expect(res.status).toBe(400);
		expect(((await res.json()) as ErrorBody).error.param).toBe("response_format.json_schema.schema");
		for (const extra of [{}, { stream: true }, { background: true }]) {
			const r = await gw("/v1/responses", {
				method: "POST",
				headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
				body: JSON.stringify({
					model: "test/ok",
					input: "hi",
					text: { format: { type: "json_schema", name: "x", schema } },
					...extra,
				}),
			});
			expect(r.status).toBe(400);
			expect(((await r.json()) as ErrorBody).error.param).toBe("text.format.schema");
		}
		expect((await info(k.id)).openHolds).toBe(0);
	});

	it("accepts a field nested exactly 64 levels and refuses 65", async () => {
		const k = await createKey({ balance_usd: 1 });
		const ok = await chat(k.key, {
			model: "test/ok",
			max_tokens: 5,
			chat_template_kwargs: containers(64),
			messages: [{ role: "user", content: "hi" }],
		});
		expect(ok.status).toBe(200);
		const deep = await chat(k.key, {
			model: "test/ok",
			max_tokens: 5,
			chat_template_kwargs: containers(65),
			messages: [{ role: "user", content: "hi" }],
		});
		expect(deep.status).toBe(400);
		expect(((await deep.json()) as ErrorBody).error.param).toBe("chat_template_kwargs.a.a.a");
	});
});

describe("a prompt longer than the context", () => {
	it("is our own 400 context_length_exceeded before the hold, naming the limit and the estimate", async () => {
		const k = await createKey({ balance_usd: 1 });
		const since = await lastEngineId();
		const res = await chat(k.key, { model: "test/small-context", messages: [{ role: "user", content: "x".repeat(1300) }] });
		expect(res.status).toBe(400);
		const body = (await res.json()) as ErrorBody;
		expect(body.error).toMatchObject({ type: "invalid_request_error", code: "context_length_exceeded", param: "messages" });
		expect(body.error.message).toContain("300");
		expect(body.error.message).toContain(String(Math.ceil(1300 / 4) + 4));
		expect(await engineRequestsSince(since)).toHaveLength(0);
		expect((await info(k.id)).openHolds).toBe(0);
	});
});

describe("engine fields that escape the caps (chat)", () => {
	it.each([
		"n_predict",
		"num_predict",
		"best_of",
		"use_beam_search",
		"chat_template",
		"priority",
		"request_id",
		"kv_transfer_params",
		"vllm_xargs",
	])("refuses %s with 400 naming it", async (field) => {
		const k = await createKey({ balance_usd: 1 });
		const res = await chat(k.key, {
			model: "test/ok",
			[field]: field === "chat_template" ? "{{x}}" : 5,
			messages: [{ role: "user", content: "hi" }],
		});
		expect(res.status).toBe(400);
		expect(((await res.json()) as ErrorBody).error).toMatchObject({ param: field, code: "unsupported_parameter" });
	});

	it("refuses a chat_template smuggled in chat_template_kwargs, and passes other kwargs on", async () => {
		const k = await createKey({ balance_usd: 1 });
		const bad = await chat(k.key, {
			model: "test/ok",
			chat_template_kwargs: { chat_template: "{{ 7*7 }}" },
			messages: [{ role: "user", content: "hi" }],
		});
		expect(bad.status).toBe(400);
		expect(((await bad.json()) as ErrorBody).error.param).toBe("chat_template_kwargs.chat_template");
		const since = await lastEngineId();
		const ok = await chat(k.key, {
			model: "test/ok",
			chat_template_kwargs: { enable_thinking: false },
			messages: [{ role: "user", content: "hi" }],
		});
		expect(ok.status).toBe(200);
		const [call] = await engineRequestsSince(since);
		expect(call?.body?.chat_template_kwargs).toEqual({ enable_thinking: false });
	});

	it.each([1e20, 2.5, 0, -1])("answers n = %s with the n message", async (n) => {
		const k = await createKey({ balance_usd: 1 });
		const res = await chat(k.key, { model: "test/ok", n, messages: [{ role: "user", content: "hi" }] });
		expect(res.status).toBe(400);
		const e = ((await res.json()) as ErrorBody).error;
		expect(e.param).toBe("n");
		expect(e.message).toMatch(/^Invalid 'n'/);
	});
});
