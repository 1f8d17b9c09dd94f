import { toErrorResponse } from "../errors";

/** A failure as a response's `error`: the code and message the HTTP path gives the same cause. */
export function failureOf(err: unknown): { code: string; message: string } {
	const { error } = toErrorResponse(err).body;
	return { code: error.code ?? error.type, message: error.message };
}
