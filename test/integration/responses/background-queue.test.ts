/**
 * Background responses (src/responses/background-queue.ts): authorized when queued (402/403/429
 * then, the hold covering the queue wait), capped per paying key, run at most four at a time,
 * and a job cancelled or deleted while queued never runs and holds nothing.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { ResponseStore } from "../../../src/responses/response-store";
import { admin, createKey, engineRequestsSince, gw, lastEngineId, releaseEngine, waitFor } from "../../support/gateway";
import { ledger } from "../../support/ledger";
import { created, type ErrorJson, get, post, type ResponseJson, retrieved, settled } from "../../support/responses";

const APP = "https://app.example.com";
/**
 * A background run (non-stream) that lasts about 3 s (test/slowbody: headers at once, the body
 * dribbled), so runs overlap however slowly the test sends its requests. Capped at 14 tokens
 * of a longer answer, so "incomplete".
 */
const SLOW = { model: "test/slowbody", max_output_tokens: 14, background: true };
/** A background run that lasts until the test releases it (test/gated, releaseEngine). */
const GATED = { model: "test/gated", max_output_tokens: 14, background: true };

/** The most intervals ([start, end], ms) open at one moment; one that ends as another starts does not overlap it. */
function mostAtOnce(intervals: Array<[number, number]>): number {
	const edges = intervals.flatMap(
		([a, b]): Array<[number, number]> => [
			[a, 1],
			[b, -1],
		],
	);
	edges.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
	let open = 0;
	let most = 0;
	for (const [, d] of edges) {
		open += d;
		most = Math.max(most, open);
	}
	return most;
}

/** `settled` for a caller that needs headers (a `vk-tmp-` token's Origin). */
function settledWith(key: string, id: string, headers: Record<string, string>, timeoutMs = 30_000): Promise<ResponseJson> {
	return waitFor(async () => {
		const res = await get(key, id, headers);
		if (res.status !== 200) throw new Error(`GET ${id}: ${res.status} ${await res.text()}`);
		const r = (await res.json()) as ResponseJson;
		return r.status === "queued" || r.status === "in_progress" ? null : r;
	}, timeoutMs);
}

interface UsageRow {
	status: string;
	prompt_tokens: number;
	cost_nanos: number;
}

async function usageRows(keyId: string, count: number): Promise<UsageRow[]> {
	return waitFor(async () => {
		const body = (await (await admin(`/usage?key_id=${keyId}&limit=100`)).json()) as { data: UsageRow[] };
		return body.data.length >= count ? body.data : null;
	}, 15_000);
}

async function mintToken(parentKey: string): Promise<string> {
	const res = await gw("/v1/tokens", {
		method: "POST",
		headers: { authorization: `Bearer ${parentKey}`, "content-type": "application/json" },
		body: JSON.stringify({ allowed_origins: [APP] }),
	});
	if (res.status !== 200 && res.status !== 201) throw new Error(`mint: ${res.status} ${await res.text()}`);
	return ((await res.json()) as { token: string }).token;
}

/** Engine requests carrying `tag` in their body. */
/** Keeps releasing the gated runs (GATED) whose input has `mark` until `fn` returns a value: runs start as others end. */
function releasing<T>(mark: string, fn: () => Promise<T | null | undefined | false>, timeoutMs = 30_000): Promise<T> {
	return waitFor(async () => {
		await releaseEngine(mark);
		return fn();
	}, timeoutMs);
}

/** A response no longer queued or running, the gated runs of `mark` released meanwhile. */
function settledReleasing(key: string, id: string, mark: string, headers: Record<string, string> = {}): Promise<ResponseJson> {
	return releasing(mark, async () => {
		const res = await get(key, id, headers);
		if (res.status !== 200) throw new Error(`GET ${id}: ${res.status} ${await res.text()}`);
		const r = (await res.json()) as ResponseJson;
		return r.status === "queued" || r.status === "in_progress" ? null : r;
	});
}

async function tagged(since: number, tag: string) {
	return (await engineRequestsSince(since)).filter((r) => JSON.stringify(r.body).includes(tag));
}

