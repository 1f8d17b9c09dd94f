/**
 * Request validation and error shapes on the public API, and the model catalog endpoints.
 */
import { env } from "cloudflare:test";
import { beforeAll, describe, expect, it } from "vitest";
import { app } from "../../src/app";
import { chat, createKey, engineRequests, gw } from "../support/gateway";

type Json = Record<string, unknown>;
type ErrorBody = { error: { message: string; type: string; param: string | null; code: string | null } };

let key: string;

beforeAll(async () => {
	key = (await createKey({ name: "errors", balance_usd: 100 })).key;
});

function auth(extra: Record<string, string> = {}): Record<string, string> {
	return { authorization: `Bearer ${key}`, ...extra };
}

function marker(): string {
	return `m${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
}

async function engineSaw(m: string): Promise<boolean> {
	return (await engineRequests({ contains: m })).length > 0;
}

function postRaw(body: BodyInit, headers: Record<string, string> = {}): Promise<Response> {
	return gw("/v1/chat/completions", { method: "POST", headers: auth({ "content-type": "application/json", ...headers }), body });
}

/** Asserts an OpenAI-shaped error with this status and returns its `error`. */
async function expectError(res: Response, status: number): Promise<ErrorBody["error"]> {
	const text = await res.text();
	expect(res.status, text).toBe(status);
	expect(res.headers.get("content-type")).toMatch(/application\/json/);
	const body = JSON.parse(text) as ErrorBody;
	expect(Object.keys(body)).toEqual(["error"]);
	expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
	expect(typeof body.error.message).toBe("string");
	expect(body.error.message.length).toBeGreaterThan(0);
	expect(typeof body.error.type).toBe("string");
	return body.error;
}

describe("chat request validation", () => {
	it("refuses malformed JSON with 400", async () => {
		const error = await expectError(await postRaw('{"model": "test/ok", "messages": ['), 400);
		expect(error.type).toBe("invalid_request_error");
	});

	it("refuses an empty body and a body that is not an object with 400", async () => {
		for (const body of ["", "[]", "42", '"text"', "null"]) {
			const error = await expectError(await postRaw(body), 400);
			expect(error.type, body).toBe("invalid_request_error");
		}
	});

	it.each<[string, Json, string]>([
		["model is missing", { messages: [{ role: "user", content: "hi" }] }, "model"],
		["model is not a string", { model: 7, messages: [{ role: "user", content: "hi" }] }, "model"],
		["model is empty", { model: "", messages: [{ role: "user", content: "hi" }] }, "model"],
		["messages is missing", { model: "test/ok" }, "messages"],
		["messages is empty", { model: "test/ok", messages: [] }, "messages"],
		["messages is not an array", { model: "test/ok", messages: "hi" }, "messages"],
		["a role is unknown", { model: "test/ok", messages: [{ role: "robot", content: "hi" }] }, "messages[0].role"],
		[
			"a later role is missing",
			{ model: "test/ok", messages: [{ role: "user", content: "a" }, { content: "b" }] },
			"messages[1].role",
		],
		["a user message has no content", { model: "test/ok", messages: [{ role: "user" }] }, "messages[0].content"],
		["content is a number", { model: "test/ok", messages: [{ role: "user", content: 5 }] }, "messages[0].content"],
		[
			"max_tokens is a string",
			{ model: "test/ok", messages: [{ role: "user", content: "hi" }], max_tokens: "100" },
			"max_tokens",
		],
		["max_tokens is zero", { model: "test/ok", messages: [{ role: "user", content: "hi" }], max_tokens: 0 }, "max_tokens"],
		[
			"max_tokens is fractional",
			{ model: "test/ok", messages: [{ role: "user", content: "hi" }], max_tokens: 1.5 },
			"max_tokens",
		],
		[
			"max_completion_tokens is negative",
			{ model: "test/ok", messages: [{ role: "user", content: "hi" }], max_completion_tokens: -1 },
			"max_completion_tokens",
		],
		["stream is a string", { model: "test/ok", messages: [{ role: "user", content: "hi" }], stream: "yes" }, "stream"],
		[
			"venym.search_results is 11",
			{ model: "test/ok", messages: [{ role: "user", content: "hi" }], venym: { search_results: 11 } },
			"venym.search_results",
		],
		[
			"venym.search_results is 0",
			{ model: "test/ok", messages: [{ role: "user", content: "hi" }], venym: { search_results: 0 } },
			"venym.search_results",
		],
		[
			"venym.web_search is not a boolean",
			{ model: "test/ok", messages: [{ role: "user", content: "hi" }], venym: { web_search: "yes" } },
			"venym.web_search",
		],
	])("refuses a body whose %s with 400 and param %s", async (_label, body, param) => {
		const error = await expectError(await chat(key, body), 400);
		expect(error.type).toBe("invalid_request_error");
		expect(error.param).toBe(param);
	});

	it("calls no engine for an invalid request", async () => {
		const m = marker();
		await expectError(await chat(key, { model: "test/ok", messages: [{ role: "user", content: m }], max_tokens: "9" }), 400);
		await expectError(await chat(key, { model: "test/ok", messages: [{ role: "robot", content: m }] }), 400);
		await expectError(await chat(key, { model: "test/nope", messages: [{ role: "user", content: m }] }), 404);
		expect(await engineSaw(m)).toBe(false);
	});

	it("accepts every documented role and content given as parts", async () => {
		const res = await chat(key, {
			model: "test/ok",
			messages: [
				{ role: "system", content: "s" },
				{ role: "developer", content: [{ type: "text", text: "d" }] },
				{ role: "user", content: [{ type: "text", text: "u" }] },
				{ role: "assistant", content: "a" },
				{ role: "user", content: "again" },
			],
		});
		expect(res.status, await res.clone().text()).toBe(200);
	});

	it("answers 404 model_not_found with param model for an unknown model", async () => {
		for (const model of ["test/nope", "engine-ok", "test/nope:online", "TEST/OK"]) {
			const error = await expectError(await chat(key, { model, messages: [{ role: "user", content: "hi" }] }), 404);
			expect(error.code, model).toBe("model_not_found");
			expect(error.param).toBe("model");
			expect(error.message).toContain(model);
		}
	});

	it("refuses a body over 4 MiB with 413", async () => {
		const big = JSON.stringify({ model: "test/ok", messages: [{ role: "user", content: "x".repeat(4 * 1024 * 1024 + 10) }] });
		const error = await expectError(await postRaw(big), 413);
		expect(error.code).toBe("request_too_large");
	});

	it("refuses an oversized body sent without a content-length with 413", async () => {
		const chunk = new TextEncoder().encode("x".repeat(1024 * 1024));
		let sent = 0;
		const body = new ReadableStream<Uint8Array>({
			pull(controller) {
				if (sent === 0) controller.enqueue(new TextEncoder().encode('{"model":"test/ok","messages":[{"role":"user","content":"'));
				if (sent < 6) controller.enqueue(chunk);
				else {
					controller.enqueue(new TextEncoder().encode('"}]}'));
					controller.close();
				}
				sent++;
			},
		});
		const error = await expectError(await postRaw(body), 413);
		expect(error.code).toBe("request_too_large");
	});

	it("accepts a body just under the limit", async () => {
		const m = marker();
		const res = await chat(key, {
			model: "test/ok",
			messages: [{ role: "user", content: m }],
			metadata: { padding: "x".repeat(1024 * 1024) },
		});
		expect(res.status).toBe(200);
	});
});

describe("routes", () => {
	it("answers an unknown route with an OpenAI-shaped 404", async () => {
		const error = await expectError(await gw("/v1/nope", { headers: auth() }), 404);
		expect(error.type).toBe("invalid_request_error");
		const root = await expectError(await gw("/nope"), 404);
		expect(root.type).toBe("invalid_request_error");
	});

	it("answers the wrong method on a known route with an OpenAI-shaped error", async () => {
		const res = await gw("/v1/chat/completions", { headers: auth() });
		expect([404, 405]).toContain(res.status);
		await expectError(res, res.status);
	});

	it("gives every answer a request id", async () => {
		const ok = await gw("/v1/models", { headers: auth() });
		expect(ok.headers.get("x-request-id")).toBeTruthy();
		const bad = await chat(key, { model: "test/nope", messages: [{ role: "user", content: "x" }] });
		expect(bad.headers.get("x-request-id")).toBeTruthy();
	});
});

describe("models", () => {
	it("lists the catalog with output limits, context, pricing and capabilities", async () => {
		const res = await gw("/v1/models", { headers: auth() });
		expect(res.status).toBe(200);
		const body = (await res.json()) as { object: string; data: Json[] };
		expect(body.object).toBe("list");
		const ids = body.data.map((m) => m.id);
		for (const id of ["test/ok", "test/failover", "test/small-context", "test/reasoning"]) expect(ids).toContain(id);
		const ok = body.data.find((m) => m.id === "test/ok")!;
		expect(ok).toMatchObject({
			id: "test/ok",
			object: "model",
			max_output_tokens: 1000,
			context_length: 8192,
			pricing: { input_usd_per_mtok: 1, output_usd_per_mtok: 2 },
			capabilities: ["tools", "reasoning", "web_search"],
		});
		expect(typeof ok.created).toBe("number");
		expect(typeof ok.owned_by).toBe("string");
		// Node URLs and node secrets are the operator's business.
		const text = JSON.stringify(body);
		expect(text).not.toContain(env.ENGINE_URL);
		expect(text).not.toContain("engine-ok");
		expect(text).not.toContain("NODE_KEY");
	});

	it("gets one model by an id containing a slash, raw or %2F-encoded", async () => {
		for (const path of ["/v1/models/test/ok", "/v1/models/test%2Fok", "/v1/models/test%2fok"]) {
			const res = await gw(path, { headers: auth() });
			expect(res.status, path).toBe(200);
			expect(await res.json()).toMatchObject({ id: "test/ok", object: "model", max_output_tokens: 1000 });
		}
		const small = (await (await gw("/v1/models/test/small-context", { headers: auth() })).json()) as Json;
		expect(small).toMatchObject({ id: "test/small-context", context_length: 300, max_output_tokens: 5000 });
	});

	it("answers 404 model_not_found for an unknown model id", async () => {
		for (const path of ["/v1/models/test/nope", "/v1/models/test%2Fnope", "/v1/models/nope"]) {
			const error = await expectError(await gw(path, { headers: auth() }), 404);
			expect(error.code, path).toBe("model_not_found");
		}
	});

	it("requires a key", async () => {
		await expectError(await gw("/v1/models"), 401);
		await expectError(await gw("/v1/models/test/ok"), 401);
	});
});

describe("invalid configuration", () => {
	it("answers every request with a 500 whose message names the bad field", async () => {
		const config = JSON.parse(env.GATEWAY_CONFIG as string) as { models: Json[] };
		(config.models[0] as Json).max_output_tokens = -5;
		const badEnv = { ...env, GATEWAY_CONFIG: JSON.stringify(config) };
		const ctx = { waitUntil: () => {}, passThroughOnException: () => {}, props: {} } as unknown as ExecutionContext;
		for (const [path, init] of [
			["/v1/models", { headers: auth() }],
			[
				"/v1/chat/completions",
				{
					method: "POST",
					headers: auth({ "content-type": "application/json" }),
					body: JSON.stringify({ model: "test/ok", messages: [{ role: "user", content: "hi" }] }),
				},
			],
		] as const) {
			const res = await app.fetch(new Request(`http://gateway.test${path}`, init), badEnv, ctx);
			const error = await expectError(res, 500);
			expect(error.code).toBe("config_invalid");
			expect(error.message).toContain("models.0.max_output_tokens");
		}
		// The real config still works afterwards.
		expect((await gw("/v1/models", { headers: auth() })).status).toBe(200);
	});
});
