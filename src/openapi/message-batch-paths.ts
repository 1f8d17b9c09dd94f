/**
 * Anthropic's Message Batches (`/v1/messages/batches`) and the console's batch calls
 * (`/admin/batches`) in the OpenAPI document (docs/batches.md, docs/admin.md).
 */
import { int, type Json, nullable, num, obj, ref, str } from "./json-schema";
import { type Operation, operation, pathParam, query } from "./operation";

const time = { type: "string", format: "date-time" };
const nullableTime = { type: ["string", "null"], format: "date-time" };
const ID = pathParam("id", "A Message Batch id (`msgbatch_…`) of the calling key.");

export function messageBatchSchemas(): Record<string, Json> {
	return {
		CreateMessageBatchRequest: obj({
			requests: {
				type: "array",
				minItems: 1,
				maxItems: 50_000,
				description: "One model for every request; at most `batches.max_file_bytes` in all, each at most `max_body_bytes`.",
				items: obj({
					custom_id: { type: "string", pattern: "^[a-zA-Z0-9_-]{1,64}$", description: "Unique in the batch." },
					params: { type: "object", description: "A Messages request (`stream` not allowed)." },
				}),
			},
		}),
		MessageBatch: obj({
			id: str,
			type: { const: "message_batch" },
			processing_status: { type: "string", enum: ["in_progress", "canceling", "ended"] },
			request_counts: obj({ processing: int, succeeded: int, errored: int, canceled: int, expired: int }),
			ended_at: nullableTime,
			created_at: time,
			expires_at: time,
			archived_at: nullableTime,
			cancel_initiated_at: nullableTime,
			results_url: { ...nullable("string"), description: "Set once the batch has ended." },
		}),
		MessageBatchList: obj({
			data: { type: "array", items: ref("MessageBatch") },
			has_more: { type: "boolean" },
			first_id: nullable("string"),
			last_id: nullable("string"),
		}),
		MessageBatchDeleted: obj({ id: str, type: { const: "message_batch_deleted" } }),
		AdminBatch: obj({
			id: str,
			api_id: str,
			api: { type: "string", enum: ["openai", "anthropic"] },
			key_id: str,
			model: str,
			endpoint: str,
			status: str,
			request_counts: obj({ total: int, completed: int, failed: int }),
			cost_usd: num,
			created_at: nullable("integer"),
			expires_at: nullable("integer"),
			ended_at: nullable("integer"),
		}),
		AdminBatchList: obj({
			object: { const: "list" },
			data: { type: "array", items: ref("AdminBatch") },
			has_more: { type: "boolean" },
			last_id: nullable("string"),
		}),
	};
}

const anthropic = { tag: "Batches", security: "key", anthropicErrors: true } as const;

const ops: Record<string, Record<string, Operation>> = {
	"/v1/messages/batches": {
		post: {
			...anthropic,
			summary: "Create a Message Batch (Anthropic)",
			description:
				"Checked whole before anything is stored (custom_id rule, one model, limits); each request then runs through the Messages lane in idle capacity at the batch price.",
			body: "CreateMessageBatchRequest",
			json: "MessageBatch",
			successDescription: "The batch, `in_progress`.",
		},
		get: {
			...anthropic,
			summary: "List the key's Message Batches",
			parameters: [
				query("limit", "Page size, 1-1000 (default 20).", { type: "integer", minimum: 1, maximum: 1000 }),
				query("after_id", "The page of older batches after this id (a `last_id`)."),
				query("before_id", "The page of newer batches before this id (a `first_id`)."),
			],
			json: "MessageBatchList",
			successDescription: "Newest first.",
		},
	},
	"/v1/messages/batches/{id}": {
		get: { ...anthropic, summary: "A Message Batch", parameters: [ID], json: "MessageBatch", successDescription: "The batch." },
		delete: {
			...anthropic,
			summary: "Delete an ended Message Batch",
			description: "Removes the batch, its requests and results; a batch still processing is a 400 (cancel it first).",
			parameters: [ID],
			json: "MessageBatchDeleted",
			successDescription: "Deleted.",
		},
	},
	"/v1/messages/batches/{id}/cancel": {
		post: {
			...anthropic,
			summary: "Cancel a Message Batch",
			description: "Requests not yet run end `canceled` and cost nothing; running ones finish.",
			parameters: [ID],
			json: "MessageBatch",
			successDescription: "The batch, `canceling` (or as it was when it was no longer running).",
		},
	},
	"/v1/messages/batches/{id}/results": {
		get: {
			...anthropic,
			summary: "A Message Batch's results",
			parameters: [ID],
			media: ["application/x-jsonl", { type: "string" }],
			successDescription: "JSONL, one `{custom_id, result}` a request: succeeded, errored, canceled or expired.",
		},
	},
	"/admin/batches": {
		get: {
			tag: "Admin",
			summary: "Every key's batches (the console's Batches view)",
			security: "admin",
			parameters: [
				query("status", "Only batches with this status."),
				query("key_id", "Only this key's batches."),
				query("after", "The page after this id (a `last_id`)."),
				query("limit", "Page size, 1-200 (default 50).", { type: "integer", minimum: 1, maximum: 200 }),
			],
			json: "AdminBatchList",
			successDescription: "Newest first: status, progress, cost so far.",
			errors: [400, 404],
		},
	},
	"/admin/batches/{id}/cancel": {
		post: {
			tag: "Admin",
			summary: "Cancel any key's batch",
			security: "admin",
			parameters: [pathParam("id", "The batch's store id (`batch_…`).")],
			json: "AdminBatch",
			successDescription: "The batch after the cancel.",
			errors: [404],
		},
	},
};

export function messageBatchPaths(): Record<string, Record<string, Json>> {
	const out: Record<string, Record<string, Json>> = {};
	for (const [path, methods] of Object.entries(ops)) {
		out[path] = {};
		for (const [method, op] of Object.entries(methods)) (out[path] as Record<string, Json>)[method] = operation(op);
	}
	return out;
}
