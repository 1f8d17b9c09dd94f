/**
 * The one error type of the gateway. Every failure is one of a closed set of kinds; the
 * exhaustive switch in `describe` maps each kind to its HTTP status and OpenAI error
 * fields, so a new kind does not compile until it is mapped.
 */
export type ErrorKind =
	| "invalid_request"
	| "invalid_api_key"
	| "insufficient_balance"
	| "forbidden"
	| "model_not_found"
	| "not_found"
	| "request_too_large"
	| "conflict"
	| "rate_limited"
	| "engine_refused"
	| "upstream_unavailable"
	| "upstream_timeout"
	| "config_invalid"
	| "client_closed"
	| "internal";

export interface OpenAIErrorBody {
	error: { message: string; type: string; param: string | null; code: string | null };
}

interface ErrorOptions {
	param?: string | null;
	/** Status for kinds whose status varies (engine_refused, upstream_unavailable). */
	status?: number;
	/** Overrides the default `code` (engine_refused passes the engine's). */
	code?: string | null;
	type?: string;
	headers?: Record<string, string>;
	/** Extra fields merged into `error` (e.g. available/required for 402). */
	extra?: Record<string, unknown>;
	cause?: unknown;
	/** client_closed only: the client left before any engine was asked, so none read the request. */
	beforeEngine?: boolean;
	/** client_closed only: the index of the model (0, or a fallback) whose engine was last asked, which prices the estimate. */
	target?: number;
}

export class GatewayError extends Error {
	readonly kind: ErrorKind;
	readonly options: ErrorOptions;
	constructor(kind: ErrorKind, message: string, options: ErrorOptions = {}) {
		super(message, { cause: options.cause });
		this.kind = kind;
		this.options = options;
	}
}

interface Described {
	status: number;
	type: string;
	code: string | null;
}

function describe(err: GatewayError): Described {
	const o = err.options;
	switch (err.kind) {
		case "invalid_request":
			return { status: 400, type: "invalid_request_error", code: o.code ?? null };
		case "invalid_api_key":
			return { status: 401, type: "invalid_request_error", code: "invalid_api_key" };
		case "insufficient_balance":
			return { status: 402, type: "insufficient_quota", code: "insufficient_balance" };
		case "forbidden":
			return { status: 403, type: "permission_error", code: o.code ?? "forbidden" };
		case "model_not_found":
			return { status: 404, type: "invalid_request_error", code: "model_not_found" };
		case "not_found":
			return { status: 404, type: "invalid_request_error", code: "not_found" };
		case "request_too_large":
			return { status: 413, type: "invalid_request_error", code: "request_too_large" };
		case "conflict":
			return { status: 409, type: "invalid_request_error", code: o.code ?? "conflict" };
		case "rate_limited":
			// `concurrency_limit_exceeded` for a key's max_concurrent (ledger-client.ts limitError).
			return { status: 429, type: "rate_limit_error", code: o.code ?? "rate_limit_exceeded" };
		case "engine_refused":
			return { status: o.status ?? 400, type: o.type ?? "invalid_request_error", code: o.code ?? null };
		case "upstream_unavailable":
			return { status: o.status ?? 502, type: "server_error", code: "upstream_unavailable" };
		case "upstream_timeout":
			return { status: 504, type: "server_error", code: "upstream_timeout" };
		case "config_invalid":
			return { status: 500, type: "server_error", code: "config_invalid" };
		case "client_closed":
			// nginx's 499: nobody reads it, but logs and usage records stay honest.
			return { status: 499, type: "invalid_request_error", code: "client_closed_request" };
		case "internal":
			return { status: 500, type: "server_error", code: "internal_error" };
	}
}

/** Messages quote what the client sent (an unknown model or key id): quoted at most this long. */
export const MAX_ERROR_MESSAGE_CHARS = 2_000;

function bounded(message: string): string {
	return message.length <= MAX_ERROR_MESSAGE_CHARS ? message : `${message.slice(0, MAX_ERROR_MESSAGE_CHARS - 1)}…`;
}

/**
 * A 4xx that the same request can never get past (a wrong or revoked key, an empty balance, a bad
 * request, a model not found) says so with `x-should-retry: false`: the official SDKs, Claude Code
 * and Qwen Code (openai-node) read it before their own status rules and stop at once, instead of
 * retrying a 401 or 409 with backoff. A timeout (408) and a rate limit (429) may pass later, and
 * 499 never reaches a client. A kind's own headers win (a 429 that can never fit sets it itself).
 */
function errorHeaders(status: number, own: Record<string, string> | undefined): Record<string, string> {
	const final = status >= 400 && status < 500 && status !== 408 && status !== 429 && status !== 499;
	return final ? { "x-should-retry": "false", ...own } : { ...own };
}

/** The OpenAI-shaped body and status for any thrown value. 5xx messages stay generic unless the kind says otherwise. */
export function toErrorResponse(err: unknown): { status: number; body: OpenAIErrorBody; headers: Record<string, string> } {
	const ge = err instanceof GatewayError ? err : new GatewayError("internal", "Internal error", { cause: err });
	const d = describe(ge);
	return {
		status: d.status,
		headers: errorHeaders(d.status, ge.options.headers),
		body: {
			error: {
				message: bounded(ge.message),
				type: d.type,
				param: ge.options.param ?? null,
				code: d.code,
				...ge.options.extra,
			},
		},
	};
}

