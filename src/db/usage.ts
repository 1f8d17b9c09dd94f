import { and, desc, eq, gte, lt, or } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import type { PageCursor } from "./page-cursor";
import { type UsageRow, usageRecords } from "./schema";

export interface UsageQuery {
	/** Only this key's records. */
	keyId?: string;
	/** Only records of this served model. */
	model?: string;
	/** Only records created at or after this time (unix ms). */
	since?: number;
	/** Only records created before this time (unix ms). */
	until?: number;
	/** The cursor of the last row of the previous page (`id` is its request id). */
	before?: PageCursor;
	limit: number;
}

/** Usage records are written by the ledgers' outboxes (ledger/durable/usage-flush.ts); the admin API only reads them. */
export function usageStore(d1: D1Database) {
	const db = drizzle(d1);
	return {
		/** Newest first, ties on created_at broken by request id, so a page boundary neither skips nor repeats a row. */
		async list(q: UsageQuery): Promise<UsageRow[]> {
			const { before } = q;
			return db
				.select()
				.from(usageRecords)
				.where(
					and(
						q.keyId ? eq(usageRecords.keyId, q.keyId) : undefined,
						q.model !== undefined ? eq(usageRecords.model, q.model) : undefined,
						q.since !== undefined ? gte(usageRecords.createdAt, q.since) : undefined,
						q.until !== undefined ? lt(usageRecords.createdAt, q.until) : undefined,
						before
							? or(
									lt(usageRecords.createdAt, before.createdAt),
									and(eq(usageRecords.createdAt, before.createdAt), lt(usageRecords.requestId, before.id)),
								)
							: undefined,
					),
				)
				.orderBy(desc(usageRecords.createdAt), desc(usageRecords.requestId))
				.limit(q.limit)
				.all();
		},
	};
}
