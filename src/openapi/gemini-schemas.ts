/**
 * The Gemini lane in the OpenAPI document: its paths (model ids keep their `/`, the method
 * follows the last `:`), its request (from zod), its answers and Google's error shape, hand-described
 * (src/gemini/from-chat.ts, stream-encoder.ts; src/errors.ts toGoogleErrorResponse).
 */
import { GEMINI_FIELDS, GenerateContentSchema } from "../gemini/request-schema";
import { headerRef } from "./error-responses";
import { int, type Json, obj, str } from "./json-schema";
import { fromZod } from "./request-schemas";

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

const part = {
	type: "object",
	description:
		"`{text}`, `{text, thought: true}` (reasoning, with `thinkingConfig.includeThoughts`) or `{functionCall: {id, name, args}, thoughtSignature}` (each call whole).",
	additionalProperties: true,
};

const usageMetadata = obj({
	promptTokenCount: int,
	candidatesTokenCount: { ...int, description: "Output tokens less thoughts." },
	cachedContentTokenCount: { ...int, description: "The engine's cached prompt tokens." },
	thoughtsTokenCount: int,
	totalTokenCount: int,
});

const response = obj(
	{
		candidates: {
			type: "array",
			items: obj(
				{
					content: obj({ role: { const: "model" }, parts: { type: "array", items: part } }),
					finishReason: { type: "string", enum: ["STOP", "MAX_TOKENS", "SAFETY"] },
					index: int,
				},
				false,
				["content", "index"],
			),
		},
		usageMetadata,
		modelVersion: { ...str, description: "The id the client sent (an alias stays as sent)." },
		responseId: str,
		venym: { type: "object", description: "Web-search `sources`, when search ran.", additionalProperties: true },
	},
	false,
	["candidates", "modelVersion", "responseId"],
);

const model = obj({
	name: { ...str, description: "`models/{id}`: the id keeps its `/`." },
	baseModelId: str,
	version: str,
	displayName: str,
	inputTokenLimit: { type: ["integer", "null"] },
	outputTokenLimit: int,
	supportedGenerationMethods: { type: "array", items: str },
});

const GOOGLE_ERROR = obj({
	error: obj(
		{
			code: { ...int, description: "The HTTP status." },
			message: { ...str, description: "The gateway's words; Gemini CLI prints them." },
			status: {
				type: "string",
				enum: [
					"INVALID_ARGUMENT",
					"UNAUTHENTICATED",
					"RESOURCE_EXHAUSTED",
					"PERMISSION_DENIED",
					"NOT_FOUND",
					"ABORTED",
					"CANCELLED",
					"UNAVAILABLE",
					"DEADLINE_EXCEEDED",
					"INTERNAL",
					"FAILED_PRECONDITION",
				],
			},
			details: {
				type: "array",
				items: { type: "object", additionalProperties: true },
				description: "429: Google's `RetryInfo`.",
			},
		},
		false,
		["code", "message", "status"],
	),
});

/**
 * The request from the lane's allowlist: the translated fields, Google's dropped ones, and no other
 * (a model's `pass_through_fields` adds its own).
 */
function request(): Json {
	const schema = fromZod(GenerateContentSchema);
	const props = { ...(schema.properties as Record<string, Json>) };
	for (const [name, use] of Object.entries(GEMINI_FIELDS)) {
		if (use === "dropped") props[name] = { description: "Google's; accepted and dropped: the engines cannot act on it." };
	}
	return {
		...schema,
		properties: props,
		additionalProperties: false,
		description:
			"Any other top-level field is refused with 400 `INVALID_ARGUMENT` naming it, unless the model's config lets that engine field through (`pass_through_fields`): then it is sent to the engine as sent.",
	};
}

export function geminiSchemas(): Record<string, Json> {
	return {
		GenerateContentRequest: request(),
		GenerateContentResponse: response,
		GeminiModel: model,
		GeminiModelList: obj({ models: { type: "array", items: ref("GeminiModel") } }),
		GeminiTokenCount: obj({ totalTokens: int }),
		GoogleError: GOOGLE_ERROR,
	};
}

const GOOGLE_STATUSES: Record<string, string> = {
	400: "`INVALID_ARGUMENT`: a missing or invalid field (the message names it), an engine's own field, a prompt over the context.",
	401: "`UNAUTHENTICATED`: missing, unknown, revoked or expired key (`x-goog-api-key`, `?key=`, `x-api-key` or `Authorization: Bearer`).",
	402: "`RESOURCE_EXHAUSTED`: the key's balance minus its open holds does not cover this request.",
	403: "`PERMISSION_DENIED`: the key may not use this model or origin, or its spend limit is reached.",
	404: "`NOT_FOUND`: unknown model id (no served model nor alias), or unknown method.",
	413: "`INVALID_ARGUMENT`: the body is over `max_body_bytes`.",
	429: "`RESOURCE_EXHAUSTED`: the key's rpm/tpm, with `RetryInfo` and `Retry-After`.",
	"4XX": "The engine refused the request: its status and (scrubbed) message.",
	500: "`INTERNAL`: an internal error or an invalid configuration.",
	502: "`UNAVAILABLE`: no engine node could serve the request.",
	503: "`UNAVAILABLE`: every node was busy (429/503) or drained. `Retry-After` says when to retry.",
	504: "`DEADLINE_EXCEEDED`: no node answered in time.",
};

