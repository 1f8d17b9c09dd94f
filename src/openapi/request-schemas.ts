/**
 * Request bodies for the OpenAPI document, generated from the zod schemas the handlers validate
 * with, so the document cannot drift from what is accepted. The only hand-written parts are
 * what no zod schema holds: the request-level fallback lists of chat, completions and
 * embeddings (read by routing/fallback-chain.ts), the shapes of the allowlisted fields no zod
 * schema checks, and descriptions. Which fields each lane accepts is its allowlist
 * (http/engine-fields.ts): every one is a property, any other field is refused.
 */
import { z } from "zod";
import { CreateKey, Credit, PatchKey } from "../api/key-input";
import { PatchNode } from "../api/node-input";
import { MintToken } from "../api/token-input";
import { ChatRequestSchema } from "../chat/validate";
import { CompletionRequestSchema } from "../completions/authorize-completion";
import { EmbeddingsRequestSchema } from "../embeddings/run-embeddings";
import { CHAT_FIELDS, COMPLETION_FIELDS, EMBEDDING_FIELDS, type LaneFields } from "../http/engine-fields";
import { CountTokensSchema, MessagesRequestSchema } from "../messages/request-schema";
import { ResponsesRequestSchema } from "../responses/request-schema";
import { MAX_REQUEST_FALLBACKS } from "../routing/fallback-chain";

type Json = Record<string, unknown>;

/**
 * A zod schema as the JSON Schema of what a client may send: `io: "input"` so defaults are
 * optional and transforms show their input; refinements have no JSON Schema form and are left
 * out (`unrepresentable: "any"`); a recursive schema would need `$defs` the document cannot
 * hold, so it throws instead.
 */
export function fromZod(schema: z.ZodType): Json {
	const { $schema: _dialect, ...json } = z.toJSONSchema(schema, {
		io: "input",
		target: "draft-2020-12",
		unrepresentable: "any",
		cycles: "throw",
		reused: "inline",
	}) as Json;
	return json;
}

/** Adds a description to each listed property the generated schema has (never replacing the schema). */
function describe(schema: Json, descriptions: Record<string, string>): Json {
	const props = schema.properties as Record<string, Json> | undefined;
	for (const [name, description] of Object.entries(descriptions)) {
		const prop = props?.[name];
		if (prop && prop.description === undefined) props[name] = { description, ...prop };
	}
	return schema;
}

/**
 * Properties a generated schema does not have (`add`), or has as `{}` (a `z.unknown()` whose
 * shape is checked by code outside zod); any other generated definition wins. A strict schema
 * takes no `add`: a property its zod schema lacks is refused.
 */
function withExtra(schema: Json, extra: Record<string, Json>, add = true): Json {
	const props = { ...(schema.properties as Record<string, Json>) };
	for (const [name, prop] of Object.entries(extra)) {
		const generated = props[name];
		if (generated === undefined ? add : Object.keys(generated).length === 0) props[name] = prop;
	}
	return { ...schema, properties: props };
}

const MODEL = "A model id from `GET /v1/models`. A `:online` suffix (`venym/qwen-27b:online`) turns web search on.";
const VENYM =
	"Venym options, removed before the engine: `web_search` runs a web search (query: the last user message) and grounds the answer on numbered sources; `search_results` (1–10, default 6) how many.";

const fallbackList = (items: Json, description: string): Json => ({
	type: "array",
	maxItems: MAX_REQUEST_FALLBACKS,
	items,
	description: `${description} Tried in order, before the model's configured fallbacks, when every attempt at the model fails before the first byte. An unknown id is a 400 naming the entry, one outside the key's allowed_models a 403. Send either \`models\` or \`fallbacks\`.`,
});

/**
 * Request-level fallbacks, checked by routing/fallback-chain.ts (not zod) on every lane: chat,
 * legacy completions and embeddings leave them out of their zod schemas, Responses has them as
 * `z.unknown()`.
 */
const FALLBACK_PROPS: Record<string, Json> = {
	models: fallbackList({ type: "string", minLength: 1 }, "Fallback model ids (OpenRouter's convention)."),
	fallbacks: fallbackList(
		{ type: "object", required: ["model"], properties: { model: { type: "string", minLength: 1 } } },
		"Fallback models as `{model}` (Venice's convention).",
	),
};

/**
 * Chat Completions parameters the chat schema does not check: passed to the engine as sent. The
 * sampling parameters are in the zod schema, with their ranges.
 */
const CHAT_PASS_THROUGH: Record<string, Json> = {
	tools: { type: "array", items: { type: "object", additionalProperties: true }, description: "Function tools." },
	tool_choice: { anyOf: [{ type: "string" }, { type: "object", additionalProperties: true }] },
	parallel_tool_calls: { type: "boolean" },
	response_format: { type: "object", additionalProperties: true, description: "`json_object` or `json_schema`." },
	reasoning_effort: { type: "string" },
	user: { type: "string", description: "Also the routing affinity key when there is no `prompt_cache_key`." },
	prompt_cache_key: {
		type: "string",
		description: "Keeps a conversation on one engine node (prefix-cache reuse); passed on to the engine.",
	},
	chat_template_kwargs: {
		type: "object",
		additionalProperties: true,
		description: "Passed to the engine's chat template (`enable_thinking`…); `chat_template` inside it is refused.",
	},
	documents: {
		type: "array",
		items: { type: "object", additionalProperties: true },
		description: "Engine extension (vLLM): documents rendered into the template, counted in the prompt estimate.",
	},
	cache_salt: {
		type: "string",
		description:
			"Engine extension (vLLM, SGLang): the prefix cache's salt; replaced by the paying key's on a node with `cache_salt: true`.",
	},
	top_k: { type: "integer", description: "Engine extension (vLLM, SGLang, llama.cpp)." },
	min_p: { type: "number", description: "Engine extension (vLLM, SGLang, llama.cpp)." },
	repetition_penalty: { type: "number", description: "Engine extension (vLLM, SGLang)." },
};

