import { HTTPException } from "hono/http-exception";
import { GatewayError } from "../errors";
import { malformedJson } from "./read-json";

/**
 * Hono's own middleware (validators, body limit) throws HTTPException; onError maps only
 * GatewayError, so these are translated first: the same 400 and 413 our own readers give, and
 * anything else a 500 as before.
 */
export function fromHonoException(err: unknown): unknown {
	if (!(err instanceof HTTPException)) return err;
	if (err.status === 400 && /json/i.test(err.message)) return malformedJson();
	if (err.status === 400) return new GatewayError("invalid_request", "The request body could not be read.");
	if (err.status === 413) return new GatewayError("request_too_large", "The request body is too large.");
	return err;
}
