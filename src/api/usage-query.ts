/** The query of `GET /admin/usage/summary` (routes/usage-summary.ts), also in the OpenAPI document. */
import { z } from "zod";
import { parseTime } from "./list-params";

const time = (what: string) =>
	z
		.string()
		.refine((s) => parseTime(s) !== undefined, "must be unix seconds or an ISO 8601 date before 9999-12-31")
		.describe(`${what}: unix seconds or an ISO 8601 date`);

/** The query of `GET /admin/usage/summary`. Unknown parameters are ignored and empty ones are absent, as on `GET /admin/usage`. */
export const usageSummaryQuery = z.object({
	key_id: z
		.string()
		.min(1)
		.optional()
		.describe("Only this paying key's usage (a vk-tmp- token's usage counts for its parent key)"),
	model: z.string().min(1).optional().describe("Only this served model's usage"),
	since: time(
		"Start of the window, rounded down to the granularity (default: 24 h before `until` for hour, 30 days for day)",
	).optional(),
	until: time("End of the window, exclusive, rounded up to the granularity (default: now)").optional(),
	granularity: z.enum(["hour", "day"]).default("hour").describe("Bucket size; days are UTC"),
	group_by: z
		.enum(["model", "key", "end_user"])
		.optional()
		.describe(
			"One row per period and model, per period and paying key, or per period and end user (`end_user`: summed from the usage records retention keeps, not the hourly rollups)",
		),
});
export type UsageSummaryQuery = z.infer<typeof usageSummaryQuery>;