const DROPPED = "OpenAI's; accepted and dropped: no engine behind this gateway offers it (docs/limits-and-money.md).";
const FORWARDED = "Passed to the engine as sent.";
const OTHERS =
	"Any other top-level field is refused with 400 `unsupported_parameter` naming it, unless the model's config lets that engine field through (`pass_through_fields`).";

/**
 * A lane's request body from its allowlist: each listed field a property (the zod schema's, a
 * described shape, or a note of what the lane does with it), and no other (`additionalProperties: false`).
 */
function allowlisted(schema: Json, lane: LaneFields, shapes: Record<string, Json>): Json {
	const props = { ...(schema.properties as Record<string, Json>) };
	for (const [name, use] of Object.entries(lane)) {
		const generated = props[name];
		if (generated !== undefined && Object.keys(generated).length > 0) continue;
		props[name] = shapes[name] ?? { description: use === "dropped" ? DROPPED : FORWARDED };
	}
	return { ...schema, properties: props, additionalProperties: false };
}

function chatRequest(): Json {
	const schema = allowlisted(fromZod(ChatRequestSchema), CHAT_FIELDS, { ...FALLBACK_PROPS, ...CHAT_PASS_THROUGH });
	return describe(
		{
			...schema,
			description: `Every parameter of OpenAI's Chat Completions is accepted: sent to the engine, or dropped where no engine here offers it. ${OTHERS} \`max_tokens\`/\`max_completion_tokens\` are capped at the model's (and the key's) limit; with \`stream: true\`, \`stream_options\` becomes \`{include_usage: true}\`.`,
		},
		{
			model: MODEL,
			venym: VENYM,
			n: "Choices (at most `max_n`, default 16); every choice is held and billed.",
			stream: "Server-sent events, ending with one usage chunk (`choices: []`) and `data: [DONE]`.",
		},
	);
}

/**
 * The Responses API fills in `type: "message"` for an item without one (zod's preprocess),
 * which the generated schema cannot show: a message item's `type` is optional.
 */
function messageTypeOptional(node: unknown): void {
	if (Array.isArray(node)) {
		for (const n of node) messageTypeOptional(n);
		return;
	}
	if (node === null || typeof node !== "object") return;
	const o = node as Json;
	const props = o.properties as Record<string, Json> | undefined;
	if (props?.type?.const === "message" && props.role && Array.isArray(o.required)) {
		o.required = o.required.filter((r) => r !== "type");
	}
	for (const v of Object.values(o)) messageTypeOptional(v);
}

function responsesRequest(): Json {
	const schema = withExtra(fromZod(ResponsesRequestSchema), FALLBACK_PROPS, false);
	messageTypeOptional(schema.properties);
	return describe(
		{ ...schema, description: "Strict: an unknown field is a 400 naming it. `background` with `stream` is a 400." },
		{ model: MODEL, venym: VENYM, store: "Keep the response for 30 days (default true); required with `background`." },
	);
}

/** `components.schemas` for the request bodies. */
export function requestSchemas(): Record<string, Json> {
	return {
		ChatCompletionRequest: chatRequest(),
		CompletionRequest: describe(
			{ ...allowlisted(fromZod(CompletionRequestSchema), COMPLETION_FIELDS, FALLBACK_PROPS), description: OTHERS },
			{
				model: "A text model id (no web search here).",
				max_tokens: "Default 16, capped like chat.",
			},
		),
		EmbeddingsRequest: describe(
			{ ...allowlisted(fromZod(EmbeddingsRequestSchema), EMBEDDING_FIELDS, FALLBACK_PROPS), description: OTHERS },
			{ model: "A model with the `embeddings` capability." },
		),
		ResponsesRequest: responsesRequest(),
		MessagesRequest: describe(withExtra(fromZod(MessagesRequestSchema), FALLBACK_PROPS, false), {
			model: "A catalog model id (`:online` for web search).",
			max_tokens: "Required; capped at the model's `max_output_tokens` (and context), never refused for being large.",
		}),
		CountTokensRequest: withExtra(fromZod(CountTokensSchema), FALLBACK_PROPS, false),
		CreateKeyRequest: fromZod(CreateKey),
		PatchKeyRequest: describe(fromZod(PatchKey), {
			name: "On a `vk-tmp-` token only `name` may change.",
		}),
		CreditRequest: describe(fromZod(Credit), { amount_usd: "USD to add; negative debits; not 0." }),
		MintTokenRequest: fromZod(MintToken),
		PatchNodeRequest: describe(fromZod(PatchNode), {
			url: "The node's URL, as configured or as shown by `GET /admin/nodes`.",
			clear: "Removes the override (not with `weight` or `drain`).",
		}),
	};
}
