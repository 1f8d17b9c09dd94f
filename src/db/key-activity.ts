/**
 * What the console shows of a key's use beside its money: when it was last used and how many
 * requests it paid for today (UTC), for a page of keys at once. Read from the usage records (the
 * newest per key, through the (key_id, created_at) index) and today's hourly rollups; both are
 * written by the ledger's outbox flush, so they trail a request by the flush's delay (seconds).
 */
import { DAY_MS } from "./usage-rollups";

export interface KeyActivity {
	/** Unix ms of the key's newest usage record (or its newest rollup hour once records aged out); null if never used. */
	lastUsedAt: number | null;
	requestsToday: number;
}

const LAST_USED = `SELECT k.value AS key_id,
	(SELECT MAX(created_at) FROM usage_records u WHERE u.key_id = k.value) AS last_record,
	(SELECT MAX(hour) FROM usage_hourly h WHERE h.key_id = k.value) AS last_hour
	FROM json_each(?1) k`;

const TODAY = `SELECT key_id, SUM(requests) AS requests FROM usage_hourly
	WHERE hour >= ?2 AND key_id IN (SELECT value FROM json_each(?1)) GROUP BY key_id`;

export async function keyActivity(d1: D1Database, keyIds: string[], now: number): Promise<Map<string, KeyActivity>> {
	const out = new Map<string, KeyActivity>();
	if (!keyIds.length) return out;
	const ids = JSON.stringify(keyIds);
	const dayStart = Math.floor(now / DAY_MS) * DAY_MS;
	const [last, today] = await d1.batch<Record<string, unknown>>([
		d1.prepare(LAST_USED).bind(ids),
		d1.prepare(TODAY).bind(ids, dayStart),
	]);
	const requests = new Map((today?.results ?? []).map((r) => [r.key_id as string, Number(r.requests ?? 0)]));
	for (const r of last?.results ?? []) {
		const id = r.key_id as string;
		const lastUsedAt = (r.last_record as number | null) ?? (r.last_hour as number | null) ?? null;
		out.set(id, { lastUsedAt, requestsToday: requests.get(id) ?? 0 });
	}
	return out;
}
