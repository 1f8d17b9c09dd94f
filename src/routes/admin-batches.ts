/**
 * `GET /admin/batches`: every key's batches, OpenAI's and Anthropic's, newest first, for the
 * console's Batches view (status, progress, cost so far); `?status=`, `?key_id=`, `?after=` (an
 * id from a previous page), `?limit=` (1-200, 50). `POST /admin/batches/:id/cancel`: cancels any
 * key's batch as its owner's cancel does (queued lines end cancelled and cost nothing, running
 * ones finish). Mounted under the admin routes (admin token).
 */
import { Hono } from "hono";
import type { AppEnv } from "../app-env";
import { MESSAGES_ENDPOINT, messageBatchId } from "../batches/anthropic-objects";
import { dispatcherFor } from "../batches/create";
import { messageBatchesStore } from "../db/message-batches";
import type { BatchRow } from "../db/schema";
import { GatewayError } from "../errors";
import { nanosToUsd } from "../money/pricing";
import { batchLane, listLimit } from "./batch-lane";

const secs = (ms: number | null | undefined): number | null => (ms === null || ms === undefined ? null : Math.floor(ms / 1000));

/** A batch as the console shows it: which API, whose, how far, what it cost so far. */
export function adminBatchView(b: BatchRow) {
	const anthropic = b.endpoint === MESSAGES_ENDPOINT;
	return {
		id: b.id,
		/** The id its owner's API knows it by (`msgbatch_…` for a Message Batch). */
		api_id: anthropic ? messageBatchId(b.id) : b.id,
		api: anthropic ? ("anthropic" as const) : ("openai" as const),
		key_id: b.keyId,
		model: b.model,
		endpoint: b.endpoint,
		status: b.status,
		request_counts: { total: b.total, completed: b.completed, failed: b.failed },
		cost_usd: nanosToUsd(b.costNanos),
		created_at: secs(b.createdAt),
		expires_at: secs(b.expiresAt),
		ended_at: secs(b.times?.completed ?? b.times?.cancelled ?? b.times?.expired ?? b.times?.failed),
	};
}

export const adminBatches = new Hono<AppEnv>()
	.get("/", async (c) => {
		batchLane(c);
		const limit = c.req.query("limit") === undefined ? 50 : listLimit(c.req.query("limit"), 200);
		const page = await messageBatchesStore(c.env.DB).all({
			limit,
			after: c.req.query("after") || undefined,
			status: c.req.query("status") || undefined,
			keyId: c.req.query("key_id") || undefined,
		});
		const data = page.rows.map(adminBatchView);
		return c.json({ object: "list", data, has_more: page.hasMore, last_id: data[data.length - 1]?.id ?? null });
	})
	.post("/:id/cancel", async (c) => {
		batchLane(c);
		const store = messageBatchesStore(c.env.DB);
		const id = c.req.param("id");
		const row = await store.byId(id);
		if (!row) throw new GatewayError("not_found", `No batch with id '${id}'.`, { param: "id" });
		if (row.status === "in_progress" || row.status === "validating")
			await dispatcherFor(c.env, row.model).cancel(row.id, row.keyId);
		return c.json(adminBatchView((await store.byId(id)) ?? row));
	});
