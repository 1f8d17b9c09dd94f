import { HOUR_MS } from "../../db/usage-rollups";
import type { SettleStatus } from "../../types";

/** A usage record as the ledger keeps it in its outbox (snake_case, as the admin API shows it). */
export interface UsageRecordInput {
	request_id?: string;
	key_id: string;
	/** The model that served (its prices were billed). */
	model: string;
	/** The model the client asked for (differs from `model` when a fallback served); absent on older records. */
	requested_model?: string | null;
	node: string | null;
	prompt_tokens: number;
	completion_tokens: number;
	cost_nanos?: number;
	status: SettleStatus;
	estimated: boolean;
	search_count?: number;
	/** Prompt tokens served from the engine's prefix cache (billed at the cached-input price). */
	cached_tokens?: number;
	/** Tool calls whose arguments the gateway repaired. */
	tool_calls_repaired?: number;
	created_at?: number;
	/** The API the request came in on (chat, completions, embeddings, responses, messages); absent on older records. */
	lane?: string | null;
	/** The end user the request named (auth/scopes.ts `endUserOf`, bounded); absent when none. */
	end_user?: string | null;
	/** A batch line's batch id and `custom_id`; absent on interactive requests. */
	batch_id?: string | null;
	custom_id?: string | null;
}

// One insert per flush, whatever its size: the records go as one JSON array parameter and
// SQLite unpacks them (json_each), so D1 parses and plans one statement instead of one per
// handful of rows (D1 binds at most 100 parameters per statement). Column names follow
// src/db/schema.ts (usage_records). Each new row is stamped with the attempt's flush id (?3).
const INSERT_FROM_JSON = `INSERT INTO usage_records
	(request_id, key_id, model, requested_model, node, prompt_tokens, completion_tokens, cost_nanos, status, estimated, search_count, created_at, flush_id, lane, cached_tokens, tool_calls_repaired, end_user, batch_id, custom_id)
SELECT
	json_extract(value, '$.request_id'), json_extract(value, '$.key_id'), json_extract(value, '$.model'),
	json_extract(value, '$.requested_model'), json_extract(value, '$.node'), json_extract(value, '$.prompt_tokens'), json_extract(value, '$.completion_tokens'),
	COALESCE(json_extract(value, '$.cost_nanos'), 0), json_extract(value, '$.status'),
	CASE WHEN json_extract(value, '$.estimated') THEN 1 ELSE 0 END, COALESCE(json_extract(value, '$.search_count'), 0),
	COALESCE(json_extract(value, '$.created_at'), ?2), ?3, json_extract(value, '$.lane'),
	COALESCE(json_extract(value, '$.cached_tokens'), 0), COALESCE(json_extract(value, '$.tool_calls_repaired'), 0),
	json_extract(value, '$.end_user'), json_extract(value, '$.batch_id'), json_extract(value, '$.custom_id')
FROM json_each(?1) WHERE true
ON CONFLICT (request_id) DO NOTHING`;

// The rows this attempt just inserted, found by primary key (the batch's request ids, ?1, a JSON
// array of strings: a fifth of the records' size, so D1 is not sent and does not parse the records
// twice) and kept only when they carry this attempt's flush id: a row an earlier attempt inserted
// (its reply lost) carries that attempt's id and is not counted again. Summed into the hourly rollups.
const ROLLUP_FLUSHED = `INSERT INTO usage_hourly
	(hour, key_id, model, requests, prompt_tokens, completion_tokens, cost_nanos, search_count, cached_tokens)
SELECT created_at - (created_at % ${HOUR_MS}), key_id, model, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(cost_nanos), SUM(search_count), SUM(cached_tokens)
FROM usage_records
WHERE request_id IN (SELECT value FROM json_each(?1)) AND flush_id = ?2
GROUP BY 1, 2, 3
ON CONFLICT (hour, key_id, model) DO UPDATE SET
	requests = requests + excluded.requests,
	prompt_tokens = prompt_tokens + excluded.prompt_tokens,
	completion_tokens = completion_tokens + excluded.completion_tokens,
	cost_nanos = cost_nanos + excluded.cost_nanos,
	search_count = search_count + excluded.search_count,
	cached_tokens = cached_tokens + excluded.cached_tokens`;

/** A fresh random id per flush attempt: 53 random bits, a safe integer, never 0. */
export function newFlushId(): number {
	const [hi = 0, lo = 0] = crypto.getRandomValues(new Uint32Array(2));
	return (hi & 0x1fffff) * 2 ** 32 + lo || 1;
}

/**
 * Writes outbox records, each the JSON text of a `UsageRecordInput` as the ledger stores it, to
 * D1, and adds the newly inserted ones to the hourly rollups, in one batch (a transaction: the
 * rollups always add up to the records). `requestIds` is the JSON array of the records'
 * `request_id`s, in any order. `ON CONFLICT DO NOTHING` by request id and the per-attempt flush id
 * make a retry after a flush whose reply was lost harmless to both.
 */
export async function flushOutboxJson(d1: D1Database, records: string[], requestIds: string): Promise<void> {
	if (records.length === 0) return;
	const flushId = newFlushId();
	await d1.batch([
		d1.prepare(INSERT_FROM_JSON).bind(`[${records.join(",")}]`, Date.now(), flushId),
		d1.prepare(ROLLUP_FLUSHED).bind(requestIds, flushId),
	]);
}

/** `flushOutboxJson` for records as objects. */
export function flushOutbox(d1: D1Database, records: UsageRecordInput[]): Promise<void> {
	return flushOutboxJson(
		d1,
		records.map((r) => JSON.stringify(r)),
		JSON.stringify(records.map((r) => r.request_id ?? null)),
	);
}
