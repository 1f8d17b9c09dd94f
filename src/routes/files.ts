/**
 * `/v1/files` for the batch lane (OpenAI's Files API, purpose `batch`): the bytes in R2, the row in
 * D1, each file its key's alone. An upload is streamed into R2 as it arrives, never held whole.
 */
import { type Context, Hono } from "hono";
import type { AppEnv } from "../app-env";
import { callerKeyId } from "../auth/scopes";
import { fileKey } from "../batches/finalize";
import { JsonlLimits, LineTooLong, TooManyLines } from "../batches/jsonl";
import { MultipartError, multipartBoundary, readMultipart } from "../batches/multipart";
import { fileObject } from "../batches/objects";
import { R2PartWriter } from "../batches/r2-writer";
import { batchLineBytes, MAX_BATCH_LINES } from "../config-batches";
import { batchFilesStore } from "../db/batches";
import { GatewayError } from "../errors";
import { randomId } from "../ids";
import { batchLane, listLimit, listPage } from "./batch-lane";

function notFound(id: string): GatewayError {
	return new GatewayError("not_found", `No such File object: ${id}`, { param: "file_id" });
}

/** The part size an upload is written to R2 in: what one upload holds in memory. */
const UPLOAD_PART_BYTES = 5 * 1024 * 1024;
/** The most bytes of a form field other than the file (`purpose`). */
const MAX_FIELD_BYTES = 1024;

function tooLarge(max: number): GatewayError {
	return new GatewayError("request_too_large", `A file may be at most ${max} bytes.`, { param: "file" });
}

/**
 * Reads the multipart body as it arrives, the file part straight into R2 (one part of it in
 * memory), every limit checked on the way: the size, the lines, each line's size. A refusal
 * drops what was uploaded: nothing is stored until the body has been read whole and found good.
 */
async function receiveFile(c: Context<AppEnv>, maxBytes: number, maxLineBytes: number, key: string) {
	const boundary = multipartBoundary(c.req.header("content-type"));
	const body = c.req.raw.body;
	if (!boundary || !body)
		throw new GatewayError("invalid_request", "The body must be multipart/form-data with 'file' and 'purpose'.");
	const writer = new R2PartWriter(c.env.BATCH_FILES, key, UPLOAD_PART_BYTES);
	const limits = new JsonlLimits(maxLineBytes, MAX_BATCH_LINES);
	let purpose = "";
	let filename: string | null = null;
	let size = 0;
	try {
		await readMultipart(body, boundary, (part) => {
			if (part.name === "file" && filename === null) {
				filename = part.filename ?? "";
				return {
					data: async (chunk) => {
						size += chunk.length;
						if (size > maxBytes) throw tooLarge(maxBytes);
						limits.push(chunk);
						await writer.write(chunk);
					},
					end: () => limits.end(),
				};
			}
			const field = part.name === "purpose";
			return {
				data: (chunk) => {
					if (!field) return;
					if (purpose.length + chunk.length > MAX_FIELD_BYTES)
						throw new GatewayError("invalid_request", "'purpose' must be 'batch'.", { param: "purpose" });
					purpose += new TextDecoder().decode(chunk);
				},
				end: () => {},
			};
		});
		if (purpose !== "batch") throw new GatewayError("invalid_request", "'purpose' must be 'batch'.", { param: "purpose" });
		if (filename === null) throw new GatewayError("invalid_request", "'file' is required.", { param: "file" });
		return { filename: filename as string, bytes: await writer.finish() };
	} catch (err) {
		await writer.abort();
		if (err instanceof LineTooLong) throw new GatewayError("request_too_large", err.message, { param: "file" });
		if (err instanceof TooManyLines) throw new GatewayError("invalid_request", err.message, { param: "file" });
		if (err instanceof MultipartError)
			throw new GatewayError(
				"invalid_request",
				`The body must be multipart/form-data with 'file' and 'purpose' (${err.message}).`,
			);
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
		const id = randomId("file-", 12);
		const file = await receiveFile(c, config.batches.max_file_bytes, batchLineBytes(config.max_body_bytes), fileKey(id));
		const row = {
			id,
			keyId: callerKeyId(c.get("principal")),
			purpose: "batch",
			filename: file.filename || "input.jsonl",
			bytes: file.bytes,
			createdAt: Date.now(),
		};
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
