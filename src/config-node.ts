/** One engine node of a model in GATEWAY_CONFIG (`models[].nodes[]`): a URL, or a URL with its options. */
import { z } from "zod";

const url = z.url({ protocol: /^https?$/ });

export const NodeSchema = z.union([
	url,
	z.strictObject({
		url,
		api_key_env: z.string().min(1).optional(),
		/** Share of new traffic relative to the model's other nodes; 0 drains the node. */
		weight: z.number().nonnegative().max(1_000_000).optional(),
		/** Where the health check goes when not `{server root}/health` (a node behind a path prefix). */
		health_url: url.optional(),
		/** Where the engine's Prometheus metrics are when not `{server root}/metrics`. */
		metrics_url: url.optional(),
		/** Every request to this node carries a `cache_salt` derived from the paying key (tenant-isolated prefix cache). */
		cache_salt: z.boolean().optional(),
		/**
		 * How fast the node reads a prompt (prefill), in tokens a second: a prompt's first-token
		 * deadline grows by its tokens at this rate. When absent, learned from the node's answers.
		 */
		prefill_tokens_per_s: z.number().positive().max(100_000_000).optional(),
		/** The node serves `POST {server root}/tokenize` (llama.cpp, vLLM, SGLang): count_tokens asks it for exact counts. */
		tokenize: z.boolean().optional(),
		/** The engine schedules by request `priority` (vLLM `--scheduling-policy priority`): batch lines carry a lower one. */
		priority: z.boolean().optional(),
		/**
		 * How many requests the engine runs at once (vLLM `--max-num-seqs`, SGLang
		 * `--max-running-requests`, llama.cpp `--parallel`): the batch lane runs a quarter of it on
		 * the node unless `batches.max_in_flight_per_node` is set.
		 */
		max_num_seqs: z.number().int().min(1).max(1_000_000).optional(),
	}),
]);
