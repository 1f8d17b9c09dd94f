/**
 * The one JSON log line per inference request (src/observability): its fields on every lane,
 * written after a stream ends, refusals and engine failures, and never a secret or prompt text.
 * The worker runs in this isolate, so spying on `console` sees what it logs. Under `npm run
 * test:unit` other files share the isolate, and their background work (waitUntil, alarms,
 * queued responses) may log while this file runs: its assertions read this file's own lines,
 * those naming one of its requests or keys.
 */
import { env } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { LegacyLogFields, RequestLogLine } from "../../../src/observability/request-log";
import { type CreatedKey, chat, createKey, gw, readSse, sdkClient, waitFor } from "../../support/gateway";
import { TEST_ADMIN_TOKEN, TEST_NODE_KEY } from "../../support/test-config";

/** Everything the worker wrote to the console during this file, by method. */
const output: Array<{ method: "log" | "warn" | "error"; text: string }> = [];
/** What every prompt in this file carries: it must never reach a log. */
const MARKER = "zebra-marker-5e1f";
const secrets: string[] = [];
/** The ids of this file's requests and keys: a line naming one is this file's. */
const own: string[] = [];

const FIELDS = [
	"message",
	"request_id",
	"key_id",
	"gen_ai.operation.name",
	"gen_ai.provider.name",
	"gen_ai.request.model",
	"gen_ai.response.model",
	"lane",
	"stream",
	"http.response.status_code",
	"outcome",
	"error.type",
	"server.address",
	"server.port",
	"attempts",
	"route",
	"ttfb_ms",
	"duration_ms",
	"overhead_ms",
	"gen_ai.usage.input_tokens",
	"gen_ai.usage.output_tokens",
	"estimated",
	"cost_usd",
	"web_search",
	// The names before OpenTelemetry's, kept beside them (docs/operations.md "Renamed fields").
	"model",
	"requested_model",
	"status",
	"error_code",
	"node",
	"prompt_tokens",
	"completion_tokens",
];

/** A request line as the worker writes it; FIELDS above is what the test holds it to. */
type Line = RequestLogLine & LegacyLogFields;

beforeAll(() => {
	for (const method of ["log", "warn", "error"] as const) {
		vi.spyOn(console, method).mockImplementation((...args: unknown[]) => {
			output.push({ method, text: args.map((a) => (a instanceof Error ? `${a.message} ${a.stack}` : String(a))).join(" ") });
		});
	}
});

afterAll(() => {
	vi.restoreAllMocks();
});

/** A key of this file's, its secret and id remembered. */
async function newKey(balance_usd: number): Promise<CreatedKey> {
	const k = await createKey({ balance_usd });
	secrets.push(k.key);
	own.push(k.id);
	return k;
}

/** The id of one of this file's requests, remembered. */
function idOf(res: Response): string {
	const id = res.headers.get("x-request-id") as string;
	own.push(id);
	return id;
}

function requestLines(requestId: string): Line[] {
	return output
		.filter((o) => o.method === "log" && o.text.includes(requestId))
		.map((o) => JSON.parse(o.text) as Line)
		.filter((l) => l.message === "request" && l.request_id === requestId);
}

/** The request's line, once written (a stream's is written after it ends, under waitUntil). */
function lineOf(requestId: string): Promise<Line> {
	return waitFor(async () => requestLines(requestId)[0], 10_000);
}

function post(path: string, key: string, body: Record<string, unknown>): Promise<Response> {
	return gw(path, {
		method: "POST",
		headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
		body: JSON.stringify(body),
	});
}

function prompt(): string {
	return `say ${MARKER} back`;
}

const engineAddress = () => new URL(env.ENGINE_URL).hostname;
const enginePort = () => Number(new URL(env.ENGINE_URL).port);

