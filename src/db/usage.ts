import { and, asc, desc, eq, gte, lt, or, sql } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import type { PageCursor } from "./page-cursor";
import { type UsageRow, usageRecords } from "./schema";
import { DAY_MS, HOUR_MS, type SummaryQuery, type SummaryRow } from "./usage-rollups";

export interface UsageQuery {
	/** Only this key's records. */
	keyId?: string;
	/** Only records of this served model. */
	model?: string;
	/** Only records of this end user. */
	endUser?: string;
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
						q.endUser !== undefined ? eq(usageRecords.endUser, q.endUser) : undefined,
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

		/**
		 * The summary by end user (`group_by=end_user`): summed from the raw records, as the hourly
		 * rollups are per key and model only, so it covers what retention has kept (maintenance/).
		 */
		async summaryByEndUser(q: SummaryQuery): Promise<SummaryRow[]> {
			const u = usageRecords;
			const unit = q.granularity === "day" ? DAY_MS : HOUR_MS;
			const period = sql<number>`(${u.createdAt} - (${u.createdAt} % ${unit}))`;
			const rows = await db
				.select({
					period,
					group: sql<string | null>`${u.endUser}`,
					requests: sql<number>`COUNT(*)`,
					promptTokens: sql<number>`SUM(${u.promptTokens})`,
					completionTokens: sql<number>`SUM(${u.completionTokens})`,
					costNanos: sql<number>`SUM(${u.costNanos})`,
					searchCount: sql<number>`SUM(${u.searchCount})`,
					cachedTokens: sql<number>`SUM(${u.cachedTokens})`,
				})
				.from(u)
				.where(
					and(
						gte(u.createdAt, q.since),
						lt(u.createdAt, q.until),
						q.keyId !== undefined ? eq(u.keyId, q.keyId) : undefined,
						q.model !== undefined ? eq(u.model, q.model) : undefined,
					),
				)
				.groupBy(period, u.endUser)
				.orderBy(asc(period), asc(u.endUser))
				.limit(q.limit)
				.all();
			return rows.map((r) => ({ ...r, period: Number(r.period) }));
		},
	};
}
