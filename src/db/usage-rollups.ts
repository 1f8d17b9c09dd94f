import { and, asc, eq, gte, lt, sql } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import { usageHourly } from "./schema";

export const HOUR_MS = 3_600_000;
export const DAY_MS = 24 * HOUR_MS;

export type Granularity = "hour" | "day";
export type SummaryGroup = "model" | "key" | "end_user";

export interface SummaryQuery {
	/** Bucket-aligned window, unix ms: periods starting at or after `since` and before `until`. */
	since: number;
	until: number;
	granularity: Granularity;
	groupBy?: SummaryGroup;
	/** Only this paying key's usage. */
	keyId?: string;
	/** Only this served model's usage. */
	model?: string;
	/** Most rows returned. */
	limit: number;
}

export interface SummaryRow {
	/** The bucket's start, unix ms. */
	period: number;
	/** The group's value (a model id or a key id) when grouped, else null. */
	group: string | null;
	requests: number;
	promptTokens: number;
	completionTokens: number;
	costNanos: number;
	searchCount: number;
	cachedTokens: number;
}

/**
 * The hourly rollups (usage_hourly), written by the outbox flush (ledger/durable/usage-flush.ts) and never by
 * anything else; the summary API reads them here. Sums of integers, so they are exact.
 */
export function usageRollups(d1: D1Database) {
	const db = drizzle(d1);
	const h = usageHourly;
	return {
		async summary(q: SummaryQuery): Promise<SummaryRow[]> {
			// Hours are stored as their start in unix ms: a UTC day's start is the hour less its remainder.
			const period = q.granularity === "day" ? sql<number>`(${h.hour} - (${h.hour} % ${DAY_MS}))` : sql<number>`${h.hour}`;
			const group = q.groupBy === "model" ? h.model : q.groupBy === "key" ? h.keyId : undefined;
			const groupCol = group ? sql<string | null>`${group}` : sql<string | null>`NULL`;
			const rows = await db
				.select({
					period,
					group: groupCol,
					requests: sql<number>`SUM(${h.requests})`,
					promptTokens: sql<number>`SUM(${h.promptTokens})`,
					completionTokens: sql<number>`SUM(${h.completionTokens})`,
					costNanos: sql<number>`SUM(${h.costNanos})`,
					searchCount: sql<number>`SUM(${h.searchCount})`,
					cachedTokens: sql<number>`SUM(${h.cachedTokens})`,
				})
				.from(h)
				.where(
					and(
						gte(h.hour, q.since),
						lt(h.hour, q.until),
						q.keyId !== undefined ? eq(h.keyId, q.keyId) : undefined,
						q.model !== undefined ? eq(h.model, q.model) : undefined,
					),
				)
				.groupBy(...(group ? [period, group] : [period]))
				.orderBy(...(group ? [asc(period), asc(group)] : [asc(period)]))
				.limit(q.limit)
				.all();
			return rows.map((r) => ({ ...r, period: Number(r.period) }));
		},
	};
}
