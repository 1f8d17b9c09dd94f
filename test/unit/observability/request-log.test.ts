import { afterEach, describe, expect, it, vi } from "vitest";
import { errorText, hostOf, logEvent, scrubUrls } from "../../../src/observability/log-event";
import { laneOf, RequestLog } from "../../../src/observability/request-log";

/** Every field of the line, in order, with its JSON type ("null" allowed where listed). */
const FIELDS: Record<string, string[]> = {
	message: ["string"],
	request_id: ["string"],
	key_id: ["string", "null"],
	"gen_ai.operation.name": ["string"],
	"gen_ai.provider.name": ["string"],
	"gen_ai.request.model": ["string", "null"],
	"gen_ai.response.model": ["string", "null"],
	lane: ["string"],
	stream: ["boolean"],
	"http.response.status_code": ["number"],
	outcome: ["string"],
	"error.type": ["string", "null"],
	"server.address": ["string", "null"],
	"server.port": ["number", "null"],
	attempts: ["number"],
	route: ["string", "null"],
	ttfb_ms: ["number", "null"],
	duration_ms: ["number"],
	overhead_ms: ["number"],
	"gen_ai.usage.input_tokens": ["number"],
	"gen_ai.usage.output_tokens": ["number"],
	estimated: ["boolean"],
	cost_usd: ["number"],
	web_search: ["string", "null"],
	// The names before OpenTelemetry's, kept beside them (docs/operations.md "Renamed fields").
	model: ["string", "null"],
	requested_model: ["string", "null"],
	status: ["number"],
	error_code: ["string", "null"],
	node: ["string", "null"],
	prompt_tokens: ["number"],
	completion_tokens: ["number"],
};

function typeOf(v: unknown): string {
	return v === null ? "null" : typeof v;
}

/** The clock the line reads, faked (nothing else is). */
function clock(start = 1_000) {
	vi.useFakeTimers({ toFake: ["Date"], now: start });
	return { advance: (ms: number) => vi.setSystemTime(Date.now() + ms) };
}

function captureLog() {
	const log = vi.spyOn(console, "log").mockImplementation(() => {});
	return () => log.mock.calls.map((c) => JSON.parse(String(c[0])) as Record<string, unknown>);
}

afterEach(() => {
	vi.useRealTimers();
	vi.restoreAllMocks();
});

