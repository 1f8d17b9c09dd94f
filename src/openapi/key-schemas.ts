/** The API keys' views and the console's refused requests, as JSON Schema for the OpenAPI document (output-schemas.ts). */
import { alertRules } from "./alert-schemas";
import { bool, int, nullable, nullableStrings, num, obj, str } from "./json-schema";

export const keyFields = {
	id: str,
	object: { const: "api_key" },
	name: str,
	prefix: { type: "string", description: "The secret's first characters, to recognise it." },
	created_at: int,
	revoked: bool,
	revoked_at: nullable("integer"),
	expires_at: nullable("integer"),
	allowed_origins: nullableStrings,
	allowed_models: nullableStrings,
	rpm: nullable("integer"),
	tpm: nullable("integer"),
	spend_limit_usd: nullable("number"),
	spend_limit_period: { type: ["string", "null"], enum: ["daily", "weekly", "monthly", null] },
	max_tokens: nullable("integer"),
	max_concurrent: { ...nullable("integer"), description: "Requests in flight at once; a token's count inside its parent's." },
	per_user_rpm: { ...nullable("integer"), description: "Requests per minute of each end user of the key." },
	per_user_daily_usd: { ...nullable("number"), description: "Spend per UTC day of each end user of the key." },
	parent_key_id: { type: ["string", "null"], description: "Set on a `vk-tmp-` token: the key it draws on." },
};

export const balanceFields = {
	balance_usd: num,
	spent_usd: num,
	held_usd: { type: "number", description: "Open holds: the worst case of requests still running." },
	reserved_usd: {
		type: "number",
		description: "Reserved by edge allowances ahead of need (not spent; returned when traffic stops), apart from held_usd.",
	},
	open_holds: int,
};

/** A listing reads each key's ledger; one that fails to answer leaves its row's money null. */
export const listedBalanceFields = {
	balance_usd: nullable("number"),
	spent_usd: nullable("number"),
	held_usd: nullable("number"),
	reserved_usd: nullable("number"),
	open_holds: nullable("integer"),
};

export const adminKeyFields = {
	...keyFields,
	metadata: { type: ["object", "null"], additionalProperties: str },
	alerts: alertRules,
};

/** A key's use, on `GET /admin/keys` and `GET /admin/keys/{id}`. */
export const keyUseFields = {
	overdrawn: { type: "boolean", description: "The balance is below zero (an answer cost more than its hold)." },
	last_used_at: {
		type: ["integer", "null"],
		description: "Its newest usage record (unix seconds), trailing a request by the ledger's flush; null if never used.",
	},
	requests_today: { type: "integer", description: "Requests it paid for since 00:00 UTC." },
};

export const refusal = obj({
	object: { const: "refusal" },
	request_id: str,
	created_at: int,
	status: int,
	code: nullable("string"),
	message: nullable("string"),
	lane: str,
	key_id: nullable("string"),
	key_name: nullable("string"),
	model: nullable("string"),
	suppressed: { type: "integer", description: "Refusals its isolate left unrecorded (over its bound) just before this one." },
});
