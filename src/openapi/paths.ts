/**
 * Every route the app serves, as OpenAPI operations, written with full paths: the public ones
 * here, the admin API and the console in admin-paths.ts. Request bodies come from zod
 * (request-schemas.ts); the input_items query is read by the handler, not zod, and is
 * described by hand here.
 */
import { adminPaths } from "./admin-paths";
import { batchPaths } from "./batch-paths";
import { headerRef, INFERENCE, meteredHeaders } from "./error-responses";
import { geminiPaths } from "./gemini-schemas";
import { messageBatchPaths } from "./message-batch-paths";
import { type Operation, operation, pathParam, query } from "./operation";

type Json = Record<string, unknown>;

// Hand-described: routes/responses.ts reads these itself.
const INPUT_ITEM_PARAMS = [
	query("order", "Item order (default `desc`).", { type: "string", enum: ["asc", "desc"] }),
	query("limit", "Page size (default 20).", { type: "integer", minimum: 1, maximum: 100 }),
	query("after", "An item id: the page starts after it."),
];

const RESPONSE_ID = pathParam("id", "A response id (`resp_…`) of the calling key.");

const STREAMED = "The answer; with `stream: true`, server-sent events";
const CHAT_HEADERS = meteredHeaders({ "x-venym-web-search": headerRef("WebSearch") });

