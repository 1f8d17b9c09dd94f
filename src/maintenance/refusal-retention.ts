/**
 * The refused requests' retention (db/refusals.ts), run with the usage retention by the hourly
 * maintenance: rows older than `REFUSAL_RETENTION_DAYS` go, in bounded chunks. With each isolate
 * recording at most 30 a minute (observability/refusals.ts) the table stays small however many
 * requests are refused.
 */
import { deleteRefusalsBefore } from "../db/refusals";
import { DAY_MS } from "../db/usage-rollups";

export const REFUSAL_RETENTION_DAYS = 7;

const CHUNK_ROWS = 10_000;
const MAX_ROWS = 500_000;

/** Deletes refusals recorded before `now` less the retention; returns how many went. */
export async function pruneRefusals(d1: D1Database, now: number): Promise<number> {
	const cutoff = now - REFUSAL_RETENTION_DAYS * DAY_MS;
	let deleted = 0;
	while (deleted < MAX_ROWS) {
		const n = await deleteRefusalsBefore(d1, cutoff, CHUNK_ROWS);
		deleted += n;
		if (n < CHUNK_ROWS) break;
	}
	return deleted;
}
