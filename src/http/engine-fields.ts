/**
 * Engine fields a client may not set, on every lane (chat, legacy completions, embeddings,
 * Responses, Messages): each escapes the hold (an output length that overrides `max_tokens`, a
 * work multiplier, an answer far larger than its tokens) or takes what is the operator's to
 * decide (scheduling, slots, adapters, templates, the engine's own ids and extension hooks).
 * One list, checked once per request before anything is held; the OpenAPI document is generated
 * from it.
 */
import { GatewayError } from "../errors";

/** Refused field → what to do instead (the 400's message). */
export const REFUSED_ENGINE_FIELDS: Readonly<Record<string, string>> = {
	// Output lengths that win over `max_tokens` (llama.cpp, Ollama).
	n_predict: "use 'max_tokens'",
	num_predict: "use 'max_tokens'",
	// Work multipliers the hold does not cover (legacy completions accepts `best_of`, and holds for it).
	best_of: "use 'n'",
	use_beam_search: "beam search is not offered",
	// Per-token probability lists far larger than the tokens billed (llama.cpp's `n_probs`, unbounded;
	// vLLM's over every prompt token; SGLang's hidden states, a vector per token).
	n_probs: "use 'logprobs' and 'top_logprobs'",
	prompt_logprobs: "use 'logprobs'",
	return_hidden_states: "hidden states are not offered",
	// A prompt the estimate cannot see (vLLM's tensor input, unpickled by the engine).
	prompt_embeds: "prompts are text or token ids",
	// Templates, adapters and processors are the operator's setup (and unseen by the estimate).
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

function unsupported(param: string, instead: string): GatewayError {
	return new GatewayError("invalid_request", `'${param}' is not supported by this gateway: ${instead}.`, {
		param,
		code: "unsupported_parameter",
	});
}

/**
 * Throws the 400 `unsupported_parameter` naming the first refused field `body` carries (a field
 * in `accepted` is the lane's own and passes), and `chat_template_kwargs.chat_template` (vLLM
 * renders the kwargs into the template: a `chat_template` there replaces the template).
 * `body` is a parsed JSON object; nothing is copied.
 */
export function refuseEngineFields(body: object, accepted: ReadonlyArray<string> = []): void {
	for (const field in REFUSED_ENGINE_FIELDS) {
		if (Object.hasOwn(body, field) && !accepted.includes(field)) {
			throw unsupported(field, REFUSED_ENGINE_FIELDS[field] as string);
		}
	}
	const kwargs = (body as Record<string, unknown>).chat_template_kwargs;
	if (kwargs === undefined || kwargs === null) return;
	if (typeof kwargs !== "object" || Array.isArray(kwargs)) {
		throw new GatewayError("invalid_request", "Invalid value for 'chat_template_kwargs': expected an object.", {
			param: "chat_template_kwargs",
		});
	}
	if (Object.hasOwn(kwargs, "chat_template")) {
		throw unsupported("chat_template_kwargs.chat_template", REFUSED_ENGINE_FIELDS.chat_template as string);
	}
}
