import type { Context } from "hono";
import { cursorParam, intParam, timeParam } from "../api/list-params";
import { usageView } from "../api/views";
import type { AppEnv } from "../app-env";
import { encodePageCursor, pageOf } from "../db/page-cursor";
import { usageStore } from "../db/usage";

export { usageSummary } from "./usage-summary";

/** GET /admin/usage: usage records, newest first, by key, model and time (`since` inclusive, `until` exclusive), a page at a time. */
export async function listUsage(c: Context<AppEnv>): Promise<Response> {
	const limit = intParam(c.req.query("limit"), "limit", 100, 1000);
	const keyId = c.req.query("key_id") || undefined;
	const model = c.req.query("model") || undefined;
	const endUser = c.req.query("end_user") || undefined;
	const since = timeParam(c.req.query("since"), "since");
	const until = timeParam(c.req.query("until"), "until");
	const before = cursorParam(c.req.query("cursor"));
	const rows = await usageStore(c.env.DB).list({ keyId, model, endUser, since, until, before, limit: limit + 1 });
	const { page, nextCursor } = pageOf(rows, limit, (r) => encodePageCursor(r.createdAt, r.requestId));
	return c.json({ object: "list", data: page.map(usageView), next_cursor: nextCursor });
}
