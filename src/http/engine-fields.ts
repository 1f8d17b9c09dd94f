/**
 * What an engine may receive, lane by lane: each lane lists the top-level fields it knows (an
 * allowlist), and the engine's body is built from that list, never by copying the client's body
 * minus a list of refusals, which always misses the next engine's name for `n` (llama.cpp's
 * `n_cmpl`). A field no list names is refused with 400 `unsupported_parameter` before anything is
 * held, unless the model's config lets it through (`models[].pass_through_fields`, never one of
 * money/output-fields.ts). The OpenAPI document is generated from these lists.
 */
import { GatewayError } from "../errors";

/**
 * What a lane does with a field it knows: sends it to the engine (as sent, or capped and
 * rewritten by the lane), reads it itself and never sends it, or accepts it and drops it (an
 * OpenAI platform feature no engine here has; docs/limits-and-money.md lists them).
 */
export type FieldUse = "engine" | "read" | "dropped";

/** A lane's allowlist: every top-level field it accepts, and what it does with each. */
export type LaneFields = Readonly<Record<string, FieldUse>>;

/** OpenAI's sampling parameters of chat and legacy completions (ranges in sampling-params.ts). */
const SAMPLING: LaneFields = {
	temperature: "engine",
	top_p: "engine",
	frequency_penalty: "engine",
	presence_penalty: "engine",
	seed: "engine",
	stop: "engine",
	logit_bias: "engine",
};

/** Engine sampling extensions every engine here reads (vLLM, SGLang, llama.cpp): they change no amount. */
const ENGINE_SAMPLING: LaneFields = { top_k: "engine", min_p: "engine", repetition_penalty: "engine" };

// `cache_salt` (vLLM, SGLang) only narrows whose prefix cache a request may hit: replaced by the
// payer's on a node with `cache_salt: true` (engine/cache-salt.ts), sent as is to the others.

/** The gateway's own: fallback models (routing/fallback-chain.ts) and Venym's options. */
const GATEWAY: LaneFields = { models: "read", fallbacks: "read", venym: "read" };

/**
 * Chat Completions: every create parameter of OpenAI's API (openai-node's
 * `ChatCompletionCreateParamsBase`), the engine extensions above, `cache_salt`, `chat_template_kwargs`
 * (`enable_thinking`…; its `chat_template` is refused) and vLLM's `documents` (counted in the
 * prompt estimate), and the gateway's own. `n`, the output limits and `stream_options` are
 * capped or rewritten by chat/prepare.ts.
 */
export const CHAT_FIELDS: LaneFields = {
	model: "engine",
	messages: "engine",
	stream: "engine",
	stream_options: "engine",
	max_tokens: "engine",
	max_completion_tokens: "engine",
	n: "engine",
	...SAMPLING,
	logprobs: "engine",
	top_logprobs: "engine",
	tools: "engine",
	tool_choice: "engine",
	parallel_tool_calls: "engine",
	response_format: "engine",
	reasoning_effort: "engine",
	user: "engine",
	prompt_cache_key: "engine",
	...ENGINE_SAMPLING,
	cache_salt: "engine",
	chat_template_kwargs: "engine",
	documents: "engine",
	// OpenAI's platform features: audio output, predicted outputs, stored completions, tiers,
	// moderation, its own web search (here: `:online` or `venym.web_search`), and the deprecated
	// `functions` (no engine here reads them, and the prompt estimate counts `tools` only).
	audio: "dropped",
	modalities: "dropped",
	prediction: "dropped",
	metadata: "dropped",
	store: "dropped",
	service_tier: "dropped",
	safety_identifier: "dropped",
	prompt_cache_retention: "dropped",
	prompt_cache_options: "dropped",
	moderation: "dropped",
	verbosity: "dropped",
	web_search_options: "dropped",
	functions: "dropped",
	function_call: "dropped",
	...GATEWAY,
};

/** Legacy completions: every create parameter of OpenAI's (`CompletionCreateParamsBase`), held for `n` × `best_of`. */
export const COMPLETION_FIELDS: LaneFields = {
	model: "engine",
	prompt: "engine",
	stream: "engine",
	stream_options: "engine",
	max_tokens: "engine",
	n: "engine",
	best_of: "engine",
	echo: "engine",
	suffix: "engine",
	...SAMPLING,
	logprobs: "engine",
	user: "engine",
	prompt_cache_key: "engine",
	...ENGINE_SAMPLING,
	cache_salt: "engine",
	...GATEWAY,
};

/** Embeddings: every create parameter of OpenAI's (`EmbeddingCreateParams`). */
export const EMBEDDING_FIELDS: LaneFields = {
	model: "engine",
	input: "engine",
	encoding_format: "engine",
	dimensions: "engine",
	user: "engine",
	...GATEWAY,
};

/** Every field of a lane that translates its whole body itself (Responses): read, none sent as is. */
export function readFields(names: Iterable<string>): LaneFields {
	const out: Record<string, FieldUse> = {};
	for (const name of names) out[name] = "read";
	return out;
}

