import { describe, expect, it } from "vitest";
import { DAY_MS } from "../../../src/db/usage-rollups";
import { archivePartKey, nextUtcDay, retentionCutoff, utcDay } from "../../../src/maintenance/retention-plan";

describe("retention arithmetic", () => {
	it("cuts at the start of the UTC day retention_days before now", () => {
		const now = Date.UTC(2026, 4, 10, 13, 17);
		expect(retentionCutoff(now, 90)).toBe(Date.UTC(2026, 1, 9));
		expect(retentionCutoff(now, 1)).toBe(Date.UTC(2026, 4, 9));
		// A record is kept at least retention_days and less than one day more.
		const cutoff = retentionCutoff(now, 90);
		expect(now - cutoff).toBeGreaterThanOrEqual(90 * DAY_MS);
		expect(now - cutoff).toBeLessThan(91 * DAY_MS);
	});

	it("keeps a cutoff on a day boundary when now is one", () => {
		expect(retentionCutoff(Date.UTC(2026, 4, 10), 2)).toBe(Date.UTC(2026, 4, 8));
	});

	it("names days and parts in UTC, parts by their first record", () => {
		const t = Date.UTC(2026, 0, 2, 23, 59, 59, 999);
		expect(utcDay(t)).toBe("2026-01-02");
		expect(nextUtcDay(t)).toBe(Date.UTC(2026, 0, 3));
		expect(nextUtcDay(Date.UTC(2026, 0, 3))).toBe(Date.UTC(2026, 0, 4));
		expect(archivePartKey({ createdAt: t, requestId: "req_ab12" })).toBe(`usage/2026-01-02/${t}-req_ab12.jsonl`);
		// Early timestamps are padded, so a folder lists in time order.
		expect(archivePartKey({ createdAt: 42, requestId: "r" })).toBe("usage/1970-01-01/0000000000042-r.jsonl");
	});
});