export function paths(): Record<string, Record<string, Json>> {
	const p: Record<string, Record<string, Operation>> = {
		"/": {
			get: { tag: "Meta", summary: "Service name", security: "none", json: "ServiceInfo", successDescription: "The service." },
		},
		"/healthz": {
			get: { tag: "Meta", summary: "Liveness", security: "none", json: "Health", successDescription: "The worker runs." },
		},
		"/openapi.json": {
			get: {
				tag: "Meta",
				summary: "This document",
				security: "none",
				media: ["application/json", { type: "object", additionalProperties: true }],
				successDescription: "The OpenAPI 3.1 document (cacheable for 5 minutes).",
			},
		},
		"/v1/chat/completions": {
			post: {
				tag: "Chat",
				summary: "Create a chat completion",
				description:
					"OpenAI's Chat Completions, with Venym's extensions: the `venym` options and the `:online` model suffix (web search: `venym.sources` on the answer, or a leading `venym.sources` frame on a stream), request-level `models`/`fallbacks`, and the cost and balance headers.",
				security: "key",
				body: "ChatCompletionRequest",
				json: "ChatCompletion",
				events: "ChatCompletionStreamEvent",
				successDescription: `${STREAMED} (\`data: <json>\` frames, ending with \`data: [DONE]\`).`,
				headers: CHAT_HEADERS,
				errors: INFERENCE,
			},
		},
		"/v1/completions": {
			post: {
				tag: "Chat",
				summary: "Create a completion (legacy)",
				security: "key",
				body: "CompletionRequest",
				json: "Completion",
				events: "Completion",
				successDescription: `${STREAMED}: \`text_completion\` chunks, one usage chunk (\`choices: []\`), \`data: [DONE]\`.`,
				headers: meteredHeaders(),
				errors: INFERENCE,
			},
		},
		"/v1/embeddings": {
			post: {
				tag: "Embeddings",
				summary: "Create embeddings",
				security: "key",
				body: "EmbeddingsRequest",
				json: "EmbeddingList",
				successDescription: "The embeddings, billed for input tokens.",
				headers: meteredHeaders(),
				errors: INFERENCE,
			},
		},
		"/v1/responses": {
			post: {
				tag: "Responses",
				summary: "Create a response",
				description:
					"OpenAI's Responses API, translated to Chat Completions. `background: true` answers `queued` at once; poll `GET /v1/responses/{id}`.",
				security: "key",
				body: "ResponsesRequest",
				json: "Response",
				events: "ResponseStreamEvent",
				successDescription: `${STREAMED} (\`event:\`/\`data:\` frames).`,
				headers: meteredHeaders({ "x-venym-lane": headerRef("Lane"), "x-venym-web-search": headerRef("WebSearch") }),
				errors: INFERENCE,
			},
		},
		"/v1/responses/{id}": {
			get: {
				tag: "Responses",
				summary: "Get a stored response",
				security: "key",
				parameters: [RESPONSE_ID],
				json: "Response",
				successDescription: "The response.",
				errors: [404],
			},
			delete: {
				tag: "Responses",
				summary: "Delete a stored response",
				security: "key",
				parameters: [RESPONSE_ID],
				json: "ResponseDeleted",
				successDescription: "Deleted.",
				errors: [404],
			},
		},
		"/v1/responses/{id}/input_items": {
			get: {
				tag: "Responses",
				summary: "List a response's input items",
				security: "key",
				parameters: [RESPONSE_ID, ...INPUT_ITEM_PARAMS],
				json: "InputItemList",
				successDescription: "A page of input items.",
				errors: [400, 404],
			},
		},
		"/v1/responses/{id}/cancel": {
			post: {
				tag: "Responses",
				summary: "Cancel a background response",
				security: "key",
				parameters: [RESPONSE_ID],
				json: "Response",
				successDescription:
					"The response, `cancelled` (a queued one releases its hold; a running one is billed like a disconnect).",
				errors: [400, 404],
			},
		},
		"/v1/responses/input_tokens": {
			post: {
				tag: "Responses",
				summary: "Count a response's input tokens",
				description:
					"The input tokens a Responses request would use, `previous_response_id`'s turns and the tools included: the model's node with `tokenize: true` (`POST {root}/apply-template` then `/tokenize`, or the chat form of `/tokenize`) when one answers, else the gateway's estimate; the `x-venym-token-count` header says which. Free and not recorded.",
				security: "key",
				body: "ResponsesRequest",
				json: "ResponseInputTokens",
				successDescription: "The request's input tokens.",
				errors: [400, 403, 404, 413],
			},
		},
		"/v1/messages": {
			post: {
				tag: "Messages",
				summary: "Create a message (Anthropic Messages)",
				description:
					"Anthropic's Messages API over the chat engines, for Claude Code and the Anthropic SDKs: the key in `x-api-key` (or `Authorization: Bearer`), `anthropic-version`/`anthropic-beta` accepted, a query string (`?beta=true`) ignored. Unknown top-level fields are ignored and named in `x-venym-ignored-fields`. Errors are Anthropic-shaped.",
				security: "key",
				body: "MessagesRequest",
				json: "AnthropicMessage",
				events: "AnthropicStreamEvent",
				successDescription: `${STREAMED} (\`event:\`/\`data:\` frames, Anthropic's events).`,
				headers: meteredHeaders({ "x-venym-web-search": headerRef("WebSearch") }),
				anthropicErrors: true,
			},
		},
		"/v1/messages/count_tokens": {
			post: {
				tag: "Messages",
				summary: "Count a message's input tokens",
				description:
					"The model's node with `tokenize: true` (`POST {root}/apply-template` then `/tokenize`, or the chat form of `/tokenize`) when one answers, else the gateway's estimate; the `x-venym-token-count` header says which. Free and not recorded.",
				security: "key",
				body: "CountTokensRequest",
				json: "TokenCount",
				successDescription: "The prompt's input tokens.",
				anthropicErrors: true,
			},
		},
		"/v1/models": {
			get: {
				tag: "Models",
				summary: "List models",
				security: "key",
				json: "ModelList",
				successDescription: "The models the key may use.",
			},
		},
		"/v1/models/{id}": {
			get: {
				tag: "Models",
				summary: "Get a model",
				security: "key",
				parameters: [pathParam("id", "A model id; it may contain `/` (`venym/qwen-27b`) and a `:online` suffix.")],
				json: "Model",
				successDescription: "The model.",
				errors: [404],
			},
		},
		"/v1/key": {
			get: {
				tag: "Keys",
				summary: "The calling key",
				security: "key",
				json: "OwnKey",
				successDescription:
					"Its scopes, `limits`, `parent_key_id`, balance, spent and held; never the secret or the operator's metadata.",
			},
		},
		"/v1/tokens": {
			post: {
				tag: "Keys",
				summary: "Mint a short-lived browser token",
				description: "Server-side keys only. The token draws on the key's balance and cannot widen its scopes (403).",
				security: "key",
				body: "MintTokenRequest",
				status: 201,
				json: "Token",
				successDescription: "The `vk-tmp-…` token.",
				errors: [400, 413],
			},
		},
		...adminPaths(),
	};
	const out: Record<string, Record<string, Json>> = {};
	for (const [path, ops] of Object.entries(p)) {
		out[path] = {};
		for (const [method, op] of Object.entries(ops)) (out[path] as Record<string, Json>)[method] = operation(op);
	}
	return { ...out, ...geminiPaths(), ...batchPaths(), ...messageBatchPaths() };
}
