/**
 * Request fields that decide how much an engine produces or counts: how many choices, how many
 * tokens, probability lists far larger than their tokens, a prompt the gateway's estimate cannot
 * see. A hold is computed from what the gateway reads of these (its own `n`, `max_tokens`,
 * `best_of`, `logprobs`, each capped by its lane), so none may ever reach an engine any other way:
 * the config loader refuses a model that lists one in `pass_through_fields`, whatever the engine
 * (llama.cpp's `n_cmpl` is its own name for `n`: 8 choices delivered, 1 billed). Pure data.
 */
export const OUTPUT_FIELDS: ReadonlySet<string> = new Set([
	// Choices and generations: OpenAI's, llama.cpp's `n_cmpl`, vLLM/SGLang beam search, Hugging Face's names.
	"n",
	"n_cmpl",
	"best_of",
	"use_beam_search",
	"num_beams",
	"beam_width",
	"num_return_sequences",
	// Output lengths: OpenAI's, llama.cpp's `n_predict`, Ollama's `num_predict`, SGLang's and HF's `*_new_tokens`.
	"max_tokens",
	"max_completion_tokens",
	"max_output_tokens",
	"max_new_tokens",
	"n_predict",
	"num_predict",
	// Lengths forced past the model's own end (vLLM, SGLang, llama.cpp).
	"min_tokens",
	"min_new_tokens",
	"ignore_eos",
	// Probability lists: per output token (llama.cpp's `n_probs`, SGLang's), per prompt token (vLLM), hidden states.
	"logprobs",
	"top_logprobs",
	"n_probs",
	"prompt_logprobs",
	"return_logprob",
	"top_logprobs_num",
	"logprob_start_len",
	"return_hidden_states",
	"echo",
	// Prompts the estimate cannot see: tensors, token ids, a client's template, Ollama's options (`num_predict`…).
	"prompt_embeds",
	"input_ids",
	"chat_template",
	"options",
	// Image and video processing that sets how many tokens a part costs (vLLM's `max_pixels`,
	// `num_frames`; SGLang's tiles), and a session's earlier context (SGLang): no byte shows them.
	"mm_processor_kwargs",
	"media_io_kwargs",
	"images_config",
	"max_dynamic_patch",
	"min_dynamic_patch",
	"use_audio_in_video",
	"session_id",
	"session_params",
	// The gateway's own: the engine is always asked for a stream with usage.
	"stream",
	"stream_options",
]);
