/**
 * The usage outbox: records settle into the ledger's SQLite outbox and the alarm flushes
 * them to D1. D1 never retries writes, so failing batches must be retried by the alarm and
 * every record must arrive exactly once, whatever fails and however often the alarm runs.
 */
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { KeyLedger } from "../../../src/ledger/durable/key-ledger";
import { flushOutbox, type UsageRecordInput } from "../../../src/ledger/durable/usage-flush";
import { waitFor } from "../../support/gateway";
import { freshKeyId, ledger } from "../../support/ledger";
import { hideErrorsMentioning } from "../../support/quiet-errors";

function record(keyId: string, i: number): UsageRecordInput {
	return {
		key_id: keyId,
		model: "test/ok",
		node: "http://node.test/v1",
		prompt_tokens: i,
		completion_tokens: 2 * i,
		status: "completed",
		estimated: false,
	};
}

/** Cost of record i at $1/Mtok in and $2/Mtok out. */
const costOf = (i: number) => i * 1_000 + 2 * i * 2_000;

interface Faults {
	/** batch() calls seen. */
	calls: number;
	/** batch() calls that threw. */
	failed: number;
}

type FaultMode = "before" | "after";

/**
 * Replaces the ledger instance's D1 binding by one whose first `n` batch() calls throw:
 * "before" fails without writing, "after" writes and then loses the reply.
 */
async function breakD1(stub: DurableObjectStub<KeyLedger>, n: number, mode: FaultMode): Promise<Faults> {
	const faults: Faults = { calls: 0, failed: 0 };
	await runInDurableObject(stub, (instance) => {
		const holder = instance as unknown as { env: Env };
		const real = holder.env.DB;
		const wrapped = new Proxy(real, {
			get(target, prop) {
				if (prop === "batch") {
					return async (statements: D1PreparedStatement[]) => {
						faults.calls += 1;
						if (faults.failed < n) {
							faults.failed += 1;
							if (mode === "after") await target.batch(statements);
							throw new Error(`D1_ERROR: injected failure ${faults.failed} (${mode})`);
						}
						return target.batch(statements);
					};
				}
				const v = Reflect.get(target, prop, target);
				return typeof v === "function" ? v.bind(target) : v;
			},
		});
		holder.env = { ...holder.env, DB: wrapped };
	});
	return faults;
}

async function restoreD1(stub: DurableObjectStub<KeyLedger>): Promise<void> {
	await runInDurableObject(stub, (instance) => {
		(instance as unknown as { env: Env }).env = env;
	});
}

async function settleMany(keyId: string, count: number, prefix: string): Promise<string[]> {
	const stub = ledger(keyId);
	await stub.credit({ keyId, amountNanos: 1_000_000_000, idempotencyKey: "initial" });
	const ids = Array.from({ length: count }, (_, i) => `${prefix}-${String(i).padStart(3, "0")}`);
	for (const [i, id] of ids.entries()) {
		await stub.authorize({ payerKeyId: keyId, requestId: id, holdNanos: 10_000_000 });
		const r = await stub.settle({ requestId: id, costNanos: costOf(i + 1), record: record(keyId, i + 1) });
		expect(r.applied).toBe(true);
	}
	return ids;
}

async function d1Rows(keyId: string) {
	const { results } = await env.DB.prepare(
		"SELECT request_id, cost_nanos, prompt_tokens, completion_tokens FROM usage_records WHERE key_id = ? ORDER BY request_id",
	)
		.bind(keyId)
		.all<{ request_id: string; cost_nanos: number; prompt_tokens: number; completion_tokens: number }>();
	return results;
}

/**
 * Runs the alarm until the outbox is empty, like the runtime would over time; how many runs it
 * took. The runtime's own alarm may hold the outbox meanwhile: then a run finds nothing to do.
 */
async function drain(stub: DurableObjectStub<KeyLedger>): Promise<number> {
	let runs = 0;
	await waitFor(async () => {
		if ((await stub.info()).outboxSize === 0) return true;
		await runDurableObjectAlarm(stub);
		runs += 1;
		return false;
	}, 30_000);
	return runs;
}

function expectExactlyOnce(rows: Awaited<ReturnType<typeof d1Rows>>, ids: string[]) {
	expect(rows.map((r) => r.request_id)).toEqual(ids);
	for (const [i, row] of rows.entries()) {
		expect(row).toEqual({ request_id: ids[i], cost_nanos: costOf(i + 1), prompt_tokens: i + 1, completion_tokens: 2 * (i + 1) });
	}
}

