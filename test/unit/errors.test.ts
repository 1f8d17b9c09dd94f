import { describe, expect, it } from "vitest";
import {
	type ErrorKind,
	GatewayError,
	MAX_ERROR_MESSAGE_CHARS,
	toAnthropicErrorResponse,
	toErrorFrame,
	toErrorResponse,
} from "../../src/errors";

describe("toErrorResponse", () => {
	it.each<[ErrorKind, number, string]>([
		["invalid_request", 400, "invalid_request_error"],
		["invalid_api_key", 401, "invalid_request_error"],
		["insufficient_balance", 402, "insufficient_quota"],
		["forbidden", 403, "permission_error"],
		["model_not_found", 404, "invalid_request_error"],
		["not_found", 404, "invalid_request_error"],
		["request_too_large", 413, "invalid_request_error"],
		["conflict", 409, "invalid_request_error"],
		["rate_limited", 429, "rate_limit_error"],
		["upstream_unavailable", 502, "server_error"],
		["config_invalid", 500, "server_error"],
		["internal", 500, "server_error"],
	])("maps %s to status %i", (kind, status, type) => {
		const res = toErrorResponse(new GatewayError(kind, "something happened"));
		expect(res.status).toBe(status);
		expect(res.body.error.type).toBe(type);
		expect(res.body.error.message).toBe("something happened");
	});

	it.each<[ErrorKind, string | null]>([
		["invalid_api_key", "invalid_api_key"],
		["insufficient_balance", "insufficient_balance"],
		["forbidden", "forbidden"],
		["model_not_found", "model_not_found"],
		["not_found", "not_found"],
		["request_too_large", "request_too_large"],
		["conflict", "conflict"],
		["rate_limited", "rate_limit_exceeded"],
		["upstream_unavailable", "upstream_unavailable"],
		["config_invalid", "config_invalid"],
	])("gives %s the code %s", (kind, code) => {
		expect(toErrorResponse(new GatewayError(kind, "x")).body.error.code).toBe(code);
	});

	it("lets a conflict carry its own code", () => {
		const { status, body } = toErrorResponse(new GatewayError("conflict", "reused", { code: "idempotency_key_reused" }));
		expect(status).toBe(409);
		expect(body.error.code).toBe("idempotency_key_reused");
	});

	it("always has exactly message, type, param and code (param null unless given)", () => {
		const { body } = toErrorResponse(new GatewayError("invalid_request", "bad"));
		expect(body).toEqual({ error: { message: "bad", type: "invalid_request_error", param: null, code: null } });
		const withParam = toErrorResponse(new GatewayError("invalid_request", "bad", { param: "messages[0].role" }));
		expect(withParam.body.error.param).toBe("messages[0].role");
	});

	it("passes an engine refusal's status, code, type and param through", () => {
		const { status, body } = toErrorResponse(
			new GatewayError("engine_refused", "context too long", {
				status: 422,
				code: "context_length_exceeded",
				type: "invalid_request_error",
				param: "messages",
			}),
		);
		expect(status).toBe(422);
		expect(body.error).toEqual({
			message: "context too long",
			type: "invalid_request_error",
			param: "messages",
			code: "context_length_exceeded",
		});
	});

	it("defaults an engine refusal without a status to 400", () => {
		expect(toErrorResponse(new GatewayError("engine_refused", "no")).status).toBe(400);
	});

	it("uses 503 for upstream_unavailable when told, keeping the code", () => {
		const { status, body, headers } = toErrorResponse(
			new GatewayError("upstream_unavailable", "busy", { status: 503, headers: { "retry-after": "1" } }),
		);
		expect(status).toBe(503);
		expect(body.error.code).toBe("upstream_unavailable");
		expect(headers).toEqual({ "retry-after": "1" });
	});

	it("carries rate-limit headers and 402 details", () => {
		const rl = toErrorResponse(new GatewayError("rate_limited", "slow down", { headers: { "retry-after": "7" } }));
		expect(rl.headers["retry-after"]).toBe("7");
		const nb = toErrorResponse(
			new GatewayError("insufficient_balance", "no money", { extra: { available: 0.001, required: 0.01 } }),
		);
		expect(nb.body.error).toMatchObject({ code: "insufficient_balance", available: 0.001, required: 0.01 });
	});

	it("turns anything that is not a GatewayError into a generic 500 that leaks nothing", () => {
		for (const thrown of [new Error("secret db password in stack"), "a string", undefined, { weird: true }]) {
			const { status, body } = toErrorResponse(thrown);
			expect(status).toBe(500);
			expect(body.error.type).toBe("server_error");
			expect(body.error.code).toBe("internal_error");
			expect(JSON.stringify(body)).not.toContain("secret db password");
		}
	});
});

describe("x-should-retry", () => {
	const final: ErrorKind[] = ["invalid_request", "invalid_api_key", "insufficient_balance", "forbidden", "model_not_found"];
	it.each(final)("tells the client not to retry %s, in both shapes", (kind) => {
		expect(toErrorResponse(new GatewayError(kind, "x")).headers["x-should-retry"]).toBe("false");
		expect(toAnthropicErrorResponse(new GatewayError(kind, "x"), "req_1").headers["x-should-retry"]).toBe("false");
	});

	it("does the same for an engine's refusal that no retry fixes, not for its 408 or 429", () => {
		const refused = (status: number) => toErrorResponse(new GatewayError("engine_refused", "no", { status })).headers;
		expect(refused(422)["x-should-retry"]).toBe("false");
		expect(refused(408)["x-should-retry"]).toBeUndefined();
		expect(refused(429)["x-should-retry"]).toBeUndefined();
	});

	it.each<ErrorKind>(["rate_limited", "upstream_unavailable", "upstream_timeout", "internal"])(
		"leaves %s to the client's own retry rules",
		(kind) => {
			expect(toErrorResponse(new GatewayError(kind, "x")).headers["x-should-retry"]).toBeUndefined();
			expect(toAnthropicErrorResponse(new GatewayError(kind, "x"), null).headers["x-should-retry"]).toBeUndefined();
		},
	);

	it("lets a kind's own headers win", () => {
		const own = toErrorResponse(new GatewayError("rate_limited", "never fits", { headers: { "x-should-retry": "false" } }));
		expect(own.headers["x-should-retry"]).toBe("false");
	});
});

describe("toErrorFrame", () => {
	it("is one SSE data frame carrying the OpenAI error body", () => {
		const frame = toErrorFrame(new GatewayError("upstream_unavailable", "gone"));
		expect(frame.startsWith("data: ")).toBe(true);
		expect(frame.endsWith("\n\n")).toBe(true);
		expect(frame.slice(0, -2)).not.toContain("\n");
		expect(JSON.parse(frame.slice("data: ".length))).toEqual({
			error: { message: "gone", type: "server_error", param: null, code: "upstream_unavailable" },
		});
	});
});

describe("error messages quoting client input", () => {
	it("are bounded, however long the echoed id", () => {
		const id = "m".repeat(3_000_000);
		const { body, status } = toErrorResponse(
			new GatewayError("model_not_found", `The model '${id}' does not exist or you do not have access to it.`, {
				param: "model",
			}),
		);
		expect(status).toBe(404);
		expect(body.error.message.length).toBe(MAX_ERROR_MESSAGE_CHARS);
		expect(body.error.message.startsWith("The model 'mmm")).toBe(true);
		expect(body.error.message.endsWith("…")).toBe(true);
		expect(body.error.param).toBe("model");
	});
});
