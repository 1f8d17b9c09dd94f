/**
 * The raw usage records' retention, run by the Cron Trigger (maintenance/scheduled.ts): records
 * older than `usage.retention_days` whole UTC days are deleted in bounded chunks; with an
 * archive they are first written to R2 as JSONL, and deleted only once that write succeeded.
 * The hourly rollups (usage_hourly) and the ledgers are never touched, so deleting raw records
 * changes no summary and no balance.
 */

import { usageView } from "../api/views";
import { loadConfig } from "../config";
import type { UsageRow } from "../db/schema";
import { archivePartKey, nextUtcDay, retentionCutoff } from "./retention-plan";

/** What the cleanup reads; `USAGE_ARCHIVE` is an optional R2 binding (commented out in wrangler.toml). */
export type RetentionEnv = Pick<Env, "DB" | "GATEWAY_CONFIG"> & { USAGE_ARCHIVE?: R2Bucket };

export interface RetentionBudget {
	/** Rows deleted per statement (without an archive) and read per archive part (with one). */
	chunkRows: number;
	/** Most rows one run deletes: later runs go on where this one stopped. */
	maxRows: number;
	/** No new chunk starts after this long (wall clock; D1 waits are not CPU time). */
	maxMs: number;
}

/**
 * One hourly run deletes up to 2M rows, several times the 360k rows an hour that 100 requests/s
 * produce, so a backlog (a first run, a shortened retention) drains over a few runs. Each
 * statement touches at most 10k rows, so the gateway's own flushes never wait long on D1.
 */
export const DEFAULT_BUDGET: RetentionBudget = { chunkRows: 10_000, maxRows: 2_000_000, maxMs: 120_000 };

/** Ids per delete statement: one JSON array parameter, well below D1's statement and parameter limits. */
const IDS_PER_DELETE = 1_000;

export interface RetentionReport {
	/** Records created before this instant (unix ms) are past retention. */
	cutoff: number;
	deleted: number;
	/** R2 objects written this run. */
	archived: string[];
	/** True when nothing past retention is left. */
	done: boolean;
	/** Why the run deleted nothing it otherwise would have (archive required but unbound, or an archive write failed). */
	error?: string;
}

/** Deletes (after archiving, when configured) the raw usage records past retention, within `budget`. */
export async function enforceRetention(
	env: RetentionEnv,
	now: number,
	budget: RetentionBudget = DEFAULT_BUDGET,
): Promise<RetentionReport> {
	const usage = loadConfig(env.GATEWAY_CONFIG).usage;
	const cutoff = retentionCutoff(now, usage.retention_days);
	const bucket = env.USAGE_ARCHIVE;
	if (usage.archive === "r2" && !bucket) {
		return {
			cutoff,
			deleted: 0,
			archived: [],
			done: false,
			error: 'usage.archive is "r2" but no USAGE_ARCHIVE R2 bucket is bound: no usage record was deleted.',
		};
	}
	return bucket ? archiveAndDelete(env.DB, bucket, cutoff, budget) : deleteOnly(env.DB, cutoff, budget);
}

const DELETE_CHUNK = `DELETE FROM usage_records WHERE rowid IN
	(SELECT rowid FROM usage_records WHERE created_at < ?1 ORDER BY created_at LIMIT ?2)`;

async function deleteOnly(d1: D1Database, cutoff: number, budget: RetentionBudget): Promise<RetentionReport> {
	const deadline = Date.now() + budget.maxMs;
	let deleted = 0;
	while (deleted < budget.maxRows && Date.now() < deadline) {
		const limit = Math.min(budget.chunkRows, budget.maxRows - deleted);
		const { meta } = await d1.prepare(DELETE_CHUNK).bind(cutoff, limit).run();
		deleted += meta.changes;
		if (meta.changes < limit) return { cutoff, deleted, archived: [], done: true };
	}
	return { cutoff, deleted, archived: [], done: await nothingBefore(d1, cutoff) };
}

const OLDEST_PART = `SELECT * FROM usage_records WHERE created_at < ?1 ORDER BY created_at, request_id LIMIT ?2`;
const DELETE_IDS = "DELETE FROM usage_records WHERE request_id IN (SELECT value FROM json_each(?1))";

