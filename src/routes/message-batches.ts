/**
 * `/v1/messages/batches`: Anthropic's Message Batches API over the batch store
 * (batches/message-batches.ts). Authenticated as /v1/messages is (`x-api-key` or Bearer); errors
 * in Anthropic's shape (its path is the Messages lane's: app.onError). A batch is its key's:
 * another key gets 404.
 */
import { type Context, Hono } from "hono";
import type { AppEnv } from "../app-env";
import { callerKeyId } from "../auth/scopes";
import { archivedAt, MESSAGES_ENDPOINT, messageBatchId, messageBatchObject, storeBatchId } from "../batches/anthropic-objects";
import {
	cancelMessageBatch,
	countsOf,
	createMessageBatch,
	deleteMessageBatch,
	getMessageBatch,
	resultsStream,
} from "../batches/message-batches";
import { loadConfig } from "../config";
import { messageBatchesStore } from "../db/message-batches";
import type { BatchRow } from "../db/schema";
import { readJsonBody } from "../http/read-json";
import { batchLane, listLimit } from "./batch-lane";

/** When the row's results were archived, by the config's retention. */
function archived(c: Context<AppEnv>, row: BatchRow): number | null {
	return archivedAt(row, loadConfig(c.env.GATEWAY_CONFIG).batches.retention_days, Date.now());
}

async function shown(c: Context<AppEnv>, row: BatchRow) {
	return messageBatchObject(row, await countsOf(c.env, row), new URL(c.req.url).origin, archived(c, row));
}

/** A cursor is a Message Batch id; the store pages by its own. */
function cursor(raw: string | undefined): string | undefined {
	if (raw === undefined || raw === "") return undefined;
	return storeBatchId(raw) ?? "none";
}

export const messageBatchesRoutes = new Hono<AppEnv>()
	.post("/", async (c) => {
		const config = batchLane(c);
		// The whole batch is one JSON body: bounded by the batch's own limit, not a request's.
		const body = await readJsonBody(c.req.raw, config.batches.max_file_bytes + 64 * 1024);
		const row = await createMessageBatch(c.env, config, c.get("principal"), body);
		return c.json(await shown(c, row));
	})
	.get("/", async (c) => {
		batchLane(c);
		const limit = listLimit(c.req.query("limit"), 1000);
		const page = await messageBatchesStore(c.env.DB).list(callerKeyId(c.get("principal")), MESSAGES_ENDPOINT, {
			limit,
			afterId: cursor(c.req.query("after_id")),
			beforeId: cursor(c.req.query("before_id")),
		});
		const data = await Promise.all(page.rows.map((r) => shown(c, r)));
		return c.json({
			data,
			has_more: page.hasMore,
			first_id: page.rows[0] ? messageBatchId(page.rows[0].id) : null,
			last_id: page.rows.length ? messageBatchId((page.rows[page.rows.length - 1] as BatchRow).id) : null,
		});
	})
	.get("/:id", async (c) => {
		batchLane(c);
		return c.json(await shown(c, await getMessageBatch(c.env, c.get("principal"), c.req.param("id"))));
	})
	.post("/:id/cancel", async (c) => {
		batchLane(c);
		return c.json(await shown(c, await cancelMessageBatch(c.env, c.get("principal"), c.req.param("id"))));
	})
	.get("/:id/results", async (c) => {
		batchLane(c);
		const row = await getMessageBatch(c.env, c.get("principal"), c.req.param("id"));
		return new Response(resultsStream(c.env, row, archived(c, row)), { headers: { "content-type": "application/x-jsonl" } });
	})
	.delete("/:id", async (c) => {
		batchLane(c);
		const id = c.req.param("id");
		await deleteMessageBatch(c.env, c.get("principal"), id);
		return c.json({ id, type: "message_batch_deleted" });
	});
