import { describe, expect, it } from "vitest";
import { z } from "zod";
import { parseTime, timeParam } from "../../../src/api/list-params";
import { usageSummaryQuery } from "../../../src/api/usage-query";
import { DAY_MS, HOUR_MS } from "../../../src/db/usage-rollups";
import { GatewayError } from "../../../src/errors";
import { newFlushId } from "../../../src/ledger/durable/usage-flush";
import { isoPeriod, MAX_WINDOW_MS, summaryRowView, summaryWindow } from "../../../src/routes/usage-summary";

const T = Date.UTC(2026, 4, 10, 13, 25, 7); // 2026-05-10T13:25:07Z

function paramOf(fn: () => unknown): string | null | undefined {
	try {
		fn();
	} catch (e) {
		expect(e).toBeInstanceOf(GatewayError);
		return (e as GatewayError).options.param;
	}
	throw new Error("expected a GatewayError");
}

describe("summary time parameters", () => {
	it("reads unix seconds and ISO 8601 dates as unix ms", () => {
		expect(parseTime("1778419507")).toBe(1778419507000);
		expect(parseTime("2026-05-10T13:25:07Z")).toBe(T);
		expect(parseTime("2026-05-10")).toBe(Date.UTC(2026, 4, 10));
		expect(parseTime("yesterday")).toBeUndefined();
		expect(parseTime("")).toBeUndefined();
		// Only unix seconds and ISO 8601: not whatever Date.parse happens to read.
		expect(parseTime("-1")).toBeUndefined();
		expect(parseTime("May 5 2026")).toBeUndefined();
		expect(parseTime("1e9")).toBeUndefined();
		expect(parseTime("2026-02-30T00:00:00Z")).toBeUndefined();
		expect(parseTime("2026-13-01")).toBeUndefined();
		expect(parseTime(" 123")).toBeUndefined();
		expect(parseTime("2028-02-29")).toBe(Date.UTC(2028, 1, 29));
	});

	it("names the parameter that does not parse", () => {
		expect(timeParam(undefined, "until")).toBeUndefined();
		expect(paramOf(() => timeParam("soon", "until"))).toBe("until");
	});
});

describe("summaryWindow", () => {
	it("defaults to the last 24 hours by hour, the current hour included", () => {
		expect(summaryWindow({ granularity: "hour" }, T)).toEqual({
			since: Date.UTC(2026, 4, 9, 14),
			until: Date.UTC(2026, 4, 10, 14),
		});
	});

	it("defaults to the last 30 days by day, today included", () => {
		const w = summaryWindow({ granularity: "day" }, T);
		expect(w.until).toBe(Date.UTC(2026, 4, 11));
		expect(w.until - w.since).toBe(30 * DAY_MS);
	});

	it("widens a window to whole buckets: since rounds down, until rounds up", () => {
		const since = Date.UTC(2026, 4, 1, 10, 30);
		const until = Date.UTC(2026, 4, 1, 12, 0, 1);
		expect(summaryWindow({ since, until, granularity: "hour" }, T)).toEqual({
			since: Date.UTC(2026, 4, 1, 10),
			until: Date.UTC(2026, 4, 1, 13),
		});
		expect(summaryWindow({ since, until, granularity: "day" }, T)).toEqual({
			since: Date.UTC(2026, 4, 1),
			until: Date.UTC(2026, 4, 2),
		});
	});

	it("keeps an hour-aligned window as it is", () => {
		const since = Date.UTC(2026, 4, 1, 10);
		expect(summaryWindow({ since, until: since + 3 * HOUR_MS, granularity: "hour" }, T)).toEqual({
			since,
			until: since + 3 * HOUR_MS,
		});
	});

	it("refuses since at or after until, naming since", () => {
		expect(paramOf(() => summaryWindow({ since: T, until: T, granularity: "hour" }, T))).toBe("since");
		expect(paramOf(() => summaryWindow({ since: T + 1, until: T, granularity: "day" }, T))).toBe("since");
		// until defaults to now: a since in the future is refused too.
		expect(paramOf(() => summaryWindow({ since: T + HOUR_MS, granularity: "hour" }, T))).toBe("since");
	});

	it("refuses windows over 400 days by hour, but takes them by day", () => {
		const until = Date.UTC(2026, 4, 1);
		const since = until - 401 * DAY_MS;
		expect(paramOf(() => summaryWindow({ since, until, granularity: "hour" }, T))).toBe("since");
		expect(summaryWindow({ since: until - 400 * DAY_MS, until, granularity: "hour" }, T).since).toBe(until - 400 * DAY_MS);
		expect(summaryWindow({ since, until, granularity: "day" }, T)).toEqual({ since, until });
		expect(paramOf(() => summaryWindow({ since: until - MAX_WINDOW_MS.day - DAY_MS, until, granularity: "day" }, T))).toBe(
			"since",
		);
	});
});

describe("usageSummaryQuery", () => {
	it("defaults granularity to hour and leaves the rest optional", () => {
		expect(usageSummaryQuery.parse({})).toEqual({ granularity: "hour" });
	});

	it("converts to JSON Schema, for the OpenAPI document", () => {
		const schema = z.toJSONSchema(usageSummaryQuery, { io: "input" }) as { properties: Record<string, { enum?: string[] }> };
		expect(Object.keys(schema.properties).sort()).toEqual(["granularity", "group_by", "key_id", "model", "since", "until"]);
		expect(schema.properties.granularity?.enum).toEqual(["hour", "day"]);
	});

	it("rejects unknown enum values and unparseable times, naming the parameter", () => {
		for (const [query, param] of [
			[{ granularity: "week" }, "granularity"],
			[{ group_by: "node" }, "group_by"],
			[{ since: "later" }, "since"],
			[{ until: "2026-13-45" }, "until"],
			[{ key_id: "" }, "key_id"],
		] as const) {
			const r = usageSummaryQuery.safeParse(query);
			expect(r.success).toBe(false);
			expect(r.error?.issues[0]?.path).toEqual([param]);
		}
	});
});

describe("summary rows", () => {
	const row = {
		period: Date.UTC(2026, 4, 10, 13),
		group: "test/ok",
		requests: 3,
		promptTokens: 10,
		completionTokens: 20,
		costNanos: 50_001,
		searchCount: 1,
		cachedTokens: 4,
	};

	it("shows the period as ISO 8601 UTC and the cost in USD and nano-dollars", () => {
		expect(isoPeriod(row.period)).toBe("2026-05-10T13:00:00Z");
		expect(summaryRowView(row, "model")).toEqual({
			period: "2026-05-10T13:00:00Z",
			model: "test/ok",
			requests: 3,
			prompt_tokens: 10,
			completion_tokens: 20,
			total_tokens: 30,
			cost_usd: 0.000050001,
			cost_nanos: 50_001,
			search_count: 1,
			cached_tokens: 4,
			cache_hit_rate: 0.4,
		});
	});

	it("names the group after group_by, and has none without it", () => {
		expect(summaryRowView(row, "key")).toMatchObject({ key_id: "test/ok" });
		const plain = summaryRowView({ ...row, group: null }, undefined);
		expect(plain).not.toHaveProperty("model");
		expect(plain).not.toHaveProperty("key_id");
	});
});

describe("newFlushId", () => {
	it("is a positive safe integer, different every time", () => {
		const ids = new Set(Array.from({ length: 1000 }, newFlushId));
		expect(ids.size).toBe(1000);
		for (const id of ids) expect(Number.isSafeInteger(id) && id > 0).toBe(true);
	});
});
