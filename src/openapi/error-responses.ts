/**
 * The error side of the OpenAPI document: the one error object (src/errors.ts maps every
 * GatewayError kind to it) and a reusable response per status, each naming the codes that
 * status carries, plus the response headers the gateway sets.
 */
import type { ErrorKind } from "../errors";

type Json = Record<string, unknown>;

/** `{"error": {message, type, param, code}}`, with the extra fields some kinds add. */
export const ERROR_SCHEMA: Json = {
	type: "object",
	required: ["error"],
	properties: {
		error: {
			type: "object",
			required: ["message", "type", "param", "code"],
			properties: {
				message: { type: "string", description: "What went wrong; 5xx messages stay generic." },
				type: {
					type: "string",
					description: "OpenAI's error type; a relayed engine refusal keeps the engine's.",
					examples: ["invalid_request_error", "insufficient_quota", "permission_error", "rate_limit_error", "server_error"],
				},
				param: {
					type: ["string", "null"],
					description: "The request field at fault, as a path (`messages[0].content`, `tools[0].function.parameters`).",
				},
				code: { type: ["string", "null"], description: "A stable code (see each status)." },
				available_usd: { type: "number", description: "402: the balance available (balance − open holds)." },
				required_usd: { type: "number", description: "402: the most this request may cost (its hold)." },
				spend_limit_usd: { type: "number", description: "403 spend limit: the key's limit." },
				spent_usd: { type: "number", description: "403 spend limit: spent in the current period." },
				period: { type: ["string", "null"], enum: ["daily", "weekly", "monthly", null] },
				resets_at: { type: ["integer", "null"], description: "403 spend limit: when the period ends (unix s)." },
			},
			additionalProperties: true,
		},
	},
};

/** Kept exhaustive so a new error kind does not compile until its status is documented. */
const STATUS_OF_KIND: Record<ErrorKind, number | "4XX" | null> = {
	invalid_request: 400,
	invalid_api_key: 401,
	insufficient_balance: 402,
	forbidden: 403,
	model_not_found: 404,
	not_found: 404,
	request_too_large: 413,
	conflict: 409,
	rate_limited: 429,
	engine_refused: "4XX",
	upstream_unavailable: 502,
	upstream_timeout: 504,
	config_invalid: 500,
	internal: 500,
	// 499 is logged and recorded for a client that went away; nobody is there to read it.
	client_closed: null,
};

export type ErrorStatus = 400 | 401 | 402 | 403 | 404 | 409 | 413 | 429 | 500 | 502 | 503 | 504 | "4XX";

const DESCRIPTIONS: Record<ErrorStatus, string> = {
	400: "Invalid request (`invalid_request_error`): bad JSON, a missing or invalid field (`param` names it), JSON nested deeper than 64 levels (`json_too_deep`), an unsupported parameter (`unsupported_parameter`), a prompt over the context (`context_length_exceeded`), a model of the wrong kind (`unsupported_model`), a balance out of range (`balance_below_zero`, `balance_too_large`).",
	401: "`invalid_api_key`: missing, unknown, revoked or expired key (admin routes: wrong or unset admin token).",
	402: "`insufficient_balance`: the key's balance minus its open holds does not cover this request; `available_usd` and `required_usd` say by how much.",
	403: "`permission_error`: a scoped key used from an origin or for a model it may not use, its spend limit reached (with `spend_limit_usd`, `spent_usd`, `period`, `resets_at`), or a token asked to widen its key's scopes.",
	404: "`model_not_found` (unknown model id) or `not_found` (unknown key, response, item, node).",
	409: "`idempotency_key_reused`: this Idempotency-Key was used for a credit of another amount.",
	413: "`request_too_large`: the body is over the limit (`max_body_bytes` for inference, 64 KiB for admin and token bodies).",
	429: "`rate_limit_exceeded`: the key's rpm/tpm, its queued background responses, or too many failed authentications from this IP; `concurrency_limit_exceeded`: the key's `max_concurrent` requests are in flight; `per_user_rpm_exceeded`, `per_user_daily_usd_exceeded`: the request's end user used its share of the key. `Retry-After` says when to retry.",
	500: "`config_invalid` (the message names the bad GATEWAY_CONFIG field) or `internal_error`.",
	502: "`upstream_unavailable`: no engine node could serve the request, or one sent an invalid or oversized answer.",
	503: "`upstream_unavailable`: every node was busy (429/503) or drained. `Retry-After` says when to retry.",
	504: "`upstream_timeout`: no node answered in time.",
	"4XX":
		"The engine refused the request (a 4xx other than 401/403/429): its status, its message (scrubbed, at most 1,000 characters), its type and code. Never retried on another node.",
};

