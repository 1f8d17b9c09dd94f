/** The UTC periods a spend limit counts over: pure arithmetic on `now`. */

export type SpendPeriod = "daily" | "weekly" | "monthly";
export type PeriodKey = "total" | SpendPeriod;

/** Start of the UTC period containing `now` (days, ISO weeks starting Monday, calendar months). */
export function periodStart(period: PeriodKey, now: number): number {
	if (period === "total") return 0;
	const d = new Date(now);
	const day = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate());
	if (period === "daily") return day;
	if (period === "weekly") return day - ((d.getUTCDay() + 6) % 7) * 86_400_000;
	return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
}

/** End (exclusive) of the UTC period containing `now`. */
export function periodEnd(period: SpendPeriod, now: number): number {
	const start = new Date(periodStart(period, now));
	if (period === "daily") return start.getTime() + 86_400_000;
	if (period === "weekly") return start.getTime() + 7 * 86_400_000;
	return Date.UTC(start.getUTCFullYear(), start.getUTCMonth() + 1, 1);
}
