/**
 * The worker's `scheduled` handler: the Cron Trigger in wrangler.toml (hourly) runs the raw
 * usage records' retention. A run that could not delete what it should is logged and thrown, so
 * the Cron Trigger shows as failed in the dashboard; the next run tries again.
 */
import { enforceRetention, type RetentionEnv } from "./retention";

export async function scheduled(controller: ScheduledController, env: RetentionEnv): Promise<void> {
	const report = await enforceRetention(env, controller.scheduledTime);
	// One JSON line, like the gateway's other logs (Workers Logs, `wrangler tail`).
	const line = {
		message: "usage retention",
		cutoff: new Date(report.cutoff).toISOString(),
		deleted: report.deleted,
		archived_parts: report.archived.length,
		done: report.done,
		...(report.error ? { level: "error", error: report.error } : {}),
	};
	if (report.error) {
		console.error(JSON.stringify(line));
		throw new Error(`usage retention: ${report.error}`);
	}
	console.log(JSON.stringify(line));
}
