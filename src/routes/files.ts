/** `/v1/files` for the batch lane (OpenAI's Files API, purpose `batch`): the bytes in R2, the row in D1, each file its key's alone. */
import { Hono } from "hono";
import type { AppEnv } from "../app-env";
import { callerKeyId } from "../auth/scopes";
import { fileKey } from "../batches/finalize";
import { jsonlLines, LineTooLong } from "../batches/jsonl";
import { fileObject } from "../batches/objects";
import { batchLineBytes, MAX_BATCH_LINES } from "../config-batches";
import { batchFilesStore } from "../db/batches";
import { GatewayError } from "../errors";
import { randomId } from "../ids";
import { batchLane, listLimit, listPage } from "./batch-lane";

function notFound(id: string): GatewayError {
	return new GatewayError("not_found", `No such File object: ${id}`, { param: "file_id" });
}

/** Every limit is checked before anything is stored: the size, the lines, each line's size. */
async function checkBatchFile(file: File, maxLineBytes: number): Promise<void> {
	let lines = 0;
	try {
		for await (const { text } of jsonlLines(file.stream(), maxLineBytes)) {
			if (text.trim() !== "" && ++lines > MAX_BATCH_LINES) {
				throw new GatewayError("invalid_request", `A batch input file may hold at most ${MAX_BATCH_LINES} lines.`, {
					param: "file",
				});
			}
		}
	} catch (err) {
		if (err instanceof LineTooLong) throw new GatewayError("request_too_large", err.message, { param: "file" });
		throw err;
	}
}

export const filesRoutes = new Hono<AppEnv>()
	.post("/", async (c) => {
		const config = batchLane(c);
		const declared = Number(c.req.header("content-length") ?? "0");
		// The multipart envelope adds a few hundred bytes to the file.
		if (declared > config.batches.max_file_bytes + 64 * 1024) {
			throw new GatewayError("request_too_large", `A file may be at most ${config.batches.max_file_bytes} bytes.`, {
				param: "file",
			});
		}
		const form = await c.req.raw.formData().catch(() => {
			throw new GatewayError("invalid_request", "The body must be multipart/form-data with 'file' and 'purpose'.");
		});
		const purpose = form.get("purpose");
		const file = form.get("file");
		if (purpose !== "batch") throw new GatewayError("invalid_request", "'purpose' must be 'batch'.", { param: "purpose" });
		if (!(file instanceof File)) throw new GatewayError("invalid_request", "'file' is required.", { param: "file" });
		if (file.size > config.batches.max_file_bytes) {
			throw new GatewayError("request_too_large", `A file may be at most ${config.batches.max_file_bytes} bytes.`, {
				param: "file",
			});
		}
		await checkBatchFile(file, batchLineBytes(config.max_body_bytes));
		const row = {
			id: randomId("file-", 12),
			keyId: callerKeyId(c.get("principal")),
			purpose,
			filename: file.name || "input.jsonl",
			bytes: file.size,
			createdAt: Date.now(),
		};
		await c.env.BATCH_FILES.put(fileKey(row.id), file);
		await batchFilesStore(c.env.DB).put(row);
		return c.json(fileObject(row));
	})
	.get("/", async (c) => {
		batchLane(c);
		const limit = listLimit(c.req.query("limit"), 10_000);
		const after = c.req.query("after");
		const purpose = c.req.query("purpose");
		const rows = await batchFilesStore(c.env.DB).list(callerKeyId(c.get("principal")), {
			limit,
			...(after ? { after } : {}),
			...(purpose ? { purpose } : {}),
		});
		return c.json(listPage(rows, limit, fileObject));
	})
	.get("/:id", async (c) => {
		batchLane(c);
		const id = c.req.param("id");
		const row = await batchFilesStore(c.env.DB).get(callerKeyId(c.get("principal")), id);
		if (!row) throw notFound(id);
		return c.json(fileObject(row));
	})
	.get("/:id/content", async (c) => {
		batchLane(c);
		const id = c.req.param("id");
		const row = await batchFilesStore(c.env.DB).get(callerKeyId(c.get("principal")), id);
		const object = row ? await c.env.BATCH_FILES.get(fileKey(id)) : null;
		if (!object) throw notFound(id);
		return new Response(object.body, {
			headers: { "content-type": "application/jsonl", "content-length": String(object.size) },
		});
	})
	.delete("/:id", async (c) => {
		batchLane(c);
		const id = c.req.param("id");
		const deleted = await batchFilesStore(c.env.DB).delete(callerKeyId(c.get("principal")), id);
		if (!deleted) throw notFound(id);
		await c.env.BATCH_FILES.delete(fileKey(id));
		return c.json({ id, object: "file", deleted: true });
	});