/** A stored row (snake_case columns) as the drizzle row the admin API's view takes. */
function toUsageRow(r: Record<string, unknown>): UsageRow {
	return {
		requestId: r.request_id as string,
		keyId: r.key_id as string,
		model: r.model as string,
		requestedModel: (r.requested_model as string | null) ?? null,
		node: (r.node as string | null) ?? null,
		promptTokens: r.prompt_tokens as number,
		completionTokens: r.completion_tokens as number,
		costNanos: r.cost_nanos as number,
		status: r.status as string,
		estimated: Boolean(r.estimated),
		searchCount: r.search_count as number,
		cachedTokens: (r.cached_tokens as number | null) ?? 0,
		toolCallsRepaired: (r.tool_calls_repaired as number | null) ?? 0,
		createdAt: r.created_at as number,
		lane: (r.lane as string | null) ?? null,
		endUser: (r.end_user as string | null) ?? null,
		flushId: (r.flush_id as number | null) ?? null,
		batchId: (r.batch_id as string | null) ?? null,
		customId: (r.custom_id as string | null) ?? null,
	};
}

/** One archive line: the record as `GET /admin/usage` shows it, plus its creation time in ms. */
function archiveLine(row: UsageRow): string {
	return JSON.stringify({ ...usageView(row), created_at_ms: row.createdAt });
}

/**
 * Oldest first, a part at a time: read up to `chunkRows` records of one UTC day, write them to R2,
 * then delete exactly those records (by request id, in one batch). A failed write stops the run
 * with nothing of that part deleted; the next run writes the same part again (same key).
 */
async function archiveAndDelete(
	d1: D1Database,
	bucket: R2Bucket,
	cutoff: number,
	budget: RetentionBudget,
): Promise<RetentionReport> {
	const deadline = Date.now() + budget.maxMs;
	const archived: string[] = [];
	let deleted = 0;
	while (deleted < budget.maxRows && Date.now() < deadline) {
		const limit = Math.min(budget.chunkRows, budget.maxRows - deleted);
		const { results } = await d1.prepare(OLDEST_PART).bind(cutoff, limit).all<Record<string, unknown>>();
		const all = results.map(toUsageRow);
		const first = all[0];
		if (!first) return { cutoff, deleted, archived, done: true };
		// A part holds one UTC day's records, so each day's folder is complete once its day is deleted.
		const dayEnd = nextUtcDay(first.createdAt);
		const rows = all.filter((r) => r.createdAt < dayEnd);
		const key = archivePartKey(first);
		try {
			await bucket.put(key, `${rows.map(archiveLine).join("\n")}\n`, {
				httpMetadata: { contentType: "application/x-ndjson" },
				customMetadata: { records: String(rows.length) },
			});
		} catch (err) {
			const error = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
			console.error(
				JSON.stringify({
					level: "error",
					message: "usage archive write failed; its records were kept",
					key,
					error: error.slice(0, 500),
				}),
			);
			return { cutoff, deleted, archived, done: false, error: `archive write failed: ${key}` };
		}
		archived.push(key);
		const statements: D1PreparedStatement[] = [];
		for (let i = 0; i < rows.length; i += IDS_PER_DELETE) {
			const ids = rows.slice(i, i + IDS_PER_DELETE).map((r) => r.requestId);
			statements.push(d1.prepare(DELETE_IDS).bind(JSON.stringify(ids)));
		}
		const out = await d1.batch(statements);
		deleted += out.reduce((n, r) => n + r.meta.changes, 0);
		if (all.length < limit && rows.length === all.length) return { cutoff, deleted, archived, done: true };
	}
	return { cutoff, deleted, archived, done: await nothingBefore(d1, cutoff) };
}

async function nothingBefore(d1: D1Database, cutoff: number): Promise<boolean> {
	const row = await d1.prepare("SELECT 1 AS x FROM usage_records WHERE created_at < ?1 LIMIT 1").bind(cutoff).first();
	return row === null;
}
