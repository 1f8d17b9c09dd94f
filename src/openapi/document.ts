/**
 * The OpenAPI 3.1 document of the gateway, served at `GET /openapi.json`. Built on first use
 * and kept for the isolate's life: it depends on code only, never on config or request.
 */

import { batchSchemas } from "./batch-paths";
import { ANTHROPIC_ERROR_SCHEMA, ERROR_SCHEMA, errorResponseComponents, headerComponents } from "./error-responses";
import { geminiSchemas, googleErrorResponses } from "./gemini-schemas";
import { messageBatchSchemas } from "./message-batch-paths";
import { messagesSchemas } from "./messages-schemas";
import { outputSchemas } from "./output-schemas";
import { paths } from "./paths";
import { requestSchemas } from "./request-schemas";

const DESCRIPTION = `An OpenAI-compatible inference gateway: prepaid keys, engine fleets with failover, usage records.

Venym extensions to the OpenAI API:
- \`venym\` request object (chat and Responses): \`{"web_search": true, "search_results": 1-10}\`; or a \`:online\` model suffix. The answer carries \`venym.sources\` (a stream: a first \`venym.sources\` frame) and the \`x-venym-web-search\` header.
- Request-level fallbacks (chat, completions, embeddings, Responses): \`models\` (ids) or \`fallbacks\` (\`[{model}]\`), up to 8.
- Non-stream answers carry \`x-venym-cost-usd\` and \`x-venym-balance-usd\`; every answer \`x-request-id\`.
- Errors are always \`{"error": {message, type, param, code}}\`; after a stream has started, an error is an in-band frame of that shape.`;

/** The document as an object (tests read it). */
export function buildDocument(): Record<string, unknown> {
	return {
		openapi: "3.1.1",
		info: { title: "Venym gateway", version: "0.1.0", description: DESCRIPTION },
		jsonSchemaDialect: "https://json-schema.org/draft/2020-12/schema",
		tags: [
			{ name: "Chat", description: "Chat Completions and legacy completions." },
			{ name: "Embeddings" },
			{ name: "Responses", description: "The Responses API, stored per key for 30 days." },
			{ name: "Messages", description: "Anthropic Messages (Claude Code, the Anthropic SDKs) over the same engines and keys." },
			{ name: "Gemini", description: "Google's Gemini API (Gemini CLI, Google's SDKs) over the same engines and keys." },
			{ name: "Batches", description: "OpenAI's Files and Batch APIs: lines run in idle capacity at the batch price." },
			{ name: "Models" },
			{ name: "Keys", description: "The calling key and its browser tokens." },
			{ name: "Admin", description: "Keys, credits, usage and nodes: `Authorization: Bearer $ADMIN_TOKEN`." },
			{ name: "Console", description: "The operator console's page and files." },
			{ name: "Meta" },
		],
		paths: paths(),
		components: {
			securitySchemes: {
				apiKey: {
					type: "http",
					scheme: "bearer",
					bearerFormat: "vk-…",
					description: "An API key (`vk-…`) or a browser token (`vk-tmp-…`).",
				},
				adminToken: { type: "http", scheme: "bearer", description: "The ADMIN_TOKEN secret." },
				googApiKey: {
					type: "apiKey",
					in: "header",
					name: "x-goog-api-key",
					description: "The Gemini lane: an API key as Google's clients send it (or `?key=`).",
				},
			},
			schemas: {
				Error: ERROR_SCHEMA,
				AnthropicError: ANTHROPIC_ERROR_SCHEMA,
				...requestSchemas(),
				...outputSchemas(),
				...messagesSchemas(),
				...geminiSchemas(),
				...batchSchemas(),
				...messageBatchSchemas(),
			},
			responses: { ...errorResponseComponents(), ...googleErrorResponses() },
			headers: headerComponents(),
		},
	};
}

let json: string | undefined;

/** The document's JSON text, built once per isolate. */
export function openApiJson(): string {
	json ??= JSON.stringify(buildDocument());
	return json;
}