/** An in-band SSE error frame for failures after the first byte of a stream. */
export function toErrorFrame(err: unknown): string {
	return `data: ${JSON.stringify(toErrorResponse(err).body)}\n\n`;
}

/** Anthropic's error types (the Messages lane speaks them; the kinds are the same). */
export type AnthropicErrorType =
	| "invalid_request_error"
	| "authentication_error"
	| "billing_error"
	| "permission_error"
	| "not_found_error"
	| "request_too_large"
	| "rate_limit_error"
	| "api_error"
	| "timeout_error"
	| "overloaded_error";

export interface AnthropicErrorBody {
	type: "error";
	error: { type: AnthropicErrorType; message: string };
	request_id: string | null;
}

/** Anthropic's error type for an HTTP status (an engine's refusal, a batch line's failure). */
export function refusalType(status: number): AnthropicErrorType {
	if (status === 401) return "authentication_error";
	if (status === 403) return "permission_error";
	if (status === 404) return "not_found_error";
	if (status === 413) return "request_too_large";
	if (status === 429) return "rate_limit_error";
	return status >= 500 ? "api_error" : "invalid_request_error";
}

/**
 * The same kinds in Anthropic's shape, for the Messages lane: one exhaustive switch beside the
 * OpenAI one. Statuses are the OpenAI mapping's, but for every node being busy (503 there): that
 * is Anthropic's 529 `overloaded_error`, which its clients back off and retry on.
 */
function describeAnthropic(err: GatewayError): { status: number; type: AnthropicErrorType } {
	const status = describe(err).status;
	switch (err.kind) {
		case "invalid_request":
		case "conflict":
		case "client_closed":
			return { status, type: "invalid_request_error" };
		case "invalid_api_key":
			return { status, type: "authentication_error" };
		case "insufficient_balance":
			return { status, type: "billing_error" };
		case "forbidden":
			return { status, type: "permission_error" };
		case "model_not_found":
		case "not_found":
			return { status, type: "not_found_error" };
		case "request_too_large":
			return { status, type: "request_too_large" };
		case "rate_limited":
			return { status, type: "rate_limit_error" };
		case "engine_refused":
			return { status, type: refusalType(status) };
		case "upstream_unavailable":
			return status === 503 ? { status: 529, type: "overloaded_error" } : { status, type: "api_error" };
		case "upstream_timeout":
			return { status, type: "timeout_error" };
		case "config_invalid":
		case "internal":
			return { status, type: "api_error" };
	}
}

/**
 * The Anthropic-shaped body and status for any thrown value (the Messages lane's HTTP errors and
 * its in-band `error` event). `code` is the OpenAI mapping's, for the request log.
 */
export function toAnthropicErrorResponse(
	err: unknown,
	requestId: string | null,
): { status: number; body: AnthropicErrorBody; headers: Record<string, string>; code: string | null } {
	const ge = err instanceof GatewayError ? err : new GatewayError("internal", "Internal error", { cause: err });
	const { status, type } = describeAnthropic(ge);
	return {
		status,
		headers: errorHeaders(status, ge.options.headers),
		body: { type: "error", error: { type, message: bounded(ge.message) }, request_id: requestId },
		code: describe(ge).code,
	};
}

/** Google's error body (the Gemini lane speaks it; the kinds are the same). */
export interface GoogleErrorBody {
	error: { code: number; message: string; status: string; details?: Record<string, unknown>[] };
}

/** Google's canonical status for an HTTP status (an engine refusal relayed, or a kind's own). */
function googleStatus(status: number): string {
	if (status === 400 || status === 413) return "INVALID_ARGUMENT";
	if (status === 401) return "UNAUTHENTICATED";
	if (status === 402 || status === 429) return "RESOURCE_EXHAUSTED";
	if (status === 403) return "PERMISSION_DENIED";
	if (status === 404) return "NOT_FOUND";
	if (status === 409) return "ABORTED";
	if (status === 499) return "CANCELLED";
	if (status === 502 || status === 503) return "UNAVAILABLE";
	if (status === 504) return "DEADLINE_EXCEEDED";
	return status >= 500 ? "INTERNAL" : "FAILED_PRECONDITION";
}

/**
 * The Google-shaped body and status for any thrown value (the Gemini lane's HTTP errors and its
 * in-band stream error), from the same kinds and statuses as the OpenAI mapping: an empty balance
 * is 402 `RESOURCE_EXHAUSTED` with the gateway's message, a rate limit 429 with Google's
 * `RetryInfo` from the kind's Retry-After. `code` is the OpenAI mapping's, for the request log.
 */
export function toGoogleErrorResponse(err: unknown): {
	status: number;
	body: GoogleErrorBody;
	headers: Record<string, string>;
	code: string | null;
} {
	const ge = err instanceof GatewayError ? err : new GatewayError("internal", "Internal error", { cause: err });
	const d = describe(ge);
	const body: GoogleErrorBody = { error: { code: d.status, message: bounded(ge.message), status: googleStatus(d.status) } };
	const retryAfter = Number(ge.options.headers?.["retry-after"]);
	if (d.status === 429 && Number.isFinite(retryAfter) && retryAfter > 0) {
		body.error.details = [{ "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay: `${retryAfter}s` }];
	}
	return { status: d.status, headers: errorHeaders(d.status, ge.options.headers), body, code: d.code };
}