describe("the request log line", () => {
	it("is one JSON line per non-stream chat with the served model, node host, tokens and cost", async () => {
		const k = await newKey(1);
		const res = await chat(k.key, { model: "test/ok", messages: [{ role: "user", content: prompt() }] });
		expect(res.status).toBe(200);
		const body = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
		const id = idOf(res);
		const line = await lineOf(id);
		expect(Object.keys(line)).toEqual(FIELDS);
		expect(line).toMatchObject({
			message: "request",
			request_id: id,
			key_id: k.id,
			"gen_ai.operation.name": "chat",
			"gen_ai.provider.name": "venym",
			"gen_ai.response.model": "test/ok",
			"gen_ai.request.model": "test/ok",
			lane: "chat",
			stream: false,
			"http.response.status_code": 200,
			outcome: "completed",
			"error.type": null,
			"server.address": engineAddress(),
			"server.port": enginePort(),
			attempts: 1,
			// No prompt_cache_key or user: its prefix keeps the conversation's node.
			route: "affinity",
			"gen_ai.usage.input_tokens": body.usage.prompt_tokens,
			"gen_ai.usage.output_tokens": body.usage.completion_tokens,
			estimated: false,
			cost_usd: Number(res.headers.get("x-venym-cost-usd")),
			web_search: null,
			// The line carries what the client was told.
			overhead_ms: Number(res.headers.get("x-venym-overhead-ms")),
			// The old names, with the same values.
			model: "test/ok",
			requested_model: "test/ok",
			status: 200,
			error_code: null,
			node: `${engineAddress()}:${enginePort()}`,
			prompt_tokens: body.usage.prompt_tokens,
			completion_tokens: body.usage.completion_tokens,
		});
		expect(res.headers.get("x-venym-overhead-ms")).toMatch(/^\d+$/);
		expect(line.cost_usd).toBeGreaterThan(0);
		expect(line.ttfb_ms).toBeGreaterThanOrEqual(0);
		expect(line.duration_ms).toBeGreaterThanOrEqual(line.ttfb_ms as number);
		expect(requestLines(id)).toHaveLength(1);
	});

	it("is written for a stream when the stream ends, with its usage and cost", async () => {
		const k = await newKey(1);
		const res = await chat(k.key, { model: "test/slow", stream: true, messages: [{ role: "user", content: prompt() }] });
		const id = idOf(res);
		expect(res.status).toBe(200);
		// The engine paces 40 words 50 ms apart: the headers are here, the stream is not over.
		expect(requestLines(id)).toHaveLength(0);
		const frames = await readSse(res);
		const usage = (JSON.parse(frames.at(-2) as string) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
		const line = await lineOf(id);
		expect(line).toMatchObject({
			lane: "chat",
			stream: true,
			"http.response.status_code": 200,
			outcome: "completed",
			"gen_ai.response.model": "test/slow",
			"gen_ai.usage.input_tokens": usage.prompt_tokens,
			"gen_ai.usage.output_tokens": usage.completion_tokens,
			attempts: 1,
		});
		expect(line["gen_ai.usage.output_tokens"]).toBeGreaterThan(0);
		expect(line.cost_usd).toBeGreaterThan(0);
		// The duration runs to the stream's end, well past the engine's first byte.
		expect(line.duration_ms).toBeGreaterThan(line.ttfb_ms as number);
		expect(requestLines(id)).toHaveLength(1);
	});

	it("names the lane of Responses, legacy completions and embeddings", async () => {
		const k = await newKey(1);
		const responses = await post("/v1/responses", k.key, { model: "test/ok", input: prompt() });
		const completions = await post("/v1/completions", k.key, { model: "test/ok", prompt: prompt(), stream: true });
		const embeddings = await post("/v1/embeddings", k.key, { model: "test/embed", input: [prompt(), "second"] });
		for (const r of [responses, completions, embeddings]) {
			expect(r.status).toBe(200);
			await r.text();
		}
		const [r, c, e] = await Promise.all([responses, completions, embeddings].map((x) => lineOf(idOf(x))));
		expect(r).toMatchObject({
			"gen_ai.operation.name": "chat",
			lane: "responses",
			stream: false,
			outcome: "completed",
			"gen_ai.response.model": "test/ok",
			key_id: k.id,
		});
		expect(c).toMatchObject({
			"gen_ai.operation.name": "text_completion",
			lane: "completions",
			stream: true,
			outcome: "completed",
			"gen_ai.response.model": "test/ok",
		});
		expect(e).toMatchObject({
			"gen_ai.operation.name": "embeddings",
			lane: "embeddings",
			stream: false,
			outcome: "completed",
			"gen_ai.response.model": "test/embed",
			"gen_ai.usage.output_tokens": 0,
		});
		for (const l of [r, c, e]) {
			expect(l?.["gen_ai.usage.input_tokens"]).toBeGreaterThan(0);
			expect(l?.cost_usd).toBeGreaterThan(0);
			expect(l?.["server.address"]).toBe(engineAddress());
		}
	});

	it("writes a queued background response's line, then its run's, under one request id", async () => {
		const k = await newKey(1);
		const c = sdkClient(k.key);
		const { data: queued, response } = await c.responses
			.create({ model: "test/ok", input: prompt(), background: true })
			.withResponse();
		const id = idOf(response);
		expect((await lineOf(id)).outcome).toBe("queued");
		await waitFor(async () => ((await c.responses.retrieve(queued.id)).status === "completed" ? true : null), 10_000);
		const run = await waitFor(async () => requestLines(id).find((l) => l.outcome !== "queued"), 10_000);
		expect(run).toMatchObject({
			lane: "responses",
			"http.response.status_code": 200,
			outcome: "completed",
			"gen_ai.response.model": "test/ok",
			key_id: k.id,
			attempts: 1,
		});
		expect(run.cost_usd).toBeGreaterThan(0);
	});

	it("shows the web search status", async () => {
		const k = await newKey(1);
		const res = await chat(k.key, { model: "test/ok:online", messages: [{ role: "user", content: prompt() }] });
		expect(res.status).toBe(200);
		await res.text();
		const line = await lineOf(idOf(res));
		expect(line.web_search).toBe(res.headers.get("x-venym-web-search"));
		expect(line.web_search).toBeTruthy();
		expect(line).toMatchObject({ "gen_ai.response.model": "test/ok", "gen_ai.request.model": "test/ok:online" });
	});

	it("is refused with the error's code for a 402, a 401 and a 400", async () => {
		const broke = await newKey(0);
		const r402 = await chat(broke.key, { model: "test/ok", stream: true, messages: [{ role: "user", content: prompt() }] });
		const r401 = await chat("vk-not-a-real-key-0123456789abcdef", {
			model: "test/ok",
			messages: [{ role: "user", content: prompt() }],
		});
		const r400 = await chat(broke.key, { model: "test/ok", messages: [], note: prompt() });
		expect([r402.status, r401.status, r400.status]).toEqual([402, 401, 400]);
		const [l402, l401, l400] = await Promise.all([r402, r401, r400].map((r) => lineOf(idOf(r))));
		expect(l402).toMatchObject({
			"http.response.status_code": 402,
			outcome: "refused",
			"error.type": "insufficient_balance",
			key_id: broke.id,
			"gen_ai.request.model": "test/ok",
			"gen_ai.response.model": null,
			stream: true,
			attempts: 0,
			"server.address": null,
			cost_usd: 0,
		});
		expect(l401).toMatchObject({
			"http.response.status_code": 401,
			outcome: "refused",
			"error.type": "invalid_api_key",
			key_id: null,
			lane: "chat",
		});
		expect(l400).toMatchObject({ "http.response.status_code": 400, outcome: "refused", key_id: broke.id, attempts: 0 });
	});

	it("is failed when every node fails, with its attempts, and warns per node with the request id", async () => {
		const k = await newKey(1);
		const res = await chat(k.key, { model: "test/all-down", messages: [{ role: "user", content: prompt() }] });
		expect(res.status).toBe(502);
		const id = idOf(res);
		const line = await lineOf(id);
		expect(line).toMatchObject({
			"http.response.status_code": 502,
			outcome: "failed",
			"error.type": "upstream_unavailable",
			attempts: 2,
			ttfb_ms: null,
			cost_usd: 0,
			"server.address": engineAddress(),
			"server.port": enginePort(),
		});
		const warnings = output
			.filter((o) => o.method === "warn" && o.text.includes(id))
			.map((o) => JSON.parse(o.text) as Record<string, unknown>);
		expect(warnings.filter((w) => w.message === "engine node failed")).toHaveLength(2);
		for (const w of warnings) expect(w).toMatchObject({ level: "warn", request_id: id });
	});

	it("is an engine error for a stream that fails mid-way, and a refusal echoing the node key logs no key", async () => {
		const k = await newKey(1);
		const mid = await chat(k.key, { model: "test/midstream", stream: true, messages: [{ role: "user", content: prompt() }] });
		await mid.text();
		expect(await lineOf(idOf(mid))).toMatchObject({
			"http.response.status_code": 200,
			stream: true,
			outcome: "engine_error",
		});
		const echo = await chat(k.key, { model: "test/echoauth", messages: [{ role: "user", content: prompt() }] });
		expect(echo.status).toBe(400);
		await echo.text();
		const refused = await lineOf(idOf(echo));
		expect(refused).toMatchObject({
			"http.response.status_code": 400,
			outcome: "engine_error",
			attempts: 1,
			"server.address": engineAddress(),
			"server.port": enginePort(),
		});
		expect(refused.ttfb_ms).toBeGreaterThanOrEqual(0);
	});

	it("never logs a key, an Authorization header, a node secret or prompt text, and every line is JSON", () => {
		// This file's lines: those naming one of its requests or keys.
		const mine = output.filter((o) => own.some((id) => o.text.includes(id)));
		expect(mine.length).toBeGreaterThan(10);
		// No secret in any line written while this file ran, another file's included.
		const all = output.map((o) => o.text).join("\n");
		expect(all).not.toContain(MARKER);
		expect(all).not.toContain(TEST_NODE_KEY);
		expect(all).not.toContain(TEST_ADMIN_TOKEN);
		expect(all).not.toMatch(/vk-/);
		expect(all).not.toMatch(/bearer/i);
		expect(all).not.toMatch(/authorization/i);
		for (const s of secrets) expect(all).not.toContain(s);
		// Background work of another file may write free text (a failed probe of its nodes) meanwhile.
		for (const o of mine) expect(() => JSON.parse(o.text), o.text).not.toThrow();
	});
});
