import { drizzle } from "drizzle-orm/d1";
import { usageRecords } from "../db/schema";
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

/**
 * Writes outbox records to D1 in one batch. `INSERT OR IGNORE` by request id makes a retry
 * after a partial failure (or a flush that succeeded but whose reply was lost) harmless.
 */
export async function flushOutbox(d1: D1Database, records: UsageRecordInput[]): Promise<void> {
	if (records.length === 0) return;
	const db = drizzle(d1);
	const statements = records.map((r) =>
		db
			.insert(usageRecords)
			.values({
				requestId: r.request_id as string,
				keyId: r.key_id,
				model: r.model,
				node: r.node,
				promptTokens: r.prompt_tokens,
				completionTokens: r.completion_tokens,
				costNanos: r.cost_nanos ?? 0,
				status: r.status,
				estimated: r.estimated,
				searchCount: r.search_count ?? 0,
				createdAt: r.created_at ?? Date.now(),
			})
			.onConflictDoNothing(),
	);
	await db.batch(statements as [(typeof statements)[number], ...typeof statements]);
}
