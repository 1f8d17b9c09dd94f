/**
 * The one path from a lane's request body to its typed request: a JSON object, then the lane's
 * schema, parsed with `reportInput` so a missing field is told from one of the wrong type. Any
 * failure is our 400 naming the param (zod-error.ts). Which top-level fields a lane accepts is
 * its allowlist's to say (engine-fields.ts), checked by the lane.
 */
import type { z } from "zod";
import { GatewayError } from "../errors";
import { zodToGatewayError } from "./zod-error";

export interface ParseBodyOptions {
	/** Picks the issues the client is told of (a union's matched branch, say); default: zod's. */
	issues?: (issues: z.core.$ZodIssue[]) => z.core.$ZodIssue[];
}

/** Throws unless `body` is a JSON object (not null, not an array). */
export function assertObject(body: unknown): asserts body is Record<string, unknown> {
	if (body === null || typeof body !== "object" || Array.isArray(body)) {
		throw new GatewayError("invalid_request", "The request body must be a JSON object.", { param: null });
	}
}

export function parseBody<S extends z.ZodType>(schema: S, body: unknown, options: ParseBodyOptions = {}): z.output<S> {
	assertObject(body);
	const result = schema.safeParse(body, { reportInput: true });
	if (result.success) return result.data;
	throw zodToGatewayError(options.issues ? { issues: options.issues(result.error.issues) } : result.error);
}
