import { describe, expect, it } from "vitest";
import { classifyStatus, parseEngineError } from "../../../src/engine/classify";

describe("classifyStatus", () => {
	it.each([200, 201, 204, 299])("uses a %i answer", (s) => {
		expect(classifyStatus(s)).toBe("ok");
	});

	it.each([401, 403, 429, 503])("tries the next node after %i (the node's trouble, not the request's)", (s) => {
		expect(classifyStatus(s)).toBe("next");
	});

	it.each([500, 502, 504, 599])("tries the next node after %i without blaming the node yet (maybe the request's)", (s) => {
		expect(classifyStatus(s)).toBe("server_error");
	});

	it.each([301, 302, 307, 308])("never follows a %i redirect: tries the next node", (s) => {
		expect(classifyStatus(s)).toBe("next");
	});

	it.each([400, 404, 409, 413, 422])("returns a %i refusal to the client", (s) => {
		expect(classifyStatus(s)).toBe("refuse");
	});
});

describe("parseEngineError", () => {
	it("reads OpenAI's nested shape", () => {
		const text = JSON.stringify({
			error: {
				message: "This model's maximum context length is 4096 tokens",
				type: "BadRequestError",
				param: "messages",
				code: 400,
			},
		});
		expect(parseEngineError(text)).toEqual({
			message: "This model's maximum context length is 4096 tokens",
			type: "BadRequestError",
			param: "messages",
			code: "400",
		});
	});

	it("reads vLLM's flat shape", () => {
		const text = JSON.stringify({
			object: "error",
			message: "flat: bad temperature",
			type: "BadRequestError",
			param: "temperature",
			code: 400,
		});
		expect(parseEngineError(text)).toEqual({
			message: "flat: bad temperature",
			type: "BadRequestError",
			param: "temperature",
			code: "400",
		});
	});

	it("reads an error given as a plain string", () => {
		expect(parseEngineError(JSON.stringify({ error: "model not loaded" })).message).toBe("model not loaded");
	});

	it("reads FastAPI's detail, as a string and as a list", () => {
		expect(parseEngineError(JSON.stringify({ detail: "Not Found" })).message).toBe("Not Found");
		const list = parseEngineError(JSON.stringify({ detail: [{ loc: ["body", "messages"], msg: "field required" }] }));
		expect(list.message).toContain("field required");
	});

	it("uses a plain-text body as the message", () => {
		expect(parseEngineError("  Bad Request: prompt too long \n")).toEqual({
			message: "Bad Request: prompt too long",
			type: null,
			param: null,
			code: null,
		});
	});

	it("keeps a huge plain-text body short", () => {
		expect(parseEngineError("x".repeat(10_000)).message.length).toBeLessThanOrEqual(500);
	});

	it("falls back to a generic message for an empty or unrecognised body", () => {
		expect(parseEngineError("").message).toBe("The engine rejected the request");
		expect(parseEngineError("{}").message).toBe("The engine rejected the request");
		expect(parseEngineError("null", "custom fallback").message).toBe("custom fallback");
		expect(parseEngineError(JSON.stringify({ error: {} })).message).toBe("The engine rejected the request");
	});

	it("leaves missing fields null", () => {
		expect(parseEngineError(JSON.stringify({ error: { message: "nope" } }))).toEqual({
			message: "nope",
			type: null,
			param: null,
			code: null,
		});
	});
});
