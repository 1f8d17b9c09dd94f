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

/** ISO 8601 as the admin API reads it: a date, optionally a time (minutes or seconds, fractions) and a zone. */
const ISO_8601 = /^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?)?$/i;

/**
 * The first instant the admin API refuses: 9999-12-31T00:00:00Z. Every time before it, rounded up
 * to a whole hour or day (as the usage summary rounds `until`), still has a four-digit year, so
 * it prints as ISO 8601 (`toISOString` writes `+010000-…` past 9999 and throws past year 275760).
 */
export const TIME_LIMIT_MS = Date.UTC(9999, 11, 31);

/**
 * Unix seconds or an ISO 8601 date, as unix milliseconds; undefined for anything else (a 30
 * February too) and for times before 1970 or from 9999-12-31 on (`TIME_LIMIT_MS`).
 */
export function parseTime(raw: string): number | undefined {
	const ms = /^\d{1,15}$/.test(raw) ? Number(raw) * 1000 : ISO_8601.test(raw) && realDate(raw) ? Date.parse(raw) : Number.NaN;
	return Number.isSafeInteger(ms) && ms >= 0 && ms < TIME_LIMIT_MS ? ms : undefined;
}

/** Whether the calendar date an ISO 8601 string starts with exists (Date.parse rolls 2026-02-30 over to March). */
function realDate(iso: string): boolean {
	const y = Number(iso.slice(0, 4));
	const m = Number(iso.slice(5, 7));
	const d = Number(iso.slice(8, 10));
	const day = new Date(Date.UTC(y, m - 1, d));
	return day.getUTCFullYear() === y && day.getUTCMonth() === m - 1 && day.getUTCDate() === d;
}

/** A time query parameter (`since`, `until`): absent, or unix seconds or an ISO 8601 date, as unix ms; else a 400 naming it. */
export function timeParam(raw: string | undefined, name: string): number | undefined {
	if (raw === undefined) return undefined;
	const ms = parseTime(raw);
	if (ms === undefined)
		throw new GatewayError(
			"invalid_request",
			`'${name}' must be unix seconds or an ISO 8601 date, from 1970 up to (not including) 9999-12-31.`,
			{ param: name },
		);
	return ms;
}
