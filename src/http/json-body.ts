/**
 * `jsonBody(schema)`: the request body of the admin and token routes, limited in size
 * (hono/body-limit), read as JSON and validated with @hono/zod-validator, every failure one of
 * our own errors. The chat and Responses hot paths keep readJsonBody (read-json.ts), which reads
 * and limits in one pass.
 */
import { zValidator } from "@hono/zod-validator";
import type { MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { every } from "hono/combine";
import type { z } from "zod";
import { parseJsonText, tooLarge } from "./read-json";
import { zodToGatewayError } from "./zod-error";

/** Admin and token bodies are small JSON objects. */
export const SMALL_BODY_BYTES = 64 * 1024;

/** The media types Hono's json validator reads (hono/validator). */
const JSON_MEDIA_TYPE = /^application\/([\w.-]+\+)?json$/i;

/**
 * The API reads a body as JSON whatever its Content-Type (`curl -d` sends
 * `application/x-www-form-urlencoded`), but Hono's json validator reads only JSON media types
 * and sees `{}` otherwise, which would turn a PATCH into a silent no-op. So the text is parsed
 * here first, with our own 400s (empty, malformed, nested too deep), and a request without a JSON
 * media type is handed on as JSON. The validator reads the same text back from Hono's body cache.
 */
const readAsJson: MiddlewareHandler = async (c, next) => {
	const text = await c.req.text();
	parseJsonText(text);
	const mediaType = (c.req.header("content-type") ?? "").split(";")[0]?.trim() ?? "";
	if (!JSON_MEDIA_TYPE.test(mediaType)) {
		const headers = new Headers(c.req.raw.headers);
		headers.set("content-type", "application/json");
		c.req.raw = new Request(c.req.raw, { headers, body: text });
	}
	await next();
};

/**
 * Limits, reads and validates a JSON body; the handler gets the parsed value from
 * `c.req.valid("json")`. A failure is the 400 zodToGatewayError makes (its first issue, the
 * param named as OpenAI does); `reportInput` lets it tell a missing field from a wrong one.
 */
export function jsonBody<T extends z.ZodType>(schema: T, maxBytes: number = SMALL_BODY_BYTES) {
	const validate = zValidator(
		"json",
		schema,
		(result) => {
			if (!result.success) throw zodToGatewayError(result.error);
		},
		// The cast: the validator's result type is conditional on the schema's zod version, which a generic T leaves open.
		{ validationFunction: (s, value) => s.safeParseAsync(value, { reportInput: true }) as never },
	);
	const limit = bodyLimit({
		maxSize: maxBytes,
		onError: () => {
			throw tooLarge(maxBytes);
		},
	});
	// One middleware, typed as the validator so the handler sees the schema's output.
	return every(limit, readAsJson, validate) as typeof validate;
}
