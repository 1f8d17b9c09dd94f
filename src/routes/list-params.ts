/** Query parameters of the admin listings (`GET /admin/keys`, `GET /admin/usage`). */
import { decodePageCursor, type PageCursor } from "../db/page-cursor";
import { GatewayError } from "../errors";

/** A listing's `cursor` query parameter: absent, or exactly a `next_cursor` this API made. */
export function cursorParam(raw: string | undefined): PageCursor | undefined {
	if (raw === undefined || raw === "") return undefined;
	const cursor = decodePageCursor(raw);
	if (!cursor) {
		throw new GatewayError("invalid_request", "Invalid 'cursor': pass the next_cursor of the previous page unchanged.", {
			param: "cursor",
		});
	}
	return cursor;
}

/** A positive integer parameter, `fallback` when absent, at most `max` (larger values are clamped). */
export function intParam(v: string | undefined, name: string, fallback: number, max: number): number {
	if (v === undefined) return fallback;
	const n = Number(v);
	if (!Number.isInteger(n) || n < 1)
		throw new GatewayError("invalid_request", `'${name}' must be a positive integer.`, { param: name });
	return Math.min(n, max);
}

/** `since`: unix seconds or an ISO 8601 date, as unix milliseconds. */
export function sinceParam(raw: string | undefined): number | undefined {
	if (raw === undefined) return undefined;
	const since = /^\d+$/.test(raw) ? Number(raw) * 1000 : Date.parse(raw);
	if (!Number.isSafeInteger(since))
		throw new GatewayError("invalid_request", "'since' must be unix seconds or an ISO 8601 date.", { param: "since" });
	return since;
}
