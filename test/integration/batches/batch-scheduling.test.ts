import { env, runDurableObjectAlarm, runInDurableObject, SELF } from "cloudflare:test";
import OpenAI, { toFile } from "openai";
import { afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { dispatcherFor } from "../../../src/batches/create";
import { IDLE_POLL_MS } from "../../../src/batches/dispatcher";
import { loadConfig } from "../../../src/config";
import { nodeHealth, readSharedView } from "../../../src/routing/shared-view";
import { callsWith, setNode } from "../../support/fleet";
import { chat, createKey, engineRequests, releaseEngine, waitFor } from "../../support/gateway";
import { expectBooks } from "../../support/ledger";

function client(key: string): OpenAI {
	return new OpenAI({
		apiKey: key,
		baseURL: "http://gateway.test/v1",
		maxRetries: 0,
		fetch: (input, init) => SELF.fetch(input instanceof Request ? input : String(input), init as RequestInit),
	});
}

function chatLine(customId: string, content: string, model: string, maxTokens = 20) {
	return {
		custom_id: customId,
		method: "POST",
		url: "/v1/chat/completions",
		body: { model, max_tokens: maxTokens, messages: [{ role: "user", content }] },
	};
}

async function submit(openai: OpenAI, lines: unknown[]) {
	const text = `${lines.map((l) => JSON.stringify(l)).join("\n")}\n`;
	const file = await openai.files.create({ file: await toFile(new TextEncoder().encode(text), "in.jsonl"), purpose: "batch" });
	return openai.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
}

async function final(openai: OpenAI, id: string) {
	return waitFor(async () => {
		const b = await openai.batches.retrieve(id);
		return ["completed", "failed", "expired", "cancelled"].includes(b.status) ? b : null;
	}, 15_000);
}

async function resultLines(openai: OpenAI, fileId: string | null | undefined) {
	if (!fileId) return [];
	const text = await (await openai.files.content(fileId)).text();
	return text
		.split("\n")
		.filter(Boolean)
		.map((l) => JSON.parse(l) as { custom_id: string; response: { status_code: number } | null; error: { code: string } | null });
}

const BUSY_NODE = `${env.ENGINE_URL}/n/batch-idle/v1`;

/** Sets the batch node's queue and waits until the fleet view every isolate reads (NodeHealth, probed on its alarm) reports it. */
async function nodeQueue(waiting: number): Promise<void> {
	await setNode("batch-idle", { queue: waiting ? { waiting, running: 8 } : null });
	const config = loadConfig(env.GATEWAY_CONFIG);
	await waitFor(async () => {
		await runDurableObjectAlarm(nodeHealth(env));
		const view = await readSharedView(env, config);
		return (view.nodes[BUSY_NODE]?.load?.waiting ?? 0) === waiting;
	});
}

beforeAll(async () => {
	await setNode("gated-lines-a", { scenario: "gated" });
});

afterEach(() => {
	vi.useRealTimers();
});

describe("batch scheduling", () => {
	it("gives a busy node no line until its engine reports no queue; lines carry priority, interactive requests none", async () => {
		const key = await createKey({ balance_usd: 10 });
		const openai = client(key.key);
		const marker = `busy-${crypto.randomUUID()}`;
		await chat(key.key, { model: "test/batch-idle", max_tokens: 5, messages: [{ role: "user", content: `warm ${marker}` }] });
		await nodeQueue(3);
		const b = await submit(openai, [
			chatLine("one", `${marker} a`, "test/batch-idle"),
			chatLine("two", `${marker} b`, "test/batch-idle"),
		]);
		await runDurableObjectAlarm(dispatcherFor(env, "test/batch-idle"));
		expect((await openai.batches.retrieve(b.id)).status).toBe("in_progress");
		expect((await engineRequests({ contains: `${marker} ` })).length).toBe(0);
		await nodeQueue(0);
		const done = await final(openai, b.id);
		expect(done.request_counts).toEqual({ total: 2, completed: 2, failed: 0 });
		const lines = await engineRequests({ contains: `${marker} ` });
		expect(lines).toHaveLength(2);
		for (const l of lines) expect(l.body?.priority).toBe(1);
		const interactive = await engineRequests({ contains: `warm ${marker}` });
		expect(interactive).toHaveLength(1);
		expect(interactive[0]?.body).not.toHaveProperty("priority");
	});

	it("reads the engine's gauges itself: a queue the health check has not seen yet keeps lines off the node", async () => {
		const key = await createKey({ balance_usd: 10 });
		const openai = client(key.key);
		const marker = `fresh-${crypto.randomUUID()}`;
		// The shared view (the health check's) says nothing waits; then the engine starts queueing,
		// and no probe round runs to tell the view.
		await nodeQueue(0);
		await setNode("batch-idle", { queue: { waiting: 2, running: 0 } });
		const config = loadConfig(env.GATEWAY_CONFIG);
		expect((await readSharedView(env, config)).nodes[BUSY_NODE]?.load?.waiting ?? 0).toBe(0);
		const b = await submit(openai, [chatLine("f1", `${marker} a`, "test/batch-idle")]);
		// One round of the dispatcher: its line started (the round then waits on it, its alarm the
		// 60 s watchdog), or not (it looks again within IDLE_POLL_MS).
		const stub = dispatcherFor(env, "test/batch-idle");
		await runDurableObjectAlarm(stub);
		const round = await waitFor(() =>
			runInDurableObject(stub, async (_o, state) => {
				const running = state.storage.sql
					.exec<{ n: number }>("SELECT count(*) AS n FROM lines WHERE batch_id = ? AND state = 'running'", b.id)
					.one().n;
				if (running > 0) return "line started";
				const alarm = await state.storage.getAlarm();
				return alarm !== null && alarm <= Date.now() + IDLE_POLL_MS ? "no line, looks again" : null;
			}),
		);
		expect(round).toBe("no line, looks again");
		expect(await engineRequests({ contains: marker })).toHaveLength(0);
		expect((await openai.batches.retrieve(b.id)).status).toBe("in_progress");
		// The queue empties: the dispatcher's next read (a second later at most) lets the line go.
		await setNode("batch-idle", { queue: null });
		const done = await final(openai, b.id);
		expect(done.request_counts).toEqual({ total: 1, completed: 1, failed: 0 });
		expect(await engineRequests({ contains: marker })).toHaveLength(1);
	});

	it("resumes after the dispatcher restarts mid-batch: every line once in the output, each billed once", async () => {
		const key = await createKey({ balance_usd: 10 });
		const openai = client(key.key);
		const marker = `restart-${crypto.randomUUID()}`;
		const b = await submit(openai, [
			chatLine("g1", `${marker} one`, "test/gated-lines-a"),
			chatLine("g2", `${marker} two`, "test/gated-lines-a"),
		]);
		const stub = dispatcherFor(env, "test/gated-lines-a");
		await waitFor(async () => (await engineRequests({ contains: marker })).length === 2);
		// The object restarts: its runs are gone, its storage (each line marked running) stays.
		await runInDurableObject(stub, (_o, state) => state.abort("restart")).catch(() => {});
		// Its next alarm (a new stub: the old one broke with the object) finds the lines running with no run
		// and runs them again; the alarm lasts as long as they run, so it is not awaited here.
		const alarm = runDurableObjectAlarm(dispatcherFor(env, "test/gated-lines-a")).catch(() => false);
		await waitFor(async () => (await engineRequests({ contains: marker })).length >= 4);
		await waitFor(async () => {
			await releaseEngine(marker);
			const x = await openai.batches.retrieve(b.id);
			return x.status === "completed" ? x : null;
		}, 15_000);
		await alarm;
		const done = await openai.batches.retrieve(b.id);
		const out = await resultLines(openai, done.output_file_id);
		expect(out.map((l) => l.custom_id).sort()).toEqual(["g1", "g2"]);
		const { rows } = await expectBooks(key.id, 10e9);
		expect(rows.map((r) => r.request_id).sort()).toEqual([`${b.id}-0-0`, `${b.id}-1-0`]);
	});

	it("expires a batch past its window: unrun lines are listed expired, nothing billed for them", async () => {
		const key = await createKey({ balance_usd: 10 });
		const openai = client(key.key);
		const marker = `expiry-${crypto.randomUUID()}`;
		await nodeQueue(5);
		const b = await submit(openai, [
			chatLine("x", `${marker} 1`, "test/batch-idle"),
			chatLine("y", `${marker} 2`, "test/batch-idle"),
		]);
		vi.useFakeTimers({ toFake: ["Date"] });
		vi.setSystemTime(Date.now() + 25 * 60 * 60 * 1000);
		// The dispatcher's next alarm runs past the window (a run of the runtime's own may be under way: until one of ours ran).
		const done = await waitFor(async () => {
			await runDurableObjectAlarm(dispatcherFor(env, "test/batch-idle"));
			const x = await openai.batches.retrieve(b.id);
			return x.status === "expired" ? x : null;
		});
		vi.useRealTimers();
		await nodeQueue(0);
		expect(done.status).toBe("expired");
		expect(done.request_counts).toEqual({ total: 2, completed: 0, failed: 2 });
		expect(done.output_file_id).toBeNull();
		const errors = await resultLines(openai, done.error_file_id);
		expect(errors.map((l) => [l.custom_id, l.error?.code])).toEqual([
			["x", "batch_expired"],
			["y", "batch_expired"],
		]);
		expect(await engineRequests({ contains: marker })).toHaveLength(0);
		const { rows } = await expectBooks(key.id, 10e9);
		expect(rows).toHaveLength(0);
	});

	it("cancels a batch: queued lines end cancelled and cost nothing", async () => {
		const key = await createKey({ balance_usd: 10 });
		const openai = client(key.key);
		const marker = `cancel-${crypto.randomUUID()}`;
		await nodeQueue(5);
		const b = await submit(openai, [
			chatLine("p", `${marker} 1`, "test/batch-idle"),
			chatLine("q", `${marker} 2`, "test/batch-idle"),
		]);
		const cancelled = await openai.batches.cancel(b.id);
		expect(["cancelling", "cancelled"]).toContain(cancelled.status);
		await nodeQueue(0);
		const done = await final(openai, b.id);
		expect(done.status).toBe("cancelled");
		expect(done.cancelled_at).toEqual(expect.any(Number));
		const errors = await resultLines(openai, done.error_file_id);
		expect(errors.map((l) => l.error?.code)).toEqual(["batch_cancelled", "batch_cancelled"]);
		const { rows } = await expectBooks(key.id, 10e9);
		expect(rows).toHaveLength(0);
	});

	it("tries a line that failed on one node again on another: answered once, records = debits", async () => {
		const key = await createKey({ balance_usd: 10 });
		const openai = client(key.key);
		const marker = `retry-${crypto.randomUUID()}`;
		await setNode("batch-bad", { scenario: "fail500" });
		try {
			const b = await submit(openai, [chatLine("r1", `${marker} 1`, "test/batch-retry")]);
			const done = await final(openai, b.id);
			expect(done.request_counts).toEqual({ total: 1, completed: 1, failed: 0 });
			const calls = await callsWith(marker);
			expect(calls.map((c) => c.node)).toEqual(["batch-bad", "batch-good"]);
			const { rows } = await expectBooks(key.id, 10e9);
			// The failed attempt's record costs nothing; the answer's is the one debit.
			expect(rows.map((r) => [r.request_id, r.status, r.cost_nanos > 0]).sort()).toEqual([
				[`${b.id}-0-0`, "failed", false],
				[`${b.id}-0-1`, "completed", true],
			]);
		} finally {
			await setNode("batch-bad", { reset: true });
		}
	});

	it("goes on when the balance runs out mid-batch: refused lines end insufficient_quota, records = debits", async () => {
		// test/ok at half price: a 20-token line holds about 20,000 nanos (plus its prompt) and costs less.
		const key = await createKey({ balance_usd: 0.00004 });
		const openai = client(key.key);
		const marker = `broke-${crypto.randomUUID()}`;
		const lines = Array.from({ length: 8 }, (_, i) => chatLine(`l${i}`, `${marker} line ${i}`, "test/ok"));
		const b = await submit(openai, lines);
		const done = await final(openai, b.id);
		expect(done.status).toBe("completed");
		expect(done.request_counts?.total).toBe(8);
		expect(done.request_counts?.completed).toBeGreaterThan(0);
		expect(done.request_counts?.failed).toBeGreaterThan(0);
		const errors = await resultLines(openai, done.error_file_id);
		expect(errors.length).toBe(done.request_counts?.failed);
		for (const e of errors) expect(e).toMatchObject({ response: null, error: { code: "insufficient_quota" } });
		const { rows, info, charged } = await expectBooks(key.id, 40_000);
		expect(rows).toHaveLength(done.request_counts?.completed ?? -1);
		// Never further below zero than one line's hold, as for interactive requests.
		expect(info.balanceNanos).toBeGreaterThan(-30_000);
		expect(charged).toBeGreaterThan(0);
	});
});