/** `components.responses` for the Gemini lane: Google's error object per status. */
export function googleErrorResponses(): Record<string, Json> {
	const out: Record<string, Json> = {};
	for (const [status, description] of Object.entries(GOOGLE_STATUSES)) {
		const headers: Json = { "x-request-id": headerRef("RequestId") };
		if (status === "429" || status === "503") headers["Retry-After"] = headerRef("RetryAfter");
		out[`GoogleError${status}`] = { description, headers, content: { "application/json": { schema: ref("GoogleError") } } };
	}
	return out;
}

/** Each Google error status as a reference, for an operation's `responses`. */
export function googleErrorRefs(statuses: string[] = Object.keys(GOOGLE_STATUSES)): Record<string, Json> {
	return Object.fromEntries(statuses.map((s) => [s, { $ref: `#/components/responses/GoogleError${s}` }]));
}

const MODEL_PARAM = {
	name: "model",
	in: "path",
	required: true,
	description: "A catalog model id or a configured alias; its `/` stays unencoded (`venym/dev-echo`).",
	schema: { type: "string" },
};
const KEY_QUERY = {
	name: "key",
	in: "query",
	required: false,
	description: "The API key, as Google's clients send it.",
	schema: str,
};
const GEMINI_SECURITY = [{ apiKey: [] }, { googApiKey: [] }];

function post(summary: string, description: string, success: Json, extra: Json[] = []): Json {
	return {
		tags: ["Gemini"],
		summary,
		description,
		security: GEMINI_SECURITY,
		parameters: [MODEL_PARAM, KEY_QUERY, ...extra],
		requestBody: { required: true, content: { "application/json": { schema: ref("GenerateContentRequest") } } },
		responses: { 200: success, ...googleErrorRefs() },
	};
}

const json = (schema: string, description: string) => ({
	description,
	headers: { "x-request-id": headerRef("RequestId") },
	content: { "application/json": { schema: ref(schema) } },
});

/** The Gemini API's paths (routes/gemini.ts). */
export function geminiPaths(): Record<string, Record<string, Json>> {
	const list = (summary: string, schema: string, errors: string[], params: Json[]) => ({
		tags: ["Gemini"],
		summary,
		security: GEMINI_SECURITY,
		parameters: params,
		responses: { 200: json(schema, summary), ...googleErrorRefs(errors) },
	});
	return {
		"/v1beta/models": { get: list("List models (Gemini's Model)", "GeminiModelList", ["401", "403", "429", "500"], [KEY_QUERY]) },
		"/v1beta/models/{model}": {
			get: list("Get a model (Gemini's Model)", "GeminiModel", ["401", "403", "404", "429", "500"], [MODEL_PARAM, KEY_QUERY]),
		},
		"/v1beta/models/{model}:generateContent": {
			post: post(
				"Generate content (Gemini API)",
				"Google's Gemini API over the chat engines, for Gemini CLI and Google's SDKs: the same keys, holds, settlement and usage records (`lane: gemini`). Any other top-level field than the request's is refused with 400 naming it, unless the model's `pass_through_fields` lists it. Errors are Google-shaped.",
				json("GenerateContentResponse", "The answer."),
			),
		},
		"/v1beta/models/{model}:streamGenerateContent": {
			post: post(
				"Stream generated content (Gemini API)",
				"As `:generateContent`, streamed as `data: {GenerateContentResponse}` frames with no `[DONE]`: text as it comes, each function call whole, `finishReason` and `usageMetadata` on the last frame; a failure after the first byte is a `data: {error}` frame.",
				{
					description: "Server-sent events.",
					headers: { "x-request-id": headerRef("RequestId") },
					content: { "text/event-stream": { schema: ref("GenerateContentResponse") } },
				},
				[{ name: "alt", in: "query", required: false, description: "`sse` (what the clients send).", schema: str }],
			),
		},
		"/v1beta/models/{model}:countTokens": {
			post: post(
				"Count tokens (Gemini API)",
				"`{contents, …}` or `{generateContentRequest}`: the model's tokenizing node when one answers, else the estimate (`x-venym-token-count`). Free and not recorded.",
				json("GeminiTokenCount", "The prompt's tokens."),
			),
		},
	};
}
