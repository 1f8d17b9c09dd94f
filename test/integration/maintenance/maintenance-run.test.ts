/**
 * `POST /admin/maintenance/run`: the hourly retention run on demand (what `npm run maintenance`
 * calls, since `wrangler dev` cannot fire the cron), end to end: records past retention are
 * deleted (and exported to R2, which the test project binds), newer ones kept, and no rollup,
 * summary or balance changes. The job itself is tested in retention.test.ts.
 */
import { env } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { flushOutbox } from "../../../src/ledger/durable/usage-flush";
import { retentionCutoff, utcDay } from "../../../src/maintenance/retention-plan";
import { admin, chat, createKey, gw, waitFor } from "../../support/gateway";
import { freshKeyId, usageRows } from "../../support/ledger";
import { usageRecordsFor } from "../../support/usage-records";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const RETENTION_DAYS = 90; // the default: the test catalog sets no usage.retention_days

let key: { id: string; key: string };
/** No key row: the cleanup does not look at keys. */
const OTHER = freshKeyId("maintenance", "other");
const records = usageRecordsFor("mrun");
const rec = records.rec;
const ids = () => records.ids(key.id, OTHER);

/** Everything a run must leave alone: this file's rollups, their summary, and the key's money. */
async function untouched() {
	const rollups = (
		await env.DB.prepare("SELECT * FROM usage_hourly WHERE key_id IN (?1, ?2) ORDER BY hour, key_id, model")
			.bind(key.id, OTHER)
			.all()
	).results;
	const since = Math.floor((Date.now() - 200 * DAY) / 1000);
	const summaries = [];
	for (const k of [key.id, OTHER]) {
		const res = await admin(`/usage/summary?since=${since}&granularity=day&key_id=${k}`);
		expect(res.status).toBe(200);
		summaries.push(await res.json());
	}
	const money = (await (await admin(`/keys/${key.id}`)).json()) as { balance_usd: number; spent_usd: number };
	return { rollups, summaries, balance: money.balance_usd, spent: money.spent_usd };
}

interface RunAnswer {
	object: string;
	usage_retention: { cutoff: string; deleted: number; archived: string[]; done: boolean; error: string | null };
}

async function run(): Promise<RunAnswer> {
	const res = await admin("/maintenance/run", { method: "POST" });
	expect(res.status).toBe(200);
	return (await res.json()) as RunAnswer;
}

describe("POST /admin/maintenance/run", () => {
	beforeAll(async () => {
		key = await createKey({ name: "maintenance", balance_usd: 2 });
		// The run's own JSON line (console.log) stays out of the test output.
		vi.spyOn(console, "log").mockImplementation(() => {});
	});
	afterAll(async () => {
		vi.restoreAllMocks();
		await env.DB.prepare("DELETE FROM usage_records WHERE key_id IN (?1, ?2)").bind(key.id, OTHER).run();
	});

	it("needs the admin token", async () => {
		const none = await gw("/admin/maintenance/run", { method: "POST" });
		expect(none.status).toBe(401);
		const wrong = await gw("/admin/maintenance/run", { method: "POST", headers: { authorization: `Bearer ${key.key}` } });
		expect(wrong.status).toBe(401);
	});

	it("deletes (and exports) records past retention, keeps the rest, and changes no rollup, summary or balance", async () => {
		// A real request: a debited balance and a record of today.
		const res = await chat(key.key, { model: "test/ok", messages: [{ role: "user", content: "keep me" }] });
		expect(res.status).toBe(200);
		await res.json();
		const [live] = await waitFor(async () => {
			const rows = await usageRows(key.id);
			return rows.length > 0 ? rows : null;
		});

		const now = Date.now();
		const old = [rec(key.id, now - 200 * DAY), rec(key.id, now - 120 * DAY), rec(OTHER, now - 95 * DAY)];
		const kept = [rec(key.id, now - 85 * DAY), rec(OTHER, now - HOUR)];
		await flushOutbox(env.DB, [...old, ...kept]);
		const before = await untouched();
		expect(before.rollups.length).toBeGreaterThanOrEqual(4);
		expect(before.spent).toBeGreaterThan(0);

		const first = await run();
		const after = Date.now();
		expect(first.object).toBe("maintenance.run");
		// The cutoff is the run's own clock's: 90 whole UTC days back, at a day boundary.
		const cutoffs = [retentionCutoff(now, RETENTION_DAYS), retentionCutoff(after, RETENTION_DAYS)];
		expect(cutoffs.map((c) => new Date(c).toISOString())).toContain(first.usage_retention.cutoff);
		expect(first.usage_retention).toMatchObject({ done: true, error: null });
		expect(first.usage_retention.deleted).toBeGreaterThanOrEqual(old.length);
		for (const r of old) {
			expect(first.usage_retention.archived.some((k) => k.startsWith(`usage/${utcDay(r.created_at as number)}/`))).toBe(true);
		}

		expect(await ids()).toEqual([live?.request_id, ...kept.map((r) => r.request_id)].sort());
		expect(await untouched()).toEqual(before);

		// Nothing left past retention: the next run deletes nothing.
		const second = await run();
		expect(second.usage_retention).toMatchObject({ deleted: 0, archived: [], done: true, error: null });
		expect(await untouched()).toEqual(before);
	});
});
