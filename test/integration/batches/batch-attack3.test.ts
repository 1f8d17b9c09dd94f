/** Attack round seven on the batch lane: races and names the lane's own tests did not try. */
import { env, runDurableObjectAlarm, runInDurableObject, SELF } from "cloudflare:test";
import OpenAI, { toFile } from "openai";
import { beforeAll, describe, expect, it } from "vitest";
import { dispatcherFor } from "../../../src/batches/create";
import { batchesStore } from "../../../src/db/batches";
import { keyStore } from "../../../src/db/keys";
import { APP, mint } from "../../support/admin-input";
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

function chatLine(customId: string, content: string, model: string) {
	return {
		custom_id: customId,
		method: "POST",
		url: "/v1/chat/completions",
		body: { model, max_tokens: 20, messages: [{ role: "user", content }] },
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

beforeAll(async () => {
	await setNode("gated-lines-b", { scenario: "gated" });
});

describe("batch lane, attack round seven", () => {
	it("ends a cancelled batch whose running line then fails retryably: it is not queued again in a batch that runs nothing", async () => {
		const key = await createKey({ balance_usd: 10 });
		const openai = client(key.key);
		const marker = `cancel-retry-${crypto.randomUUID()}`;
		await setNode("batch-bad", { scenario: "hang" });
		await setNode("batch-good", { scenario: "hang" });
		try {
			const b = await submit(openai, [chatLine("h1", `${marker} 1`, "test/batch-retry")]);
			await waitFor(async () => (await callsWith(marker)).length >= 1);
			expect((await openai.batches.cancel(b.id)).status).toBe("cancelling");
			// The hung engine times out (first_byte_timeout_ms): a retryable failure, after the cancel.
			const done = await final(openai, b.id);
			expect(done.status).toBe("cancelled");
			expect(done.request_counts).toEqual({ total: 1, completed: 0, failed: 1 });
			const { charged } = await expectBooks(key.id, 10e9);
			expect(charged).toBe(0);
		} finally {
			await setNode("batch-bad", { reset: true });
			await setNode("batch-good", { reset: true });
		}
	});

	it("runs a batch whose lines name a model by its alias (the dispatcher is the served model's)", async () => {
		const key = await createKey({ balance_usd: 10 });
		const openai = client(key.key);
		const marker = `alias-${crypto.randomUUID()}`;
		const b = await submit(openai, [chatLine("a1", `${marker} 1`, "gemini-3-flash-preview")]);
		const done = await final(openai, b.id);
		expect(done.status).toBe("completed");
		expect(done.request_counts).toEqual({ total: 1, completed: 1, failed: 0 });
		const { rows } = await expectBooks(key.id, 10e9);
		expect(rows).toHaveLength(1);
	});

	it("a line under max_body_bytes but over the dispatcher's row bound does not leave the batch validating forever", async () => {
		const key = await createKey({ balance_usd: 10 });
		const openai = client(key.key);
		const marker = `big-${crypto.randomUUID()}`;
		// 2.5 MB: under max_body_bytes (4 MiB), over a Durable Object SQLite row (2 MB).
		const big = chatLine("big", `${marker} ${"x".repeat(2_500_000)}`, "test/ok");
		const refused = await submit(openai, [chatLine("small", `${marker} small`, "test/ok"), big]).catch((err: unknown) => err);
		// Refused at upload (413, nothing stored), not a 500 that leaves a batch row validating.
		expect(refused).toMatchObject({ status: 413 });
		expect(String((refused as Error).message)).toContain("Line 2 is over 1048576 bytes");
		const list = await openai.batches.list();
		expect(list.data).toHaveLength(0);
	});

	it("batch lines take no max_concurrent slot: an interactive request gets through while lines run, and every line runs", async () => {
		const key = await createKey({ balance_usd: 10, max_concurrent: 1 });
		const openai = client(key.key);
		const marker = `slots-${crypto.randomUUID()}`;
		const b = await submit(openai, [
			chatLine("s1", `${marker} one`, "test/gated-lines-b"),
			chatLine("s2", `${marker} two`, "test/gated-lines-b"),
		]);
		await waitFor(async () => (await callsWith(marker)).length >= 2);
		const res = await chat(key.key, { model: "test/ok", max_tokens: 5, messages: [{ role: "user", content: "interactive" }] });
		expect(res.status).toBe(200);
		await res.text();
		const done = await waitFor(async () => {
			await releaseEngine(marker);
			const x = await openai.batches.retrieve(b.id);
			return x.status === "completed" ? x : null;
		}, 15_000);
		expect(done.request_counts).toEqual({ total: 2, completed: 2, failed: 0 });
		await expectBooks(key.id, 10e9);
	});

	it("a cancel between a dispatcher restart and its next alarm: the lines it was running run again (billed once), the batch ends", async () => {
		const key = await createKey({ balance_usd: 10 });
		const openai = client(key.key);
		const marker = `restart-cancel-${crypto.randomUUID()}`;
		const b = await submit(openai, [
			chatLine("k1", `${marker} one`, "test/gated-lines-b"),
			chatLine("k2", `${marker} two`, "test/gated-lines-b"),
		]);
		await waitFor(async () => (await engineRequests({ contains: marker })).length === 2);
		await runInDurableObject(dispatcherFor(env, "test/gated-lines-b"), (_o, state) => state.abort("restart")).catch(() => {});
		expect((await openai.batches.cancel(b.id)).status).toBe("cancelling");
		const alarm = runDurableObjectAlarm(dispatcherFor(env, "test/gated-lines-b")).catch(() => false);
		const done = await waitFor(async () => {
			await releaseEngine(marker);
			const x = await openai.batches.retrieve(b.id);
			return x.status === "cancelled" ? x : null;
		}, 15_000);
		await alarm;
		const { rows, charged } = await expectBooks(key.id, 10e9);
		expect(done.request_counts).toEqual({ total: 2, completed: 2, failed: 0 });
		// Every debit is a line the batch reports, at the cost it reports.
		expect(done.request_counts?.completed).toBe(rows.length);
		const row = await batchesStore(env.DB).get(key.id, b.id);
		expect(row?.costNanos).toBe(charged);
	});

	it("a spend cap reached mid-batch: the refused lines end unbilled in the error file, the spend never over the cap", async () => {
		const key = await createKey({ balance_usd: 10, spend_limit_usd: 0.00004 });
		const openai = client(key.key);
		const marker = `cap-${crypto.randomUUID()}`;
		const b = await submit(
			openai,
			Array.from({ length: 8 }, (_, i) => chatLine(`p${i}`, `${marker} ${i}`, "test/ok")),
		);
		const done = await final(openai, b.id);
		expect(done.status).toBe("completed");
		expect(done.request_counts?.failed).toBeGreaterThan(0);
		const text = await (await openai.files.content(done.error_file_id ?? "none")).text();
		const errors = text
			.split("\n")
			.filter(Boolean)
			.map((l) => JSON.parse(l) as { error: { code: string } | null; response: { status_code: number } | null });
		// As docs/batches.md says: the interactive refusal (403, the cap named), not run.
		for (const e of errors) expect(e).toMatchObject({ error: null, response: { status_code: 403 } });
		const { rows, charged } = await expectBooks(key.id, 10e9);
		expect(rows).toHaveLength(done.request_counts?.completed ?? -1);
		expect(charged).toBeLessThanOrEqual(40_000);
	});

	it("a key's rpm neither fails batch lines nor is used up by them: every line runs, interactive requests keep the window", async () => {
		const key = await createKey({ balance_usd: 10, rpm: 2 });
		const openai = client(key.key);
		const marker = `rpm-${crypto.randomUUID()}`;
		const b = await submit(
			openai,
			Array.from({ length: 5 }, (_, i) => chatLine(`r${i}`, `${marker} ${i}`, "test/ok")),
		);
		const done = await final(openai, b.id);
		expect(done.request_counts).toEqual({ total: 5, completed: 5, failed: 0 });
		const res = await chat(key.key, { model: "test/ok", max_tokens: 5, messages: [{ role: "user", content: "interactive" }] });
		expect(res.status).toBe(200);
		await res.text();
		const { rows } = await expectBooks(key.id, 10e9);
		expect(rows.filter((r) => r.cost_nanos > 0)).toHaveLength(6);
	});

	it("a line whose attempts each fail after some output: the batch's cost is every attempt's debit", async () => {
		const key = await createKey({ balance_usd: 10 });
		const openai = client(key.key);
		const marker = `cut-${crypto.randomUUID()}`;
		await setNode("batch-bad", { scenario: "cut" });
		await setNode("batch-good", { scenario: "cut" });
		try {
			const b = await submit(openai, [chatLine("c1", `${marker} 1`, "test/batch-retry")]);
			const done = await final(openai, b.id);
			expect(done.request_counts).toEqual({ total: 1, completed: 0, failed: 1 });
			const { rows, charged } = await expectBooks(key.id, 10e9);
			expect(rows.length).toBeGreaterThan(1);
			const row = await batchesStore(env.DB).get(key.id, b.id);
			expect(row?.costNanos).toBe(charged);
		} finally {
			await setNode("batch-bad", { reset: true });
			await setNode("batch-good", { reset: true });
		}
	});

	it("a cancel that lands before the dispatcher has the batch (still validating) is kept: the batch ends cancelled, nothing run", async () => {
		const key = await createKey({ balance_usd: 10 });
		const openai = client(key.key);
		const marker = `cancel-early-${crypto.randomUUID()}`;
		const lines = Array.from({ length: 3 }, (_, i) => chatLine(`e${i}`, `${marker} ${i}`, "test/ok"));
		const text = `${lines.map((l) => JSON.stringify(l)).join("\n")}\n`;
		const file = await openai.files.create({ file: await toFile(new TextEncoder().encode(text), "in.jsonl"), purpose: "batch" });
		const keyRow = await keyStore(env.DB).byId(key.id);
		if (!keyRow) throw new Error("no key row");
		// What createBatch has stored when its submit is on its way to the dispatcher: the row, validating.
		const id = `batch_early${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;
		const now = Date.now();
		await batchesStore(env.DB).insert({
			id,
			keyId: key.id,
			model: "test/ok",
			endpoint: "/v1/chat/completions",
			inputFileId: file.id,
			status: "validating",
			completionWindow: "24h",
			metadata: null,
			errors: null,
			outputFileId: null,
			errorFileId: null,
			total: 0,
			completed: 0,
			failed: 0,
			costNanos: 0,
			createdAt: now,
			expiresAt: now + 86_400_000,
			times: {},
		});
		const cancelled = await openai.batches.cancel(id);
		expect(cancelled.status).toBe("cancelling");
		await dispatcherFor(env, "test/ok").submit({
			id,
			model: "test/ok",
			endpoint: "/v1/chat/completions",
			inputFileId: file.id,
			principal: { key: keyRow },
			callerKeyId: key.id,
			expiresAt: now + 86_400_000,
		});
		const done = await final(openai, id);
		expect(done.status).toBe("cancelled");
		expect(done.request_counts).toEqual({ total: 3, completed: 0, failed: 3 });
		expect(await engineRequests({ contains: marker })).toHaveLength(0);
		const { rows } = await expectBooks(key.id, 10e9);
		expect(rows).toHaveLength(0);
	});

	it("a vk-tmp- token's batch draws on its parent: the lines are billed once to the parent, the batch is the token's alone", async () => {
		const parent = await createKey({ balance_usd: 10 });
		const minted = await mint(parent.key, {});
		const body = (await minted.json()) as { token?: string; key?: string };
		const token = body.token ?? body.key ?? "";
		expect(token).toMatch(/^vk-tmp-/);
		const openai = new OpenAI({
			apiKey: token,
			baseURL: "http://gateway.test/v1",
			maxRetries: 0,
			defaultHeaders: { origin: APP },
			fetch: (input, init) => SELF.fetch(input instanceof Request ? input : String(input), init as RequestInit),
		});
		const marker = `tmp-${crypto.randomUUID()}`;
		const b = await submit(openai, [chatLine("t1", `${marker} 1`, "test/ok"), chatLine("t2", `${marker} 2`, "test/ok")]);
		const done = await final(openai, b.id);
		expect(done.request_counts).toEqual({ total: 2, completed: 2, failed: 0 });
		const { rows, charged } = await expectBooks(parent.id, 10e9);
		expect(rows).toHaveLength(2);
		expect(charged).toBeGreaterThan(0);
		await expect(client(parent.key).batches.retrieve(b.id)).rejects.toMatchObject({ status: 404 });
	});

	it("lines carrying fields the interactive lane refuses (priority, n_cmpl) end 400, unbilled; stream: true runs unstreamed", async () => {
		const key = await createKey({ balance_usd: 10 });
		const openai = client(key.key);
		const marker = `fields-${crypto.randomUUID()}`;
		const line = (id: string, extra: Record<string, unknown>) => {
			const l = chatLine(id, `${marker} ${id}`, "test/ok");
			return { ...l, body: { ...l.body, ...extra } };
		};
		const b = await submit(openai, [
			line("prio", { priority: -100 }),
			line("ncmpl", { n_cmpl: 4 }),
			line("stream", { stream: true }),
		]);
		const done = await final(openai, b.id);
		expect(done.request_counts).toEqual({ total: 3, completed: 1, failed: 2 });
		const text = await (await openai.files.content(done.error_file_id ?? "none")).text();
		const errors = text
			.split("\n")
			.filter(Boolean)
			.map((l) => JSON.parse(l) as { custom_id: string; response: { status_code: number } | null });
		expect(errors.map((e) => [e.custom_id, e.response?.status_code])).toEqual([
			["prio", 400],
			["ncmpl", 400],
		]);
		const calls = await engineRequests({ contains: marker });
		expect(calls).toHaveLength(1);
		const { rows } = await expectBooks(key.id, 10e9);
		expect(rows.filter((r) => r.cost_nanos > 0)).toHaveLength(1);
	});
});