describe("RequestLog", () => {
	it("writes one JSON line with exactly the documented fields and types", () => {
		const t = clock();
		const lines = captureLog();
		const log = new RequestLog("req_1", "chat");
		log.asked({ model: "venym/a:online", stream: true, messages: [{ role: "user", content: "SECRET PROMPT" }] });
		log.attempt("https://user:pass@node-a.example:8443/v1?token=abc");
		log.engineStarted();
		t.advance(20);
		log.engineEnded();
		log.attempt("http://10.0.0.5:8000/v1", "spill");
		log.engineStarted();
		t.advance(30);
		log.answered("http://10.0.0.5:8000/v1");
		log.engineEnded();
		log.webSearch = "ok";
		t.advance(100);
		log.settled(
			{ payerKeyId: "key_1", model: { id: "venym/b" }, requestedModel: "venym/b:online", fallbackFrom: "venym/a:online" },
			{
				status: "completed",
				usage: { prompt_tokens: 12, completion_tokens: 34, total_tokens: 46 },
				estimated: true,
				node: "http://10.0.0.5:8000/v1",
			},
			1_234_000,
		);
		log.streaming();
		log.write(200);
		log.write(200);

		const all = lines();
		expect(all).toHaveLength(1);
		const line = all[0] as Record<string, unknown>;
		expect(Object.keys(line)).toEqual(Object.keys(FIELDS));
		for (const [k, types] of Object.entries(FIELDS)) expect(types, k).toContain(typeOf(line[k]));
		expect(line).toEqual({
			message: "request",
			request_id: "req_1",
			key_id: "key_1",
			"gen_ai.operation.name": "chat",
			"gen_ai.provider.name": "venym",
			"gen_ai.request.model": "venym/a:online",
			"gen_ai.response.model": "venym/b",
			lane: "chat",
			stream: true,
			"http.response.status_code": 200,
			outcome: "completed",
			"error.type": null,
			"server.address": "10.0.0.5",
			"server.port": 8000,
			attempts: 2,
			route: "spill",
			ttfb_ms: 50,
			duration_ms: 150,
			// 150 ms in all, 50 of them waiting on the two engine attempts.
			overhead_ms: 100,
			"gen_ai.usage.input_tokens": 12,
			"gen_ai.usage.output_tokens": 34,
			estimated: true,
			cost_usd: 0.001234,
			web_search: "ok",
			model: "venym/b",
			requested_model: "venym/a:online",
			status: 200,
			error_code: null,
			node: "10.0.0.5:8000",
			prompt_tokens: 12,
			completion_tokens: 34,
		});
		expect(JSON.stringify(all)).not.toContain("SECRET PROMPT");
	});

	it("keeps only a node's host: no credentials, path or query", () => {
		const lines = captureLog();
		const log = new RequestLog("req_2", "embeddings");
		log.attempt("https://user:s3cret@node-b.example/v1?api_key=k3y");
		log.write(502);
		const raw = JSON.stringify(lines());
		expect(lines()[0]?.["server.address"]).toBe("node-b.example");
		expect(lines()[0]?.["server.port"]).toBeNull();
		for (const secret of ["user", "s3cret", "k3y", "/v1"]) expect(raw).not.toContain(secret);
	});

	it("is refused with the error's code when a check turns the request away", () => {
		const lines = captureLog();
		const log = new RequestLog("req_3", "responses");
		log.asked({ model: "venym/a" });
		log.payerKeyId = "key_9";
		log.failed("insufficient_balance", 402);
		log.write(402);
		expect(lines()[0]).toMatchObject({
			key_id: "key_9",
			"gen_ai.response.model": null,
			"gen_ai.request.model": "venym/a",
			"http.response.status_code": 402,
			outcome: "refused",
			"error.type": "insufficient_balance",
			attempts: 0,
			ttfb_ms: null,
			"server.address": null,
			cost_usd: 0,
			"gen_ai.usage.input_tokens": 0,
			"gen_ai.usage.output_tokens": 0,
			stream: false,
		});
	});

	it("is failed for a 5xx nothing settled, and settlement's status wins when it ran", () => {
		const lines = captureLog();
		const a = new RequestLog("req_4", "chat");
		a.failed("internal_error", 500);
		a.write(500);
		const b = new RequestLog("req_5", "chat");
		b.settled(
			{ payerKeyId: "k", model: { id: "m" }, requestedModel: "m" },
			{
				status: "engine_error",
				usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
				estimated: false,
				node: null,
			},
			0,
		);
		b.failed("invalid_value", 400);
		b.write(400);
		const c = new RequestLog("req_6", "chat");
		c.failed("client_closed_request", 499);
		c.write(499);
		expect(lines().map((l) => [l.outcome, l["error.type"]])).toEqual([
			["failed", "internal_error"],
			["engine_error", "invalid_value"],
			["client_disconnected", "client_closed_request"],
		]);
	});

	it("is queued for an accepted background response", () => {
		const lines = captureLog();
		const log = new RequestLog("req_7", "responses");
		log.queued();
		log.write(200);
		expect(lines()[0]?.outcome).toBe("queued");
	});

	it("ends a stream when it is settled, and other answers at once", async () => {
		const plain = new RequestLog("req_8", "chat");
		expect(plain.ended()).toBeUndefined();
		const streamed = new RequestLog("req_9", "chat");
		streamed.streaming();
		let ended = false;
		void streamed.ended()?.then(() => {
			ended = true;
		});
		await Promise.resolve();
		expect(ended).toBe(false);
		streamed.settled(
			{ payerKeyId: "k", model: { id: "m" }, requestedModel: "m" },
			{ status: "completed", usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 }, estimated: false, node: null },
			0,
		);
		await streamed.ended();
		expect(ended).toBe(true);
	});

	it("keeps of the body only the model id and the stream flag", () => {
		const log = new RequestLog("req_10", "completions");
		log.asked({ model: "x".repeat(1000), stream: "yes", prompt: "private words" });
		expect(log.requestedModel).toHaveLength(256);
		expect(log.stream).toBe(false);
		expect(JSON.stringify(log.line(200))).not.toContain("private words");
		log.asked("not an object");
		expect(log.requestedModel).toHaveLength(256);
	});
});

describe("laneOf", () => {
	it("names the four inference lanes on POST and nothing else", () => {
		expect(laneOf("POST", "/v1/chat/completions")).toBe("chat");
		expect(laneOf("POST", "/v1/completions")).toBe("completions");
		expect(laneOf("POST", "/v1/embeddings")).toBe("embeddings");
		expect(laneOf("POST", "/v1/responses")).toBe("responses");
		expect(laneOf("GET", "/v1/responses")).toBeUndefined();
		expect(laneOf("POST", "/v1/responses/resp_1/cancel")).toBeUndefined();
		expect(laneOf("GET", "/v1/models")).toBeUndefined();
		expect(laneOf("POST", "/admin/keys")).toBeUndefined();
	});
});

describe("logEvent", () => {
	it("writes warnings and errors as JSON lines with their level, message and fields", () => {
		const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
		const error = vi.spyOn(console, "error").mockImplementation(() => {});
		logEvent("warn", "engine node failed", { request_id: "req_1", node: "a.example" });
		logEvent("error", "settlement failed", { request_id: "req_2", attempt: 1 });
		expect(JSON.parse(String(warn.mock.calls[0]?.[0]))).toEqual({
			level: "warn",
			message: "engine node failed",
			request_id: "req_1",
			node: "a.example",
		});
		expect(JSON.parse(String(error.mock.calls[0]?.[0]))).toEqual({
			level: "error",
			message: "settlement failed",
			request_id: "req_2",
			attempt: 1,
		});
	});

	it("keeps of an error its messages, URLs cut to their host, bounded, never the stack", () => {
		const err = new Error("fetch https://u:p@node.example:8000/v1/chat?key=zzz failed", {
			cause: new TypeError("connect ECONNREFUSED http://10.0.0.1/v1?secret=1"),
		});
		const text = errorText(err);
		expect(text).toBe("Error: fetch https://node.example:8000 failed (cause: TypeError: connect ECONNREFUSED http://10.0.0.1)");
		expect(text).not.toContain("at ");
		expect(errorText(new Error("x".repeat(5000)))).toHaveLength(500);
		expect(errorText("plain")).toBe("plain");
		expect(scrubUrls("no url here")).toBe("no url here");
		expect(hostOf("not a url")).toBe("[url]");
	});
});
