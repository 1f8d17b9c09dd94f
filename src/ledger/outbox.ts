import type { SettleStatus } from "../types";

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
	created_at?: number;
}

// One statement per flush, whatever its size: the records go as one JSON array parameter and
// SQLite unpacks them (json_each), so D1 parses and plans one statement instead of one per
// handful of rows (D1 binds at most 100 parameters per statement). Column names follow
// src/db/schema.ts (usage_records).
const INSERT_FROM_JSON = `INSERT INTO usage_records
	(request_id, key_id, model, requested_model, node, prompt_tokens, completion_tokens, cost_nanos, status, estimated, search_count, created_at)
SELECT
	json_extract(value, '$.request_id'), json_extract(value, '$.key_id'), json_extract(value, '$.model'),
	json_extract(value, '$.requested_model'), json_extract(value, '$.node'), json_extract(value, '$.prompt_tokens'), json_extract(value, '$.completion_tokens'),
	COALESCE(json_extract(value, '$.cost_nanos'), 0), json_extract(value, '$.status'),
	CASE WHEN json_extract(value, '$.estimated') THEN 1 ELSE 0 END, COALESCE(json_extract(value, '$.search_count'), 0),
	COALESCE(json_extract(value, '$.created_at'), ?2)
FROM json_each(?1) WHERE true
ON CONFLICT (request_id) DO NOTHING`;

/**
 * Writes outbox records, each the JSON text of a `UsageRecordInput` as the ledger stores it, to
 * D1 in one statement. `ON CONFLICT DO NOTHING` by request id makes a retry after a flush whose
 * reply was lost harmless.
 */
export async function flushOutboxJson(d1: D1Database, records: string[]): Promise<void> {
	if (records.length === 0) return;
	await d1.batch([d1.prepare(INSERT_FROM_JSON).bind(`[${records.join(",")}]`, Date.now())]);
}

/** `flushOutboxJson` for records as objects. */
export function flushOutbox(d1: D1Database, records: UsageRecordInput[]): Promise<void> {
	return flushOutboxJson(
		d1,
		records.map((r) => JSON.stringify(r)),
	);
}
