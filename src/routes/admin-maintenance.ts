/**
 * `POST /admin/maintenance/run`: the hourly maintenance (the raw usage records' retention, with
 * its R2 export) run now, as the Cron Trigger runs it. Mounted under the admin routes (admin
 * token). `wrangler dev` cannot fire the cron of a worker whose assets run the worker first, so
 * this is how a local gateway (`npm run maintenance`) or an operator draining a backlog runs it.
 */
import { Hono } from "hono";
import type { AppEnv } from "../app-env";
import { DEFAULT_BUDGET, type RetentionBudget } from "../maintenance/retention";
import { runMaintenance } from "../maintenance/scheduled";

/**
 * An HTTP client waits for the answer, so a run stops starting chunks after 25 s (the cron's run
 * goes on for 2 minutes); `done: false` says there is more: run it again.
 */
export const ON_DEMAND_BUDGET: RetentionBudget = { ...DEFAULT_BUDGET, maxMs: 25_000 };

export const adminMaintenance = new Hono<AppEnv>().post("/run", async (c) => {
	const report = await runMaintenance(c.env, Date.now(), ON_DEMAND_BUDGET);
	return c.json({
		object: "maintenance.run",
		usage_retention: {
			cutoff: new Date(report.cutoff).toISOString(),
			deleted: report.deleted,
			archived: report.archived,
			done: report.done,
			error: report.error ?? null,
		},
		// The console's refused requests past their 7 days (maintenance/refusal-retention.ts).
		refused_requests: { deleted: report.refusalsDeleted },
		batch_files_deleted: report.batchFilesDeleted,
	});
});
