/**
 * The one translation of a zod validation failure into the OpenAI-shaped 400 the gateway
 * answers: the first issue, its path written as OpenAI names params (`messages[0].role`).
 * Schemas must be parsed with `reportInput: true`, so a missing field can be told from one of
 * the wrong type.
 */
import type { z } from "zod";
import { GatewayError } from "../errors";

/** `messages.0.role` → `messages[0].role`, as OpenAI names params. */
export function formatParam(path: ReadonlyArray<PropertyKey>): string {
	let out = "";
	for (const seg of path) {
		if (typeof seg === "number") out += `[${seg}]`;
		else out += out ? `.${String(seg)}` : String(seg);
	}
	return out;
}

export function zodToGatewayError(
	error: { readonly issues: readonly z.core.$ZodIssue[] },
	prefix: ReadonlyArray<PropertyKey> = [],
): GatewayError {
	const issue = error.issues[0] as z.core.$ZodIssue;
	const param = formatParam([...prefix, ...issue.path]);
	let message: string;
	if (issue.code === "invalid_type" && issue.input === undefined) message = `Missing required parameter: '${param}'.`;
	else if (issue.code === "too_small" && issue.origin === "array")
		message = `Invalid '${param}': empty array. Expected an array with minimum length ${issue.minimum}.`;
	else if (issue.code === "unrecognized_keys") {
		const key = issue.keys[0] as string;
		return new GatewayError("invalid_request", `Unrecognized request argument supplied: ${param ? `${param}.` : ""}${key}`, {
			param: formatParam([...prefix, ...issue.path, key]),
		});
	} else message = `Invalid value for '${param}': ${issue.message}`;
	return new GatewayError("invalid_request", message, { param: param || null });
}
