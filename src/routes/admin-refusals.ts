/**
 * `GET /admin/refusals`: the requests the gateway refused on its inference lanes (401, 402,
 * 429, 400, …), newest first, filterable by `status`, `code`, `key_id` and `since`, with each
 * key's name. Recorded within a per-isolate bound (observability/refusals.ts): a row's
 * `suppressed` counts the refusals its isolate left unrecorded just before it.
 */
import { Hono } from "hono";
import { cursorParam, intParam, timeParam } from "../api/list-params";
import type { AppEnv } from "../app-env";
import { encodePageCursor, pageOf } from "../db/page-cursor";
import { type ListedRefusal, listRefusals } from "../db/refusals";
import { GatewayError } from "../errors";

function refusalView(r: ListedRefusal) {
	return {
		object: "refusal",
		request_id: r.requestId,
		created_at: Math.floor(r.createdAt / 1000),
		status: r.status,
		code: r.code,
		message: r.message,
		lane: r.lane,
		key_id: r.keyId,
		key_name: r.keyName,
		model: r.model,
		suppressed: r.suppressed,
	};
}

function statusParam(raw: string | undefined): number | undefined {
	if (raw === undefined || raw === "") return undefined;
	const n = Number(raw);
	if (!Number.isInteger(n) || n < 400 || n > 499) {
		throw new GatewayError("invalid_request", "'status' must be an HTTP status from 400 to 499.", { param: "status" });
	}
	return n;
}

function textParam(raw: string | undefined, name: string): string | undefined {
	if (raw === undefined || raw === "") return undefined;
	if (raw.length > 128) throw new GatewayError("invalid_request", `'${name}' is too long.`, { param: name });
	return raw;
}

export const adminRefusals = new Hono<AppEnv>().get("/", async (c) => {
	const q = c.req.query();
	const limit = intParam(q.limit, "limit", 50, 200);
	const filter = {
		status: statusParam(q.status),
		code: textParam(q.code, "code"),
		keyId: textParam(q.key_id, "key_id"),
		since: timeParam(q.since, "since"),
	};
	const rows = await listRefusals(c.env.DB, filter, limit + 1, cursorParam(q.cursor));
	const { page, nextCursor } = pageOf(rows, limit, (r) => encodePageCursor(r.createdAt, r.requestId));
	return c.json({ object: "list", data: page.map(refusalView), next_cursor: nextCursor });
});
