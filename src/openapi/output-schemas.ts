/**
 * What the API answers, as JSON Schema for the OpenAPI document. Hand-described: outputs are
 * built by code (views.ts, the encoders, Responses' from-chat.ts), not parsed by a zod schema,
 * so there is nothing to generate them from. Engine answers pass through with extra fields, so
 * their objects allow more properties than listed; the gateway's own views list them all.
 */

import { alertSchemas } from "./alert-schemas";
import { bool, int, type Json, list, nullable, nullableStrings, num, obj, ref, str, strings } from "./json-schema";
import { adminKeyFields, balanceFields, keyFields, keyUseFields, listedBalanceFields, refusal } from "./key-schemas";
import { usageSchemas } from "./usage-schemas";

const usage = obj({ prompt_tokens: int, completion_tokens: int, total_tokens: int }, true, [
	"prompt_tokens",
	"completion_tokens",
	"total_tokens",
]);

const source = obj({ title: str, url: str });

const model = obj(
	{
		id: str,
		object: { const: "model" },
		created: int,
		owned_by: str,
		max_output_tokens: int,
		context_length: nullable("integer"),
		context_window: { type: ["integer", "null"], description: "The same as `context_length`, under the name Codex reads." },
		max_input_tokens: {
			type: ["integer", "null"],
			description: "The same as `context_length`, under the name of Anthropic's Models API (Claude Code).",
		},
		max_tokens: { type: "integer", description: "The same as `max_output_tokens`, under the name of Anthropic's Models API." },
		pricing: obj(
			{
				input_usd_per_mtok: num,
				output_usd_per_mtok: num,
				cached_input_usd_per_mtok: {
					type: "number",
					description: "Prompt tokens served from the engine's prefix cache (the input price unless the operator set one).",
				},
			},
			true,
			["input_usd_per_mtok", "cached_input_usd_per_mtok"],
		),
		capabilities: strings,
	},
	false,
	["id", "object", "created", "owned_by", "pricing", "capabilities"],
);

const chatCompletion = obj(
	{
		id: str,
		object: { const: "chat.completion" },
		created: int,
		model: { type: "string", description: "Always the gateway's model id (the one that served)." },
		choices: {
			type: "array",
			items: obj(
				{ index: int, message: { type: "object", additionalProperties: true }, finish_reason: nullable("string") },
				true,
				["index", "message"],
			),
		},
		usage: { ...usage, description: "Always present; estimated at about four characters a token when the engine sent none." },
		venym: {
			type: "object",
			description: "Present when web search ran and found results.",
			properties: { sources: { type: "array", items: source } },
			additionalProperties: true,
		},
	},
	true,
	["id", "object", "created", "model", "choices", "usage"],
);

const chatChunk = obj(
	{
		id: str,
		object: { const: "chat.completion.chunk" },
		created: int,
		model: str,
		choices: { type: "array", items: { type: "object", additionalProperties: true } },
		usage: { anyOf: [usage, { type: "null" }] },
	},
	true,
	["id", "object", "model", "choices"],
);

const sourcesFrame = obj(
	{
		id: str,
		object: { const: "venym.sources" },
		created: int,
		model: str,
		choices: { type: "array", maxItems: 0 },
		sources: { type: "array", items: source },
	},
	false,
	["object", "sources"],
);

const responseItem = { type: "object", required: ["type"], properties: { type: str, id: str }, additionalProperties: true };

const responseObject = obj(
	{
		id: str,
		object: { const: "response" },
		created_at: int,
		status: { type: "string", enum: ["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"] },
		background: bool,
		error: { anyOf: [obj({ code: str, message: str }, true, ["code", "message"]), { type: "null" }] },
		incomplete_details: { anyOf: [obj({ reason: str }, true), { type: "null" }] },
		model: str,
		output: {
			type: "array",
			items: responseItem,
			description: "`reasoning`, `message` (`output_text`) and `function_call` items.",
		},
		previous_response_id: nullable("string"),
		store: bool,
		usage: { anyOf: [{ type: "object", additionalProperties: true }, { type: "null" }] },
	},
	true,
	["id", "object", "created_at", "status", "model", "output"],
);