describe("background responses are authorized when queued", () => {
	it("refuses a key without balance with 402 and queues nothing", async () => {
		const { key, id } = await createKey({ balance_usd: 0 });
		const since = await lastEngineId();
		const res = await post(key, { model: "test/ok", input: "empty key bg", background: true });
		expect(res.status).toBe(402);
		expect(((await res.json()) as ErrorJson).error.code).toBe("insufficient_balance");
		// Nothing is left in the key's queue when the answer goes out, so no run can reach the engine later.
		const stub = env.RESPONSES.get(env.RESPONSES.idFromName(id)) as DurableObjectStub<ResponseStore>;
		const queued = await runInDurableObject(
			stub,
			(_s, state) => state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM queue").one().n,
		);
		expect(queued).toBe(0);
		expect((await ledger(id).info()).openHolds).toBe(0);
		expect(await tagged(since, "empty key bg")).toHaveLength(0);
	});

	it("counts background responses against rpm when they are queued (429 with retry-after)", async () => {
		const { key } = await createKey({ rpm: 2 });
		const a = await created(key, { model: "test/ok", input: "rpm one", background: true });
		const b = await created(key, { model: "test/ok", input: "rpm two", background: true });
		const res = await post(key, { model: "test/ok", input: "rpm three", background: true });
		expect(res.status).toBe(429);
		expect(((await res.json()) as ErrorJson).error.code).toBe("rate_limit_exceeded");
		expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
		// The accepted ones run on the hold placed for them: they are not refused a second time.
		expect((await settled(key, a.id)).status).toBe("completed");
		expect((await settled(key, b.id)).status).toBe("completed");
	});

	it("holds the worst case when queued, for long enough to cover the wait", async () => {
		const { key, id } = await createKey();
		const r = await created(key, { ...SLOW, input: "hold lifetime" });
		const holds = await runInDurableObject(ledger(id), (_i, state) =>
			state.storage.sql.exec<{ created_at: number; expires_at: number }>("SELECT created_at, expires_at FROM holds").toArray(),
		);
		expect(holds).toHaveLength(1);
		expect((holds[0]?.expires_at ?? 0) - (holds[0]?.created_at ?? 0)).toBeGreaterThanOrEqual(59 * 60 * 1000);
		const finished = await settled(key, r.id);
		expect(finished.error).toBeNull();
		expect(finished.status).toBe("incomplete");
		const info = await waitFor(async () => {
			const i = await ledger(id).info();
			return i.openHolds === 0 ? i : null;
		});
		const [row] = await usageRows(id, 1);
		expect(row?.status).toBe("completed");
		expect(row?.cost_nanos).toBeGreaterThan(0);
		expect(info.spentNanos).toBe(row?.cost_nanos);
	});

	it("caps queued responses per key with 429 rate_limit_exceeded and runs at most 4 at once", async () => {
		const { key, id } = await createKey();
		const since = await lastEngineId();
		const mark = `pool-${crypto.randomUUID().slice(0, 8)}`;
		// Runs that last until the test releases them: all eight are queued before any can end, however slow the box.
		const jobs = await Promise.all(Array.from({ length: 8 }, (_, i) => created(key, { ...GATED, input: `${mark} job ${i}` })));
		const over = await post(key, { ...GATED, input: `${mark} over` });
		expect(over.status).toBe(429);
		const body = (await over.json()) as ErrorJson;
		expect(body.error.code).toBe("rate_limit_exceeded");
		expect(body.error.type).toBe("rate_limit_error");
		expect(Number(over.headers.get("retry-after"))).toBeGreaterThan(0);
		// The refused request held nothing: only the eight queued ones hold money.
		expect((await ledger(id).info()).openHolds).toBe(8);

		// Four runs reach the engine and stay there, the other four wait their turn.
		await waitFor(async () => (await tagged(since, mark)).filter((r) => r.closedAt === null).length === 4, 30_000);
		// Released, the running ones end and the next ones start: until all eight have run.
		const seen = await waitFor(async () => {
			await releaseEngine(mark);
			const s = await tagged(since, mark);
			return s.length === 8 && s.every((r) => r.closedAt !== null) ? s : null;
		}, 60_000);
		// Every job ends. How is the machine's business: on a starved box the engine's empty chunks can
		// pause past the test config's 800 ms idle timeout, which ends a run early (failed), not never.
		for (const job of jobs) expect(["completed", "incomplete", "failed"]).toContain((await settled(key, job.id, 60_000)).status);
		// How many runs the engine had open at once, from when each arrived and closed on its own
		// clock: exact whatever the load, where polling could miss an overlap.
		const most = mostAtOnce(seen.map((r) => [r.receivedAt, r.closedAt ?? r.receivedAt]));
		expect(most).toBeGreaterThan(1);
		expect(most).toBeLessThanOrEqual(4);
		expect(await tagged(since, `${mark} over`)).toHaveLength(0);
		await waitFor(async () => ((await ledger(id).info()).openHolds === 0 ? true : null), 30_000);
		// Slots free up as jobs end.
		const again = await created(key, { model: "test/ok", input: "after the pool", background: true });
		expect((await settled(key, again.id, 30_000)).status).toBe("completed");
	});

	it("releases the hold of a job cancelled or deleted while still queued, and never runs it", async () => {
		const { key, id } = await createKey();
		const since = await lastEngineId();
		const mark = `busy-${crypto.randomUUID().slice(0, 8)}`;
		// Four runs that last until released, so the next two stay queued however slowly they are sent.
		const running: string[] = [];
		for (let i = 0; i < 4; i++) running.push((await created(key, { ...GATED, input: `${mark} ${i}` })).id);
		const toCancel = await created(key, { ...GATED, input: `${mark} queued then cancelled` });
		const toDelete = await created(key, { ...GATED, input: `${mark} queued then deleted` });
		expect((await ledger(id).info()).openHolds).toBe(6);

		const cancel = await gw(`/v1/responses/${toCancel.id}/cancel`, {
			method: "POST",
			headers: { authorization: `Bearer ${key}` },
		});
		expect(cancel.status).toBe(200);
		expect(((await cancel.json()) as ResponseJson).status).toBe("cancelled");
		const del = await gw(`/v1/responses/${toDelete.id}`, { method: "DELETE", headers: { authorization: `Bearer ${key}` } });
		expect(del.status).toBe(200);
		expect((await get(key, toDelete.id)).status).toBe(404);

		for (const rid of running) expect((await settledReleasing(key, rid, mark)).status).toBe("incomplete");
		expect((await retrieved(key, toCancel.id)).status).toBe("cancelled");
		const rows = await usageRows(id, 6);
		expect(rows.filter((r) => r.status === "completed")).toHaveLength(4);
		const released = rows.filter((r) => r.status === "client_disconnected");
		expect(released).toHaveLength(2);
		expect(released.every((r) => r.cost_nanos === 0 && r.prompt_tokens === 0)).toBe(true);
		const info = await waitFor(async () => {
			const i = await ledger(id).info();
			return i.openHolds === 0 ? i : null;
		});
		expect(info.heldNanos).toBe(0);
		expect(info.spentNanos).toBe(rows.reduce((a, r) => a + r.cost_nanos, 0));
		expect(await tagged(since, `${mark} queued then`)).toHaveLength(0);
	});

	it("counts max_queued_responses per paying key: its tokens' jobs and its own share one queue cap", async () => {
		const parent = await createKey();
		const [t1, t2] = [await mintToken(parent.key), await mintToken(parent.key)];
		const headers = { origin: APP };
		const since = await lastEngineId();
		const mark = `payer-${crypto.randomUUID().slice(0, 8)}`;
		// Three callers of one payer, 8 jobs between them (the cap), that run until released: none ends before all are queued.
		const jobs = await Promise.all(
			Array.from({ length: 8 }, async (_, i) => {
				const [key, h] = i % 3 === 0 ? [parent.key, {}] : i % 3 === 1 ? [t1, headers] : [t2, headers];
				return { key, id: (await created(key, { ...GATED, input: `${mark} job ${i}` }, h)).id, headers: h };
			}),
		);
		for (const [key, h] of [
			[parent.key, {}],
			[t1, headers],
			[t2, headers],
		] as const) {
			const over = await post(key, { ...GATED, input: `${mark} over` }, h);
			expect(over.status).toBe(429);
			expect(((await over.json()) as ErrorJson).error.code).toBe("rate_limit_exceeded");
		}
		expect((await ledger(parent.id).info()).openHolds).toBe(8);
		for (const j of jobs)
			expect(["completed", "incomplete", "failed"]).toContain((await settledReleasing(j.key, j.id, mark, j.headers)).status);
		expect(await tagged(since, `${mark} over`)).toHaveLength(0);
		// Every slot is given back as the jobs end, whichever store ran them.
		const again = await created(t1, { model: "test/ok", input: "after the payer's jobs", background: true }, headers);
		expect((await settledWith(t1, again.id, headers)).status).toBe("completed");
	});

	it("releases a queued token job's hold on the parent key's ledger", async () => {
		const parent = await createKey();
		const token = await mintToken(parent.key);
		const headers = { origin: APP };
		const mark = `token-${crypto.randomUUID().slice(0, 8)}`;
		const busy: string[] = [];
		for (let i = 0; i < 4; i++) {
			busy.push((await created(token, { ...GATED, input: `${mark} busy ${i}` }, headers)).id);
		}
		const queued = await created(token, { ...GATED, input: `${mark} queued` }, headers);
		expect((await ledger(parent.id).info()).openHolds).toBe(5);
		const cancel = await gw(`/v1/responses/${queued.id}/cancel`, {
			method: "POST",
			headers: { authorization: `Bearer ${token}`, ...headers },
		});
		expect(cancel.status).toBe(200);
		const rows = await usageRows(parent.id, 1);
		expect(rows.map((r) => r.status)).toContain("client_disconnected");
		await releasing(mark, async () => (await ledger(parent.id).info()).openHolds === 0);
	});
});