const WITH_RETRY_AFTER = new Set<ErrorStatus>([429, 503]);

/** The Messages lane's error body (src/errors.ts toAnthropicErrorResponse). */
export const ANTHROPIC_ERROR_SCHEMA: Json = {
	type: "object",
	required: ["type", "error", "request_id"],
	properties: {
		type: { const: "error" },
		error: {
			type: "object",
			required: ["type", "message"],
			properties: {
				type: {
					type: "string",
					enum: [
						"invalid_request_error",
						"authentication_error",
						"billing_error",
						"permission_error",
						"not_found_error",
						"request_too_large",
						"rate_limit_error",
						"api_error",
						"timeout_error",
						"overloaded_error",
					],
				},
				message: { type: "string" },
			},
		},
		request_id: { type: ["string", "null"] },
	},
};

/** The Messages lane's statuses, each with Anthropic's error type. */
const ANTHROPIC_DESCRIPTIONS = {
	400: "`invalid_request_error`: a missing or invalid field (the message names it), a server tool, a prompt over the context.",
	401: "`authentication_error`: missing, unknown, revoked or expired key (`x-api-key` or `Authorization: Bearer`).",
	402: "`billing_error`: the key's balance minus its open holds does not cover this request.",
	403: "`permission_error`: the key may not use this model or origin, or its spend limit is reached.",
	404: "`not_found_error`: unknown model id.",
	413: "`request_too_large`: the body is over `max_body_bytes`.",
	429: "`rate_limit_error`: the key's rpm/tpm, its `max_concurrent`, or the end user's `per_user_rpm`/`per_user_daily_usd` (`metadata.user_id`). `retry-after` says when to retry.",
	"4XX": "The engine refused the request: its status and (scrubbed) message, with the matching Anthropic type.",
	500: "`api_error`: an internal error or an invalid configuration.",
	502: "`api_error`: no engine node could serve the request.",
	504: "`timeout_error`: no node answered in time.",
	529: "`overloaded_error`: every node was busy (429/503) or drained. `retry-after` says when to retry.",
} as const;

export type AnthropicErrorStatus = keyof typeof ANTHROPIC_DESCRIPTIONS;
export const ANTHROPIC_STATUSES = Object.keys(ANTHROPIC_DESCRIPTIONS).map((s) =>
	s === "4XX" ? s : Number(s),
) as AnthropicErrorStatus[];

export function anthropicErrorResponseRef(status: AnthropicErrorStatus): Json {
	return { $ref: `#/components/responses/AnthropicError${status}` };
}

function anthropicErrorResponses(): Record<string, Json> {
	const out: Record<string, Json> = {};
	for (const status of ANTHROPIC_STATUSES) {
		const headers: Json = { "x-request-id": headerRef("RequestId") };
		if (status === 429 || status === 529) headers["Retry-After"] = headerRef("RetryAfter");
		if (isFinal(status)) headers["x-should-retry"] = headerRef("ShouldRetry");
		out[`AnthropicError${status}`] = {
			description: ANTHROPIC_DESCRIPTIONS[status],
			headers,
			content: { "application/json": { schema: { $ref: "#/components/schemas/AnthropicError" } } },
		};
	}
	return out;
}

/** A 4xx no retry can fix carries `x-should-retry: false` (src/errors.ts). */
function isFinal(status: number | "4XX"): boolean {
	return status === "4XX" || (status >= 400 && status < 500 && status !== 408 && status !== 429 && status !== 499);
}

/** The component name of the reusable response for a status (`Error429`). */
export function errorResponseName(status: ErrorStatus): string {
	return `Error${status}`;
}

export function errorResponseRef(status: ErrorStatus): Json {
	return { $ref: `#/components/responses/${errorResponseName(status)}` };
}