/** `components.schemas` for what the API answers. */
export function outputSchemas(): Record<string, Json> {
	const token = obj({
		id: str,
		object: { const: "token" },
		token: { type: "string", description: "The `vk-tmp-…` secret, shown once." },
		parent_key_id: str,
		created_at: int,
		expires_at: int,
		allowed_origins: strings,
		allowed_models: nullableStrings,
		rpm: nullable("integer"),
		tpm: nullable("integer"),
		spend_limit_usd: nullable("number"),
		max_tokens: nullable("integer"),
		max_concurrent: nullable("integer"),
	});
	const { metadata: _operatorOnly, ...ownKeyFields } = adminKeyFields;
	const limits = obj({
		rpm: nullable("integer"),
		tpm: nullable("integer"),
		max_concurrent: keyFields.max_concurrent,
		per_user_rpm: keyFields.per_user_rpm,
		per_user_daily_usd: keyFields.per_user_daily_usd,
		spend_limit_usd: nullable("number"),
		spend_limit_period: keyFields.spend_limit_period,
		max_tokens: nullable("integer"),
		allowed_models: nullableStrings,
		allowed_origins: nullableStrings,
		expires_at: nullable("integer"),
	});
	const nodeRow = obj({
		model: str,
		url: { type: "string", description: "Credentials in the URL are masked." },
		weight: num,
		configured_weight: num,
		drained: bool,
		state: {
			type: "string",
			enum: ["drained", "cooling", "failing", "unhealthy", "healthy"],
			description:
				"For an operator: drained; cooling (its failures earned a cooldown); failing (its last request failed in the last 5 minutes, none succeeded since); unhealthy (its health probe fails); else healthy.",
		},
		override: { anyOf: [obj({ weight: nullable("number"), drained: nullable("boolean") }, true, []), { type: "null" }] },
		healthy: bool,
		cooling_until: nullable("integer"),
		in_flight: int,
		last_error: nullable("string"),
		last_error_at: { type: ["integer", "null"], description: "When `last_error` happened (unix seconds)." },
		failures: { type: "integer", description: "Failures in a row on this isolate (a success resets it)." },
		latency_ms: nullable("integer"),
		checked_at: nullable("integer"),
		engine_load: { anyOf: [{ type: "object", additionalProperties: true }, { type: "null" }] },
		affinity_served: int,
		affinity_spilled: int,
		cache_hit_rate: nullable("number"),
	});
	return {
		ChatCompletion: chatCompletion,
		ChatCompletionChunk: chatChunk,
		VenymSources: sourcesFrame,
		ChatCompletionStreamEvent: {
			description:
				"One `data:` frame of a chat stream: a chunk, the leading `venym.sources` frame when web search found results, or an error frame when the engine fails mid-stream. The frame before `data: [DONE]` carries `usage` with `choices: []`.",
			anyOf: [ref("ChatCompletionChunk"), ref("VenymSources"), ref("Error")],
		},
		Completion: obj(
			{
				id: str,
				object: { const: "text_completion" },
				created: int,
				model: str,
				choices: { type: "array", items: { type: "object", additionalProperties: true } },
				usage,
			},
			true,
			["id", "object", "model", "choices"],
		),
		EmbeddingList: obj(
			{
				object: { const: "list" },
				data: {
					type: "array",
					items: obj(
						{ object: { const: "embedding" }, index: int, embedding: { anyOf: [{ type: "array", items: num }, str] } },
						true,
					),
				},
				model: str,
				usage: obj({ prompt_tokens: int, total_tokens: int }, true),
			},
			true,
		),
		Response: responseObject,
		ResponseStreamEvent: {
			description:
				"One `event:`/`data:` frame of a Responses stream, with a rising `sequence_number`, from `response.created` to exactly one of `response.completed`, `response.incomplete`, `response.failed` (a mid-stream engine failure sends `error` then `response.failed`).",
			type: "object",
			required: ["type", "sequence_number"],
			properties: { type: str, sequence_number: int },
			additionalProperties: true,
		},
		ResponseDeleted: obj({ id: str, object: { const: "response" }, deleted: { const: true } }),
		InputItemList: list(responseItem, { first_id: nullable("string"), last_id: nullable("string"), has_more: bool }),
		Model: model,
		ModelList: list(ref("Model"), { has_more: bool }),
		OwnKey: obj({ ...ownKeyFields, ...balanceFields, limits }),
		Token: token,
		AdminKey: obj({ ...adminKeyFields, ...balanceFields, ...keyUseFields }, false, [
			...Object.keys(adminKeyFields),
			...Object.keys(balanceFields),
		]),
		AdminKeyCreated: obj({
			...adminKeyFields,
			key: { type: "string", description: "The `vk-…` secret, shown once." },
			...balanceFields,
		}),
		AdminKeyList: list(obj({ ...adminKeyFields, ...listedBalanceFields, ...keyUseFields }), { next_cursor: nullable("string") }),
		RefusalList: list(refusal, { next_cursor: nullable("string") }),
		AdminKeyDeleted: obj({ ...adminKeyFields, deleted: { const: true } }),
		CreditResult: obj({
			id: str,
			balance_usd: num,
			applied: { type: "boolean", description: "false: an Idempotency-Key replay of an earlier credit." },
		}),
		...usageSchemas(),
		...alertSchemas(),
		NodeList: list(nodeRow),
		MaintenanceRun: obj({
			object: { const: "maintenance.run" },
			usage_retention: obj({
				cutoff: { type: "string", description: "Records created before this instant (ISO 8601) are past retention." },
				deleted: int,
				archived: { type: "array", items: str, description: "R2 objects written by this run." },
				done: { type: "boolean", description: "false: records past retention are left; run it again." },
				error: { type: ["string", "null"], description: "Why the run kept records it should have deleted." },
			}),
			refused_requests: obj({ deleted: { type: "integer", description: "Refused requests past their 7 days, deleted." } }),
			batch_files_deleted: { type: "integer", description: "Batch files past `batches.retention_days` deleted." },
		}),
		ServiceInfo: obj({ name: str, docs: str }, true),
		Health: obj({ ok: { const: true } }),
	};
}
