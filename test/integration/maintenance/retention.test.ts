/**
 * The raw usage records' retention: the scheduled cleanup deletes records older than
 * `usage.retention_days` whole UTC days, in bounded runs, after writing each day's records to
 * R2 as JSONL when USAGE_ARCHIVE is bound (and nothing of a part whose write failed). Rollups,
 * summaries and balances never change.
 */
import { createScheduledController, env } from "cloudflare:test";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import worker from "../../../src/index";
import { flushOutbox } from "../../../src/ledger/durable/usage-flush";
import { enforceRetention, type RetentionEnv } from "../../../src/maintenance/retention";
import { admin, createKey } from "../../support/gateway";
import { freshKeyId } from "../../support/ledger";
import { hideErrorsMentioning } from "../../support/quiet-errors";
import { usageRecordsFor } from "../../support/usage-records";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
/** The cron's time in these tests: 2026-06-15 10:17 UTC; with 90 days' retention the cutoff is 2026-03-17T00:00Z. */
const NOW = Date.UTC(2026, 5, 15, 10, 17);
const CUTOFF = Date.UTC(2026, 2, 17);

const archive = () => (env as unknown as { USAGE_ARCHIVE: R2Bucket }).USAGE_ARCHIVE;

/**
 * In the inner loop (`npm run test:unit`) other test files' records share usage_records and
 * usage_hourly, so every assertion here looks at this file's two keys only, and its request ids
 * carry a marker of this run. `keyId` is a real key (its balance must not change); OTHER has no
 * key row (the cleanup does not look at keys).
 */
let keyId: string;
const OTHER = freshKeyId("retention", "other");
const records = usageRecordsFor("ret");
const rec = records.rec;
/** The request ids of this file's records still in D1. */
const ids = () => records.ids(keyId, OTHER);

async function rollups() {
	return (
		await env.DB.prepare("SELECT * FROM usage_hourly WHERE key_id IN (?1, ?2) ORDER BY hour, key_id, model")
			.bind(keyId, OTHER)
			.all()
	).results;
}

async function summaries() {
	const out: unknown[] = [];
	for (const key of [keyId, OTHER]) {
		for (const q of [
			"since=2025-06-01&until=2026-06-16&granularity=day&group_by=key",
			"since=2025-06-01&until=2026-06-16&granularity=day&group_by=model",
			`since=${(CUTOFF - 200 * DAY) / 1000}&until=${CUTOFF / 1000}&group_by=model`,
		]) {
			const res = await admin(`/usage/summary?${q}&key_id=${key}`);
			expect(res.status).toBe(200);
			out.push(await res.json());
		}
	}
	return out;
}

async function balance(key: string) {
	const res = await admin(`/keys/${key}`);
	const body = (await res.json()) as { balance_usd: number; spent_usd: number };
	return { balance_usd: body.balance_usd, spent_usd: body.spent_usd };
}

async function clearArchive(): Promise<void> {
	const listed = await archive().list({ prefix: "usage/" });
	if (listed.objects.length) await archive().delete(listed.objects.map((o) => o.key));
}

/** Everything the cleanup must leave alone. */
async function untouched() {
	return { rollups: await rollups(), summaries: await summaries(), balance: await balance(keyId) };
}

/** Deletes this file's records and every record created before `olderThan` (none without it). */
async function clearRecords(olderThan?: number): Promise<void> {
	await env.DB.prepare("DELETE FROM usage_records WHERE key_id IN (?1, ?2) OR created_at < ?3")
		.bind(keyId, OTHER, olderThan ?? 0)
		.run();
}

