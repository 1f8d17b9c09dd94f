/** `/v1/batches`: OpenAI's Batch API over the batch store (batches/create.ts). */
import { Hono } from "hono";
import { CreateBatchSchema } from "../api/batch-input";
import type { AppEnv } from "../app-env";
import { callerKeyId } from "../auth/scopes";
import { cancelBatch, createBatch, getBatch } from "../batches/create";
import { batchObject } from "../batches/objects";
import { batchesStore } from "../db/batches";
import { jsonBody } from "../http/json-body";
import { batchLane, listLimit, listPage } from "./batch-lane";

export const batchesRoutes = new Hono<AppEnv>()
	.post("/", jsonBody(CreateBatchSchema), async (c) => {
		const config = batchLane(c);
		const body = c.req.valid("json");
		const row = await createBatch(c.env, config, c.get("principal"), {
			inputFileId: body.input_file_id,
			endpoint: body.endpoint,
			completionWindow: body.completion_window,
			metadata: body.metadata ?? null,
		});
		return c.json(batchObject(row));
	})
	.get("/", async (c) => {
		batchLane(c);
		const limit = listLimit(c.req.query("limit"));
		const after = c.req.query("after");
		const rows = await batchesStore(c.env.DB).list(callerKeyId(c.get("principal")), { limit, ...(after ? { after } : {}) });
		return c.json(listPage(rows, limit, batchObject));
	})
	.get("/:id", async (c) => {
		batchLane(c);
		return c.json(batchObject(await getBatch(c.env, c.get("principal"), c.req.param("id"))));
	})
	.post("/:id/cancel", async (c) => {
		batchLane(c);
		return c.json(batchObject(await cancelBatch(c.env, c.get("principal"), c.req.param("id"))));
	});
