/** Hono's own HTTPExceptions become our errors before onError maps them (src/http/hono-errors.ts). */
import { HTTPException } from "hono/http-exception";
import { describe, expect, it } from "vitest";
import { GatewayError, toErrorResponse } from "../../../src/errors";
import { fromHonoException } from "../../../src/http/hono-errors";
import { malformedJson } from "../../../src/http/read-json";

describe("fromHonoException", () => {
	it("turns the json validator's malformed-JSON 400 into our own 400", () => {
		const mapped = fromHonoException(new HTTPException(400, { message: "Malformed JSON in request body" }));
		expect(toErrorResponse(mapped)).toEqual(toErrorResponse(malformedJson()));
		expect(toErrorResponse(mapped).status).toBe(400);
	});

	it("turns the body limit's 413 into request_too_large", () => {
		const { status, body } = toErrorResponse(fromHonoException(new HTTPException(413)));
		expect(status).toBe(413);
		expect(body.error).toMatchObject({ type: "invalid_request_error", code: "request_too_large", param: null });
	});

	it("leaves our own errors, and anything else, as they are", () => {
		const ours = new GatewayError("not_found", "nope");
		expect(fromHonoException(ours)).toBe(ours);
		const other = new HTTPException(418);
		expect(fromHonoException(other)).toBe(other);
		expect(toErrorResponse(fromHonoException(other)).status).toBe(500);
	});
});
