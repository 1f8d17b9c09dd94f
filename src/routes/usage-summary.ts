/**
 * GET /admin/usage/summary: usage per hour or UTC day, optionally per model or per paying key,
 * summed in D1 from the hourly rollups (db/usage-rollups.ts), which outlive the raw records.
 */
import type { Context } from "hono";
import { timeParam } from "../api/list-params";
import { type UsageSummaryQuery, usageSummaryQuery } from "../api/usage-query";
import type { AppEnv } from "../app-env";
import { usageStore } from "../db/usage";
import { DAY_MS, type Granularity, HOUR_MS, type SummaryRow, usageRollups } from "../db/usage-rollups";
import { GatewayError } from "../errors";
import { zodToGatewayError } from "../http/zod-error";
import { nanosToUsd } from "../money/pricing";

const UNIT_MS: Record<Granularity, number> = { hour: HOUR_MS, day: DAY_MS };
/** The window when `since` is absent. */
export const DEFAULT_WINDOW_MS: Record<Granularity, number> = { hour: DAY_MS, day: 30 * DAY_MS };
/** The longest window: 9,600 hourly or 3,660 daily periods, so an ungrouped summary never reaches MAX_ROWS. */
export const MAX_WINDOW_MS: Record<Granularity, number> = { hour: 400 * DAY_MS, day: 3660 * DAY_MS };
/** The most rows one summary returns; a grouped summary with more is refused (narrow it). */
export const MAX_ROWS = 10_000;

/**
 * The window a summary covers: `until` (default `now`) rounded up and `since` (default the
 * granularity's default window before that) rounded down to whole buckets, so every period
 * returned is whole. Unix ms; throws the 400 naming the parameter that is wrong.
 */
export function summaryWindow(
	q: { since?: number; until?: number; granularity: Granularity },
	now: number,
): { since: number; until: number } {
	const unit = UNIT_MS[q.granularity];
	const rawUntil = q.until ?? now;
	const until = Math.ceil(rawUntil / unit) * unit;
	const rawSince = q.since ?? until - DEFAULT_WINDOW_MS[q.granularity];
	if (rawSince >= rawUntil) {
		throw new GatewayError(
			"invalid_request",
			q.until === undefined
				? "'since' must be in the past (before 'until', which defaults to now)."
				: "'since' must be before 'until'.",
			{ param: "since" },
		);
	}
	const since = Math.floor(rawSince / unit) * unit;
	if (until - since > MAX_WINDOW_MS[q.granularity]) {
		const days = MAX_WINDOW_MS[q.granularity] / DAY_MS;
		throw new GatewayError(
			"invalid_request",
			`The window from 'since' to 'until' is longer than ${days} days, the most a summary by ${q.granularity} covers${q.granularity === "hour" ? " (use granularity=day)" : ""}.`,
			{ param: "since" },
		);
	}
	return { since, until };
}

/** ISO 8601 UTC, whole seconds: `2026-05-01T13:00:00Z`. */
export function isoPeriod(ms: number): string {
	return new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** A summary row as the API shows it; `model` or `key_id` only when grouped by it. */
export function summaryRowView(r: SummaryRow, groupBy: UsageSummaryQuery["group_by"]) {
	return {
		period: isoPeriod(r.period),
		...(groupBy === "model"
			? { model: r.group }
			: groupBy === "key"
				? { key_id: r.group }
				: groupBy === "end_user"
					? { end_user: r.group }
					: {}),
		requests: r.requests,
		prompt_tokens: r.promptTokens,
		completion_tokens: r.completionTokens,
		total_tokens: r.promptTokens + r.completionTokens,
		cost_usd: nanosToUsd(r.costNanos),
		cost_nanos: r.costNanos,
		search_count: r.searchCount,
		cached_tokens: r.cachedTokens,
		/** The share of prompt tokens served from the engines' prefix caches. */
		cache_hit_rate: r.promptTokens > 0 ? Number((r.cachedTokens / r.promptTokens).toFixed(4)) : 0,
	};
}

/** GET /admin/usage/summary (mounted under the admin router, behind its token). */
export async function usageSummary(c: Context<AppEnv>): Promise<Response> {
	// An empty parameter (`key_id=`, as a form with no filter chosen sends it) is an absent one.
	const raw = Object.fromEntries(Object.entries(c.req.query()).filter(([, v]) => v !== ""));
	const parsed = usageSummaryQuery.safeParse(raw, { reportInput: true });
	if (!parsed.success) throw zodToGatewayError(parsed.error);
	const q = parsed.data;
	const { since, until } = summaryWindow(
		{ since: timeParam(q.since, "since"), until: timeParam(q.until, "until"), granularity: q.granularity },
		Date.now(),
	);
	const summary = {
		since,
		until,
		granularity: q.granularity,
		groupBy: q.group_by,
		keyId: q.key_id,
		model: q.model,
		limit: MAX_ROWS + 1,
	};
	// The rollups have no end user: that breakdown is read from the usage records (db/usage.ts).
	const rows =
		q.group_by === "end_user"
			? await usageStore(c.env.DB).summaryByEndUser(summary)
			: await usageRollups(c.env.DB).summary(summary);
	if (rows.length > MAX_ROWS) {
		throw new GatewayError(
			"invalid_request",
			`The summary has more than ${MAX_ROWS} rows: narrow the window, filter by key_id or model, or use granularity=day.`,
			{ param: q.group_by ? "group_by" : "since" },
		);
	}
	return c.json({
		object: "list",
		granularity: q.granularity,
		group_by: q.group_by ?? null,
		since: isoPeriod(since),
		until: isoPeriod(until),
		data: rows.map((r) => summaryRowView(r, q.group_by)),
	});
}