/** `components.responses`: one per status, each the error object with the headers that status carries. */
export function errorResponseComponents(): Record<string, Json> {
	const out: Record<string, Json> = {};
	for (const status of Object.keys(DESCRIPTIONS) as Array<`${ErrorStatus}`>) {
		const s = (status === "4XX" ? status : Number(status)) as ErrorStatus;
		const headers: Json = { "x-request-id": headerRef("RequestId") };
		if (WITH_RETRY_AFTER.has(s)) headers["Retry-After"] = headerRef("RetryAfter");
		if (isFinal(s)) headers["x-should-retry"] = headerRef("ShouldRetry");
		out[errorResponseName(s)] = {
			description: DESCRIPTIONS[s],
			headers,
			content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } },
		};
	}
	return { ...out, ...anthropicErrorResponses() };
}

/** Every status an error kind can answer with (the document test checks each is described). */
export function errorKindStatuses(): Array<number | "4XX"> {
	return Object.values(STATUS_OF_KIND).filter((s): s is number | "4XX" => s !== null);
}

export function headerRef(name: keyof ReturnType<typeof headerComponents>): Json {
	return { $ref: `#/components/headers/${name}` };
}

/** `components.headers`: what the gateway sets on its answers. */
export function headerComponents() {
	const text = (description: string) => ({ description, schema: { type: "string" } });
	return {
		RequestId: text("The request's id (`req_…`), on every response; also on its usage record."),
		RetryAfter: { description: "Seconds to wait before retrying.", schema: { type: "integer", minimum: 1 } },
		ShouldRetry: {
			description:
				"`false` on a 4xx the same request can never get past: the official SDKs and the coding agents built on them stop at once.",
			schema: { type: "string", enum: ["false"] },
		},
		CostUsd: text("Non-stream answers: this request's exact cost in USD."),
		BalanceUsd: text(
			"Non-stream answers: the balance this request started from, less its cost, in USD (concurrent requests of the same key are not reflected).",
		),
		WebSearch: {
			description: "When web search was asked for: how it went (`empty`, `failed`, `unconfigured` and `skipped` cost nothing).",
			schema: { type: "string", enum: ["ok", "empty", "failed", "unconfigured", "skipped"] },
		},
		Lane: { description: "Responses: `compat` (translated to Chat Completions).", schema: { type: "string" } },
		RateLimitLimitRequests: text("Keys with `rpm`: the limit."),
		RateLimitRemainingRequests: text("Keys with `rpm`: requests left in the sliding minute."),
		RateLimitResetRequests: text("Keys with `rpm`: when the window frees a request."),
		RateLimitLimitTokens: text("Keys with `tpm`: the limit."),
		RateLimitRemainingTokens: text("Keys with `tpm`: tokens left in the sliding minute."),
		RateLimitResetTokens: text("Keys with `tpm`: when the window frees tokens."),
	};
}

/** The headers of a metered answer (chat, completions, embeddings, Responses). */
export function meteredHeaders(extra: Record<string, Json> = {}): Record<string, Json> {
	return {
		"x-request-id": headerRef("RequestId"),
		"x-venym-cost-usd": headerRef("CostUsd"),
		"x-venym-balance-usd": headerRef("BalanceUsd"),
		"x-ratelimit-limit-requests": headerRef("RateLimitLimitRequests"),
		"x-ratelimit-remaining-requests": headerRef("RateLimitRemainingRequests"),
		"x-ratelimit-reset-requests": headerRef("RateLimitResetRequests"),
		"x-ratelimit-limit-tokens": headerRef("RateLimitLimitTokens"),
		"x-ratelimit-remaining-tokens": headerRef("RateLimitRemainingTokens"),
		"x-ratelimit-reset-tokens": headerRef("RateLimitResetTokens"),
		...extra,
	};
}

/** Status sets: what any route behind a guard can answer, and what the inference routes add. */
export const V1_GUARD: ErrorStatus[] = [401, 403, 429, 500];
export const ADMIN_GUARD: ErrorStatus[] = [401, 429, 500];
export const INFERENCE: ErrorStatus[] = [400, 402, 403, 404, 413, 429, "4XX", 502, 503, 504];