describe("usage outbox flush", () => {
	// The ledger logs every failed flush; keep the injected ones out of the test output.
	hideErrorsMentioning("injected failure");

	it("flushes settled records to D1 once, and an empty outbox stays empty", async () => {
		const keyId = freshKeyId("flush", "plain");
		const stub = ledger(keyId);
		const ids = await settleMany(keyId, 5, "plain");
		await drain(stub);
		expect((await stub.info()).outboxSize).toBe(0);
		expectExactlyOnce(await d1Rows(keyId), ids);
		// More alarm runs change nothing.
		await runDurableObjectAlarm(stub);
		await runDurableObjectAlarm(stub);
		expectExactlyOnce(await d1Rows(keyId), ids);
		const info = await stub.info();
		expect(info.spentNanos).toBe(ids.reduce((s, _id, i) => s + costOf(i + 1), 0));
	});

	it("D1 batch failing 3 times before writing: every record still arrives exactly once", async () => {
		const keyId = freshKeyId("flush", "fail-before");
		const stub = ledger(keyId);
		const faults = await breakD1(stub, 3, "before");
		const ids = await settleMany(keyId, 7, "before");
		const runs = await drain(stub);
		expect(runs).toBeLessThan(30);
		expect(faults.failed).toBe(3);
		expect(faults.calls).toBeGreaterThanOrEqual(4);
		expect((await stub.info()).outboxSize).toBe(0);
		expectExactlyOnce(await d1Rows(keyId), ids);
		await restoreD1(stub);
	});

	it("D1 batch writing but losing its reply 3 times: records arrive exactly once", async () => {
		const keyId = freshKeyId("flush", "fail-after");
		const stub = ledger(keyId);
		const faults = await breakD1(stub, 3, "after");
		const ids = await settleMany(keyId, 4, "after");
		await drain(stub);
		expect(faults.failed).toBe(3);
		expect((await stub.info()).outboxSize).toBe(0);
		expectExactlyOnce(await d1Rows(keyId), ids);
		await restoreD1(stub);
	});

	it("more records than one flush batch (120), with failures in between: all arrive, once", async () => {
		const keyId = freshKeyId("flush", "many");
		const stub = ledger(keyId);
		const faults = await breakD1(stub, 2, "before");
		const ids = await settleMany(keyId, 120, "many");
		await drain(stub);
		expect(faults.failed).toBe(2);
		expect((await stub.info()).outboxSize).toBe(0);
		const rows = await d1Rows(keyId);
		expect(rows).toHaveLength(120);
		expectExactlyOnce(rows, ids);
		await restoreD1(stub);
	});

	it("a failed flush keeps the alarm scheduled (backoff) so the outbox is retried without help", async () => {
		const keyId = freshKeyId("flush", "backoff");
		const stub = ledger(keyId);
		const faults = await breakD1(stub, 1, "before");
		const ids = await settleMany(keyId, 2, "backoff");
		// The flush the settles planned fails: run it now, unless the runtime has (it is due in 200 ms).
		await waitFor(async () => {
			if (faults.failed === 0) await runDurableObjectAlarm(stub);
			return faults.failed > 0;
		});
		expect(faults.failed).toBe(1);
		// From here nobody settles or runs an alarm: the retry the failure planned (its backoff is
		// 200 ms) delivers the records on its own.
		await waitFor(async () => (await stub.info()).outboxSize === 0);
		expect(faults.calls).toBeGreaterThanOrEqual(2);
		expectExactlyOnce(await d1Rows(keyId), ids);
		await restoreD1(stub);
	});

	it("records settled while a flush is failing are kept and delivered too", async () => {
		const keyId = freshKeyId("flush", "interleave");
		const stub = ledger(keyId);
		const faults = await breakD1(stub, 2, "before");
		const first = await settleMany(keyId, 3, "inter-a");
		await runDurableObjectAlarm(stub);
		// A second batch of settles while the first flush still fails.
		const more = Array.from({ length: 3 }, (_, i) => `inter-b-${i}`);
		for (const [i, id] of more.entries()) {
			await stub.authorize({ payerKeyId: keyId, requestId: id, holdNanos: 10_000_000 });
			await stub.settle({ requestId: id, costNanos: costOf(i + 4), record: record(keyId, i + 4) });
		}
		await drain(stub);
		expect(faults.failed).toBe(2);
		expect((await stub.info()).outboxSize).toBe(0);
		const rows = await d1Rows(keyId);
		expect(rows.map((r) => r.request_id)).toEqual([...first, ...more]);
		expect(rows.map((r) => r.cost_nanos)).toEqual([1, 2, 3, 4, 5, 6].map(costOf));
		await restoreD1(stub);
	});

	it("flushOutbox writes each field as given, with defaults for the optional ones", async () => {
		const keyId = freshKeyId("flush", "fields");
		const before = Date.now();
		await flushOutbox(env.DB, [
			{
				...record(keyId, 1),
				request_id: `${keyId}-a`,
				model: 'venym/odd "name" \\ ünï',
				node: null,
				estimated: false,
			},
			{ ...record(keyId, 2), request_id: `${keyId}-b`, estimated: true, search_count: 3, cost_nanos: 7, created_at: 42 },
		]);
		const { results } = await env.DB.prepare("SELECT * FROM usage_records WHERE key_id = ? ORDER BY request_id")
			.bind(keyId)
			.all<Record<string, unknown>>();
		expect(results).toHaveLength(2);
		const [a, b] = results;
		expect(a).toMatchObject({
			model: 'venym/odd "name" \\ ünï',
			node: null,
			prompt_tokens: 1,
			completion_tokens: 2,
			cost_nanos: 0,
			estimated: 0,
			search_count: 0,
		});
		expect(a?.created_at).toBeGreaterThanOrEqual(before);
		expect(b).toMatchObject({ node: "http://node.test/v1", estimated: 1, search_count: 3, cost_nanos: 7, created_at: 42 });
	});

	it("flushOutbox is idempotent by request id (INSERT OR IGNORE)", async () => {
		const keyId = freshKeyId("flush", "direct");
		const recs = [1, 2, 3].map((i) => ({
			...record(keyId, i),
			request_id: `direct-${i}`,
			cost_nanos: costOf(i),
			created_at: 1_000 + i,
		}));
		await flushOutbox(env.DB, recs);
		await flushOutbox(env.DB, recs);
		await flushOutbox(env.DB, [{ ...recs[0], cost_nanos: 999_999 } as UsageRecordInput]);
		await flushOutbox(env.DB, []);
		expectExactlyOnce(await d1Rows(keyId), ["direct-1", "direct-2", "direct-3"]);
	});
});
