/**
 * The one path from a lane's request body to its typed request: a JSON object, no engine-only
 * field (engine-fields.ts; refused before the schema, so it gets its own 400 rather than a strict
 * schema's "unrecognized"), then the lane's schema, parsed with `reportInput` so a missing field
 * is told from one of the wrong type. Any failure is our 400 naming the param (zod-error.ts).
 */
import type { z } from "zod";
import { GatewayError } from "../errors";
import { refuseEngineFields } from "./engine-fields";
import { zodToGatewayError } from "./zod-error";

export interface ParseBodyOptions {
	/** Engine field names this lane accepts as its own (legacy completions' `echo`, …). */
	ownFields?: ReadonlyArray<string>;
	/** Picks the issues the client is told of (a union's matched branch, say); default: zod's. */
	issues?: (issues: z.core.$ZodIssue[]) => z.core.$ZodIssue[];
}

export function parseBody<S extends z.ZodType>(schema: S, body: unknown, options: ParseBodyOptions = {}): z.output<S> {
	if (body === null || typeof body !== "object" || Array.isArray(body)) {
		throw new GatewayError("invalid_request", "The request body must be a JSON object.", { param: null });
	}
	refuseEngineFields(body, options.ownFields);
	const result = schema.safeParse(body, { reportInput: true });
	if (result.success) return result.data;
	throw zodToGatewayError(options.issues ? { issues: options.issues(result.error.issues) } : result.error);
}
