/** The usage and credit-history answers of the admin API, as JSON Schema (hand-described: views.ts and usage-rollups.ts build them). */
import { int, type Json, list, nullable, num, obj, ref, str } from "./json-schema";

const usageRecord = obj({
	request_id: str,
	key_id: str,
	model: { type: "string", description: "The model that served." },
	requested_model: { type: "string", description: "The model the request named (differs after a fallback)." },
	node: nullable("string"),
	prompt_tokens: int,
	completion_tokens: int,
	total_tokens: int,
	cost_usd: num,
	cost_nanos: int,
	status: str,
	estimated: { type: "boolean", description: "Usage was the gateway's estimate, not the engine's count." },
	search_count: int,
	cached_tokens: {
		type: "integer",
		description: "Prompt tokens the engine served from its prefix cache (billed at the cached-input price).",
	},
	tool_calls_repaired: {
		type: "integer",
		description: "Tool calls whose broken JSON arguments the gateway repaired (`tool_call_repair`).",
	},
	lane: {
		...nullable("string"),
		description:
			"The API the request came in on: chat, completions, embeddings, responses, messages or gemini (null on older records).",
	},
	end_user: {
		...nullable("string"),
		description:
			"The end user the request named (`safety_identifier`, else `user`; Messages' `metadata.user_id`), at most 256 characters; null when none.",
	},
	batch_id: { ...nullable("string"), description: "A batch line's batch (null on interactive requests)." },
	custom_id: { ...nullable("string"), description: "A batch line's `custom_id` (null on interactive requests)." },
	created_at: int,
});

export function usageSchemas(): Record<string, Json> {
	return {
		CreditHistory: list(
			obj({
				amount_usd: { type: "number", description: "Credited (negative: taken back)." },
				balance_usd: { type: "number", description: "The balance right after this credit." },
				note: nullable("string"),
				created_at: { type: "integer", description: "Unix seconds." },
			}),
		),
		UsageRecord: usageRecord,
		UsageList: list(ref("UsageRecord"), { next_cursor: nullable("string") }),
		UsageSummary: obj({
			object: { const: "list" },
			granularity: { type: "string", enum: ["hour", "day"] },
			group_by: { type: ["string", "null"], enum: ["model", "key", "end_user", null] },
			since: { type: "string", format: "date-time", description: "The window's start, rounded down to the granularity." },
			until: { type: "string", format: "date-time", description: "The window's end (exclusive), rounded up." },
			data: {
				type: "array",
				items: obj(
					{
						period: { type: "string", format: "date-time", description: "The bucket's start (UTC)." },
						model: { type: "string", description: "With `group_by=model`." },
						key_id: { type: "string", description: "With `group_by=key`: the paying key." },
						end_user: {
							...nullable("string"),
							description: "With `group_by=end_user`: the end user (null: requests that named none).",
						},
						requests: int,
						prompt_tokens: int,
						completion_tokens: int,
						total_tokens: int,
						cost_usd: num,
						cost_nanos: int,
						search_count: int,
						cached_tokens: int,
						cache_hit_rate: { type: "number", description: "cached_tokens ÷ prompt_tokens (0 when no prompt tokens)." },
					},
					false,
					[
						"period",
						"requests",
						"prompt_tokens",
						"completion_tokens",
						"total_tokens",
						"cost_usd",
						"cost_nanos",
						"search_count",
						"cached_tokens",
						"cache_hit_rate",
					],
				),
			},
		}),
	};
}
