/** The batch lane's operations (`/v1/files`, `/v1/batches`) and their shapes, as OpenAI documents them (docs/batches.md). */
import { CreateBatchSchema } from "../api/batch-input";
import { int, type Json, list, nullable, num, obj, ref, str } from "./json-schema";
import { type Operation, operation, pathParam, query } from "./operation";
import { fromZod } from "./request-schemas";

const secs = nullable("integer");
const FILE_ID = pathParam("id", "A file id (`file-…`) of the calling key.");
const BATCH_ID = pathParam("id", "A batch id (`batch_…`) of the calling key.");
const PAGE = [
	query("limit", "Page size (default 20).", { type: "integer", minimum: 1 }),
	query("after", "An id: the page starts after it (newest first)."),
];

export function batchSchemas(): Record<string, Json> {
	return {
		CreateBatchRequest: fromZod(CreateBatchSchema),
		File: obj({
			id: str,
			object: { const: "file" },
			bytes: int,
			created_at: int,
			filename: str,
			purpose: { type: "string", enum: ["batch", "batch_output"] },
			status: { const: "processed" },
			status_details: { type: "null" },
			expires_at: { type: "null" },
		}),
		FileList: list(ref("File"), { first_id: nullable("string"), last_id: nullable("string"), has_more: { type: "boolean" } }),
		FileDeleted: obj({ id: str, object: { const: "file" }, deleted: { const: true } }),
		Batch: obj({
			id: str,
			object: { const: "batch" },
			endpoint: str,
			model: str,
			errors: {
				type: ["object", "null"],
				description: "Validation errors, each naming its `line` (1-based) when it has one.",
			},
			input_file_id: str,
			completion_window: { const: "24h" },
			status: {
				type: "string",
				enum: ["validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"],
			},
			output_file_id: nullable("string"),
			error_file_id: nullable("string"),
			created_at: int,
			in_progress_at: secs,
			expires_at: secs,
			finalizing_at: secs,
			completed_at: secs,
			failed_at: secs,
			expired_at: secs,
			cancelling_at: secs,
			cancelled_at: secs,
			request_counts: obj({ total: int, completed: int, failed: int }),
			metadata: { type: ["object", "null"], additionalProperties: str },
			cost_usd: { ...num, description: "What the batch's lines have been billed so far (Venym's addition)." },
		}),
		BatchList: list(ref("Batch"), { first_id: nullable("string"), last_id: nullable("string"), has_more: { type: "boolean" } }),
	};
}

const ops: Record<string, Record<string, Operation>> = {
	"/v1/files": {
		post: {
			tag: "Batches",
			summary: "Upload a batch input file",
			description:
				"multipart/form-data with `file` (JSONL, at most `batches.max_file_bytes`, 50,000 lines, each line at most `max_body_bytes`) and `purpose: batch`.",
			security: "key",
			json: "File",
			successDescription: "The file.",
			errors: [400, 413],
		},
		get: {
			tag: "Batches",
			summary: "List the key's files",
			security: "key",
			parameters: [...PAGE, query("purpose", "Only files with this purpose.")],
			json: "FileList",
			successDescription: "Newest first.",
		},
	},
	"/v1/files/{id}": {
		get: {
			tag: "Batches",
			summary: "A file",
			security: "key",
			parameters: [FILE_ID],
			json: "File",
			successDescription: "The file.",
			errors: [404],
		},
		delete: {
			tag: "Batches",
			summary: "Delete a file",
			security: "key",
			parameters: [FILE_ID],
			json: "FileDeleted",
			successDescription: "Deleted.",
			errors: [404],
		},
	},
	"/v1/files/{id}/content": {
		get: {
			tag: "Batches",
			summary: "A file's content",
			security: "key",
			parameters: [FILE_ID],
			media: ["application/jsonl", { type: "string" }],
			successDescription: "The JSONL bytes; an output or error file's lines are `{id, custom_id, response, error}`.",
			errors: [404],
		},
	},
	"/v1/batches": {
		post: {
			tag: "Batches",
			summary: "Create a batch",
			description:
				"Validates the input file (every fault named by line number: the batch is `failed`, nothing billed), then runs its lines in the model's idle capacity at the batch price.",
			security: "key",
			body: "CreateBatchRequest",
			json: "Batch",
			successDescription: "The batch (`in_progress`, or `failed` with its validation errors).",
			errors: [400, 404, 413],
		},
		get: {
			tag: "Batches",
			summary: "List the key's batches",
			security: "key",
			parameters: PAGE,
			json: "BatchList",
			successDescription: "Newest first.",
		},
	},
	"/v1/batches/{id}": {
		get: {
			tag: "Batches",
			summary: "A batch",
			security: "key",
			parameters: [BATCH_ID],
			json: "Batch",
			successDescription: "The batch.",
			errors: [404],
		},
	},
	"/v1/batches/{id}/cancel": {
		post: {
			tag: "Batches",
			summary: "Cancel a batch",
			description: "Queued lines end `batch_cancelled` and cost nothing; running lines finish; then the batch is `cancelled`.",
			security: "key",
			parameters: [BATCH_ID],
			json: "Batch",
			successDescription: "The batch, `cancelling` or `cancelled`.",
			errors: [404, 409],
		},
	},
};

/** The operations, the upload's multipart body added by hand (operation.ts writes JSON bodies only). */
export function batchPaths(): Record<string, Record<string, Json>> {
	const out: Record<string, Record<string, Json>> = {};
	for (const [path, methods] of Object.entries(ops)) {
		out[path] = {};
		for (const [method, op] of Object.entries(methods)) (out[path] as Record<string, Json>)[method] = operation(op);
	}
	const upload = out["/v1/files"]?.post as Json;
	upload.requestBody = {
		required: true,
		content: {
			"multipart/form-data": {
				schema: obj({ file: { type: "string", format: "binary" }, purpose: { const: "batch" } }),
			},
		},
	};
	return out;
}