/** Engine fields clients send by habit → what to do instead (the 400's hint). The decision is the allowlist's. */
export const FIELD_HINTS: Readonly<Record<string, string>> = {
	// Choices and output lengths under the engines' own names.
	n_cmpl: "use 'n'",
	n_predict: "use 'max_tokens'",
	num_predict: "use 'max_tokens'",
	max_new_tokens: "use 'max_tokens'",
	min_tokens: "the model decides when to stop; use 'max_tokens' for the most",
	min_new_tokens: "the model decides when to stop; use 'max_tokens' for the most",
	ignore_eos: "the model decides when to stop; use 'max_tokens' for the most",
	best_of: "use 'n'",
	use_beam_search: "beam search is not offered",
	// Per-token probability lists far larger than the tokens billed.
	n_probs: "use 'logprobs' and 'top_logprobs'",
	prompt_logprobs: "use 'logprobs'",
	return_hidden_states: "hidden states are not offered",
	// A prompt the estimate cannot see.
	prompt_embeds: "prompts are text or token ids",
	input_ids: "prompts are text or token ids",
	// Templates, adapters and processors are the operator's setup.
	chat_template: "the model's own template is used",
	lora: "adapters are the operator's",
	lora_path: "adapters are the operator's",
	logits_processors: "logits processors are the operator's",
	custom_logit_processor: "logits processors are the operator's",
	mm_processor_kwargs: "multimodal processing is the operator's",
	// Ollama's engine options (`num_ctx`, `num_predict`, `num_gpu`…) and model residency.
	options: "engine options are the operator's; use the OpenAI parameters",
	keep_alive: "model residency is the operator's",
	// Scheduling and placement: the gateway routes and schedules requests.
	priority: "requests are scheduled by the gateway",
	id_slot: "requests are scheduled by the gateway",
	slot_id: "requests are scheduled by the gateway",
	n_keep: "the context is managed by the engine's operator",
	data_parallel_rank: "requests are scheduled by the gateway",
	// The engine's own request ids and disaggregated-serving internals.
	request_id: "the gateway names requests",
	rid: "the gateway names requests",
	kv_transfer_params: "KV transfer is the operator's",
	bootstrap_host: "KV transfer is the operator's",
	bootstrap_port: "KV transfer is the operator's",
	bootstrap_room: "KV transfer is the operator's",
	vllm_xargs: "engine extension arguments are the operator's",
};

/** OpenAI features whose state lives on OpenAI's platform (Responses): what to send instead. */
const PLATFORM_HINTS: Readonly<Record<string, string>> = {
	conversation: "continue a conversation with 'previous_response_id'",
	prompt: "send the prompt's text as 'instructions' and 'input'",
};

const NOT_LISTED = "send only the parameters of this API (GET /openapi.json lists them)";

function unsupported(param: string, hint: string): GatewayError {
	return new GatewayError("invalid_request", `'${param}' is not supported by this gateway: ${hint}.`, {
		param,
		code: "unsupported_parameter",
	});
}

function passes(field: string, lane: LaneFields, passThrough: ReadonlyArray<string>): boolean {
	return Object.hasOwn(lane, field) || passThrough.includes(field);
}

/**
 * Throws the 400 `unsupported_parameter` naming the first top-level field of `body` that is not on
 * the lane's list nor in `passThrough` (the serving model's `pass_through_fields`), and a
 * `chat_template` inside a `chat_template_kwargs` that would be sent (vLLM renders the kwargs into
 * the template: a `chat_template` there replaces it). Reads own keys only; nothing is copied.
 */
export function checkFields(body: object, lane: LaneFields, passThrough: ReadonlyArray<string> = []): void {
	for (const field in body) {
		if (!Object.hasOwn(body, field) || passes(field, lane, passThrough)) continue;
		throw unsupported(field, FIELD_HINTS[field] ?? PLATFORM_HINTS[field] ?? NOT_LISTED);
	}
	const kwargs = (body as Record<string, unknown>).chat_template_kwargs;
	if (kwargs === undefined || kwargs === null || lane.chat_template_kwargs === "read") return;
	if (typeof kwargs !== "object" || Array.isArray(kwargs)) {
		throw new GatewayError("invalid_request", "Invalid value for 'chat_template_kwargs': expected an object.", {
			param: "chat_template_kwargs",
		});
	}
	if (Object.hasOwn(kwargs, "chat_template")) {
		throw unsupported("chat_template_kwargs.chat_template", FIELD_HINTS.chat_template as string);
	}
}

/**
 * Refuses the engine fields clients send by habit (FIELD_HINTS) and leaves every other unknown
 * field alone: for a lane that ignores unknown fields by contract (Messages) and builds its
 * engine body field by field, so none of them reaches an engine either way.
 */
export function refuseEngineNames(body: object, known: ReadonlySet<string>): void {
	for (const field in FIELD_HINTS) {
		if (Object.hasOwn(body, field) && !known.has(field)) throw unsupported(field, FIELD_HINTS[field] as string);
	}
}

/**
 * The engine's body: the top-level fields of `body` the lane sends, and those `passThrough` lets
 * through (a field the lane knows is the lane's to decide). A new object sharing the values
 * (messages, prompts, inputs are not copied); the lane then writes its caps and rewrites.
 */
export function engineFields(
	body: Record<string, unknown>,
	lane: LaneFields,
	passThrough: ReadonlyArray<string> = [],
): Record<string, unknown> {
	const out: Record<string, unknown> = {};
	for (const field in body) {
		if (!Object.hasOwn(body, field)) continue;
		const use = Object.hasOwn(lane, field) ? lane[field] : passThrough.includes(field) ? "engine" : undefined;
		if (use === "engine") out[field] = body[field];
	}
	return out;
}
