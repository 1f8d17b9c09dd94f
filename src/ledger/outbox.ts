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

// Plain prepared statements rather than the query builder: the flush runs for every settled
// request, and building each insert through drizzle cost more CPU than the write itself.
// Column names follow src/db/schema.ts (usage_records).
const COLUMNS =
	"request_id, key_id, model, node, prompt_tokens, completion_tokens, cost_nanos, status, estimated, search_count, created_at";
const PER_ROW = 11;
// D1 binds at most 100 parameters per statement: 9 rows of 11.
const ROWS_PER_STATEMENT = Math.floor(100 / PER_ROW);

function insertSql(rows: number): string {
	const tuple = `(${Array(PER_ROW).fill("?").join(", ")})`;
	return `INSERT INTO usage_records (${COLUMNS}) VALUES ${Array(rows).fill(tuple).join(", ")} ON CONFLICT (request_id) DO NOTHING`;
}

const FULL_INSERT = insertSql(ROWS_PER_STATEMENT);

function values(r: UsageRecordInput): unknown[] {
	return [
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
	];
}

/**
 * Writes outbox records to D1 in one batch of multi-row inserts. `ON CONFLICT DO NOTHING` by
 * request id makes a retry after a partial failure (or a flush that succeeded but whose reply
 * was lost) harmless.
 */
export async function flushOutbox(d1: D1Database, records: UsageRecordInput[]): Promise<void> {
	if (records.length === 0) return;
	const statements: D1PreparedStatement[] = [];
	for (let i = 0; i < records.length; i += ROWS_PER_STATEMENT) {
		const chunk = records.slice(i, i + ROWS_PER_STATEMENT);
		const sql = chunk.length === ROWS_PER_STATEMENT ? FULL_INSERT : insertSql(chunk.length);
		statements.push(d1.prepare(sql).bind(...chunk.flatMap(values)));
	}
	await d1.batch(statements);
}
