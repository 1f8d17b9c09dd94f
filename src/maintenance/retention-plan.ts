/**
 * Pure arithmetic of the raw usage records' retention: which records are old enough to go,
 * and where a day's records are archived. No I/O; `now` is a parameter.
 */
import { DAY_MS } from "../db/usage-rollups";

/**
 * Records created before this instant (unix ms) are past their retention: the start of the UTC
 * day `retentionDays` before `now`. Whole days, so an export always covers whole UTC days and a
 * record is kept at least `retentionDays` and less than `retentionDays + 1` days.
 */
export function retentionCutoff(now: number, retentionDays: number): number {
	return Math.floor((now - retentionDays * DAY_MS) / DAY_MS) * DAY_MS;
}

/** The UTC day (`YYYY-MM-DD`) of a unix ms instant. */
export function utcDay(ms: number): string {
	return new Date(ms).toISOString().slice(0, 10);
}

/** Start of the UTC day after the one holding `ms`. */
export function nextUtcDay(ms: number): number {
	return (Math.floor(ms / DAY_MS) + 1) * DAY_MS;
}

/**
 * The R2 key of an archive part: `usage/<UTC day>/<first record's created_at ms, 13 digits>-<its request id>.jsonl`.
 * Named by its first record, so a part written again after a failed delete overwrites itself,
 * and listing a day's folder gives its parts in time order.
 */
export function archivePartKey(first: { createdAt: number; requestId: string }): string {
	return `usage/${utcDay(first.createdAt)}/${String(first.createdAt).padStart(13, "0")}-${first.requestId}.jsonl`;
}
