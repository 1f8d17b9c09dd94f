/**
 * The hourly maintenance: the raw usage records' retention. The Cron Trigger in wrangler.toml runs
 * it through the worker's `scheduled` handler; `POST /admin/maintenance/run` runs the same job on
 * demand (locally, where `wrangler dev` cannot fire the cron, or to drain a backlog). A run that
 * could not delete what it should is logged; the scheduled one then throws, so the Cron Trigger
 * shows as failed in the dashboard, and the next run tries again.
 */

import { type BatchRetentionEnv, deleteOldBatchFiles } from "./batch-retention";
import { pruneRefusals } from "./refusal-retention";
import { enforceRetention, type RetentionBudget, type RetentionEnv, type RetentionReport } from "./retention";

/** Runs the retention once at `now` and writes its one JSON log line (Workers Logs, `wrangler tail`). */
export async function runMaintenance(
	env: RetentionEnv & BatchRetentionEnv,
	now: number,
	budget?: RetentionBudget,
): Promise<RetentionReport & { refusalsDeleted: number; batchFilesDeleted: number }> {
	const report = { ...(await enforceRetention(env, now, budget)), refusalsDeleted: await pruneRefusals(env.DB, now) };
	// The batch lane's files past `batches.retention_days` (maintenance/batch-retention.ts).
	const batchFilesDeleted = await deleteOldBatchFiles(env, now);
	const line = {
		message: "usage retention",
		refused_requests_deleted: report.refusalsDeleted,
		cutoff: new Date(report.cutoff).toISOString(),
		deleted: report.deleted,
		archived_parts: report.archived.length,
		done: report.done,
		batch_files_deleted: batchFilesDeleted,
		...(report.error ? { level: "error", error: report.error } : {}),
	};
	if (report.error) console.error(JSON.stringify(line));
	else console.log(JSON.stringify(line));
	return { ...report, batchFilesDeleted };
}

export async function scheduled(controller: ScheduledController, env: RetentionEnv & BatchRetentionEnv): Promise<void> {
	const report = await runMaintenance(env, controller.scheduledTime);
	if (report.error) throw new Error(`usage retention: ${report.error}`);
}
