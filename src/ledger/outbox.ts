import type { SettleStatus } from "../types";

/** A usage record as the ledger keeps it in its outbox (snake_case, as the admin API shows it). */
export interface UsageRecordInput {
	request_id?: string;
	key_id: string;
	model: string;
	node: string | null;
	prompt_tokens: number;
	completion_tokens: number;
	cost_nanos?: number;
	status: SettleStatus;
	estimated: boolean;
	search_count?: number;
	created_at?: number;
}

// A prepared statement bound per record: the flush runs for every settled request, and
// building each insert through the query builder cost more CPU than the write itself.
// Column names follow src/db/schema.ts (usage_records).
const INSERT_USAGE = `INSERT INTO usage_records
	(request_id, key_id, model, node, prompt_tokens, completion_tokens, cost_nanos, status, estimated, search_count, created_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (request_id) DO NOTHING`;

/**
 * Writes outbox records to D1 in one batch. `INSERT OR IGNORE` by request id makes a retry
 * after a partial failure (or a flush that succeeded but whose reply was lost) harmless.
 */
export async function flushOutbox(d1: D1Database, records: UsageRecordInput[]): Promise<void> {
	if (records.length === 0) return;
	const insert = d1.prepare(INSERT_USAGE);
	await d1.batch(
		records.map((r) =>
			insert.bind(
				r.request_id,
				r.key_id,
				r.model,
				r.node,
				r.prompt_tokens,
				r.completion_tokens,
				r.cost_nanos ?? 0,
				r.status,
				r.estimated ? 1 : 0,
				r.search_count ?? 0,
				r.created_at ?? Date.now(),
			),
		),
	);
}