describe("usage retention", () => {
	// The injected R2 failure's log line and the scheduled run's line for it (its info line is console.log).
	hideErrorsMentioning("injected", "usage retention");
	beforeAll(async () => {
		keyId = (await createKey({ name: "retention", balance_usd: 3 })).id;
		// Restored by hideErrorsMentioning's vi.restoreAllMocks.
		vi.spyOn(console, "log").mockImplementation(() => {});
	});
	// The cleanup runs over the whole table. In the inner loop, files that ran before this one in
	// the same workerd leave their records behind: all after NOW (they are stamped with the real
	// time), which no cutoff here reaches, except those they seed in the past (usage-flush's,
	// usage-summary's). Those would be deleted and archived along with this
	// file's and change its counts, its oldest-first order and its archive parts, so each test
	// starts without them (their files are done with them) and without this file's earlier records.
	beforeEach(() => clearRecords(NOW));
	afterAll(() => clearRecords());

	it("deletes records past retention in bounded runs, without an archive, and changes no rollup or balance", async () => {
		const old = [
			rec(keyId, CUTOFF - 120 * DAY),
			rec(keyId, CUTOFF - 3 * DAY + 5),
			rec(keyId, CUTOFF - 3 * DAY + HOUR),
			rec(keyId, CUTOFF - 1),
			rec(OTHER, CUTOFF - 2 * DAY),
		];
		const kept = [rec(keyId, CUTOFF), rec(keyId, NOW - DAY), rec(OTHER, NOW - 1)];
		await flushOutbox(env.DB, [...old, ...kept]);
		const before = await untouched();
		const noArchive: RetentionEnv = { DB: env.DB, GATEWAY_CONFIG: env.GATEWAY_CONFIG };

		// A run deletes at most maxRows, oldest first; the next goes on.
		const first = await enforceRetention(noArchive, NOW, { chunkRows: 2, maxRows: 3, maxMs: 60_000 });
		expect(first).toEqual({ cutoff: CUTOFF, deleted: 3, archived: [], done: false });
		expect(await ids()).toEqual([...old.slice(3), ...kept].map((r) => r.request_id).sort());
		const second = await enforceRetention(noArchive, NOW, { chunkRows: 2, maxRows: 100, maxMs: 60_000 });
		expect(second).toEqual({ cutoff: CUTOFF, deleted: 2, archived: [], done: true });
		expect(await ids()).toEqual(kept.map((r) => r.request_id).sort());
		expect(await enforceRetention(noArchive, NOW)).toEqual({ cutoff: CUTOFF, deleted: 0, archived: [], done: true });

		expect(await untouched()).toEqual(before);
	});

	it("the Cron Trigger's scheduled handler writes each UTC day's records to R2 as JSONL, then deletes them", async () => {
		await clearArchive();
		const dayA = Date.UTC(2026, 0, 10);
		const dayB = Date.UTC(2026, 0, 11);
		const a = [rec(keyId, dayA + 5 * HOUR), rec(keyId, dayA + 5 * HOUR), rec(keyId, dayA + DAY - 1)];
		const b = [rec(OTHER, dayB), rec(keyId, dayB + 7 * HOUR)];
		const kept = [rec(keyId, CUTOFF + 1), rec(keyId, NOW - HOUR)];
		await flushOutbox(env.DB, [...a, ...b, ...kept]);
		const before = await untouched();

		// Each write to R2 happens while its records are still in D1.
		const seenAtPut: string[][] = [];
		const bucket = archive();
		const watched = new Proxy(bucket, {
			get(target, prop) {
				if (prop === "put") {
					return async (...args: Parameters<R2Bucket["put"]>) => {
						seenAtPut.push(await ids());
						return target.put(...args);
					};
				}
				const v = Reflect.get(target, prop, target);
				return typeof v === "function" ? v.bind(target) : v;
			},
		});
		const report = await enforceRetention({ DB: env.DB, GATEWAY_CONFIG: env.GATEWAY_CONFIG, USAGE_ARCHIVE: watched }, NOW);
		expect(report.deleted).toBe(5);
		expect(report.done).toBe(true);
		expect(report.archived).toEqual([
			`usage/2026-01-10/${a[0]?.created_at}-${a[0]?.request_id}.jsonl`,
			`usage/2026-01-11/${b[0]?.created_at}-${b[0]?.request_id}.jsonl`,
		]);
		expect(seenAtPut[0]).toEqual(expect.arrayContaining([...a, ...b].map((r) => r.request_id)));
		expect(seenAtPut[1]).toEqual(expect.arrayContaining(b.map((r) => r.request_id)));
		expect(await ids()).toEqual(kept.map((r) => r.request_id).sort());

		const objA = await bucket.get(report.archived[0] as string);
		const lines = (await objA?.text())
			?.trimEnd()
			.split("\n")
			.map((l) => JSON.parse(l));
		expect(objA?.httpMetadata?.contentType).toBe("application/x-ndjson");
		expect(lines).toEqual(
			a.map((r) =>
				expect.objectContaining({
					request_id: r.request_id,
					key_id: r.key_id,
					model: r.model,
					prompt_tokens: r.prompt_tokens,
					completion_tokens: r.completion_tokens,
					cost_nanos: r.cost_nanos,
					created_at: Math.floor((r.created_at as number) / 1000),
					created_at_ms: r.created_at,
				}),
			),
		);
		expect(await untouched()).toEqual(before);

		// The same through the worker's scheduled export, as the Cron Trigger calls it.
		const c = rec(keyId, dayB + 9 * HOUR);
		await flushOutbox(env.DB, [c]);
		await worker.scheduled(createScheduledController({ scheduledTime: NOW, cron: "17 * * * *" }), env);
		expect(await ids()).toEqual(kept.map((r) => r.request_id).sort());
		const part = await bucket.get(`usage/2026-01-11/${c.created_at}-${c.request_id}.jsonl`);
		expect(JSON.parse((await part?.text()) ?? "null")).toMatchObject({ request_id: c.request_id });
	});

	it("keeps every record of a part whose R2 write fails, and the scheduled run fails", async () => {
		const old = [rec(keyId, CUTOFF - 10 * DAY), rec(keyId, CUTOFF - 9 * DAY)];
		await flushOutbox(env.DB, old);
		let puts = 0;
		const failing = new Proxy(archive(), {
			get(target, prop) {
				if (prop === "put") {
					return async (...args: Parameters<R2Bucket["put"]>) => {
						puts += 1;
						// The first day's part is written; the second day's write fails.
						if (puts > 1) throw new Error("injected R2 failure");
						return target.put(...args);
					};
				}
				const v = Reflect.get(target, prop, target);
				return typeof v === "function" ? v.bind(target) : v;
			},
		});
		const failingEnv = { ...env, USAGE_ARCHIVE: failing } as Env;
		const report = await enforceRetention(failingEnv, NOW);
		expect(report).toMatchObject({ deleted: 1, done: false, error: expect.stringContaining("archive write failed") });
		expect(await ids()).toEqual([old[1]?.request_id]);
		await expect(worker.scheduled(createScheduledController({ scheduledTime: NOW }), failingEnv)).rejects.toThrow(
			/archive write failed/,
		);
		expect(await ids()).toEqual([old[1]?.request_id]);
		// Once R2 answers again, the next run archives and deletes it.
		expect(await enforceRetention(env as RetentionEnv, NOW)).toMatchObject({ deleted: 1, done: true });
		expect(await ids()).toEqual([]);
	});

	it('follows usage.retention_days, and with usage.archive "r2" deletes nothing while no bucket is bound', async () => {
		const config = JSON.parse(env.GATEWAY_CONFIG) as Record<string, unknown>;
		const r = [rec(keyId, NOW - 3 * DAY), rec(keyId, NOW - DAY - 11 * HOUR), rec(keyId, NOW - HOUR)];
		await flushOutbox(env.DB, r);

		const required = JSON.stringify({ ...config, usage: { retention_days: 1, archive: "r2" } });
		const refused = await enforceRetention({ DB: env.DB, GATEWAY_CONFIG: required }, NOW);
		expect(refused).toMatchObject({ deleted: 0, done: false, error: expect.stringContaining("USAGE_ARCHIVE") });
		expect(await ids()).toHaveLength(3);

		const twoDays = JSON.stringify({ ...config, usage: { retention_days: 2 } });
		expect(await enforceRetention({ DB: env.DB, GATEWAY_CONFIG: twoDays }, NOW)).toMatchObject({
			cutoff: Date.UTC(2026, 5, 13),
			deleted: 1,
			done: true,
		});
		const oneDay = JSON.stringify({ ...config, usage: { retention_days: 1 } });
		expect(await enforceRetention({ DB: env.DB, GATEWAY_CONFIG: oneDay }, NOW)).toMatchObject({
			cutoff: Date.UTC(2026, 5, 14),
			deleted: 1,
		});
		expect(await ids()).toEqual([r[2]?.request_id]);
	});
});
