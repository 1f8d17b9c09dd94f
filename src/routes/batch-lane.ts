/** What the batch lane's routes (files.ts, batches.ts) share: the lane's switch and list limits. */
import type { Context } from "hono";
import type { AppEnv } from "../app-env";
import { loadConfig } from "../config";
import { GatewayError } from "../errors";

/** The lane's settings; 404 when the operator turned it off (`batches.enabled: false`). */
export function batchLane(c: Context<AppEnv>) {
	const config = loadConfig(c.env.GATEWAY_CONFIG);
	if (!config.batches.enabled) throw new GatewayError("not_found", "Unknown route.");
	return config;
}

/** OpenAI's list object of a page: `rows` holds up to `limit + 1`, the one past telling `has_more`. */
export function listPage<R, O extends { id: string }>(rows: R[], limit: number, toObject: (row: R) => O) {
	const data = rows.slice(0, limit).map(toObject);
	return {
		object: "list" as const,
		data,
		first_id: data[0]?.id ?? null,
		last_id: data[data.length - 1]?.id ?? null,
		has_more: rows.length > limit,
	};
}

/** `limit` of a list: 1 to `max`, 20 when absent. */
export function listLimit(raw: string | undefined, max = 100): number {
	if (raw === undefined) return 20;
	const n = /^\d{1,6}$/.test(raw) ? Number(raw) : Number.NaN;
	if (!Number.isInteger(n) || n < 1 || n > max)
		throw new GatewayError("invalid_request", `'limit' must be an integer between 1 and ${max}.`, { param: "limit" });
	return n;
}
