/**
 * Billing through the HTTP API: holds, 402s, how each outcome is charged, usage records,
 * credits and the admin / key views — all in exact nano-dollars where the engine makes the
 * numbers computable.
 *
 * Arithmetic used throughout (test pricing: $1/Mtok in = 1_000 nano$/token, $2/Mtok out =
 * 2_000 nano$/token, max_output_tokens 1000):
 *  - a message `ping XXXXXX` (11 characters) is estimated by the gateway at ceil(11/4) + 4 = 7
 *    prompt tokens; the dev engine counts ceil(11/4) = 3 and answers "Echo: ping XXXXXX"
 *    (3 words = 3 completion tokens, 17 characters ≈ ceil(17/4) = 5 estimated tokens);
 *  - hold = the prompt at its billing bound (4 × 7 + 1_024 = 1_052 tokens) × 1_000 + 1000 × 2_000
 *    = 3_052_000: the most settlement can charge, however the engine counts;
 *  - completed: 3 × 1_000 + 3 × 2_000 = 9_000;
 *  - estimated (no engine usage): 7 × 1_000 + 5 × 2_000 = 17_000.
 */
import { env, runDurableObjectAlarm, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { LedgerInfo } from "../../src/ledger/durable/key-ledger";
import {
	admin,
	BASE,
	type CreatedKey,
	chat,
	createKey,
	type EngineRequest,
	engineRequestsSince,
	gw,
	lastEngineId,
	readSse,
	waitFor,
} from "../support/gateway";
import { ledger } from "../support/ledger";

const IN = 1_000;
const OUT = 2_000;
/** The prompt's billing bound for the 7-token estimate: 4 × 7 + 1_024. */
const PROMPT_BOUND = 4 * 7 + 1024;
const HOLD = PROMPT_BOUND * IN + 1000 * OUT; // 3_052_000
const COMPLETED = 3 * IN + 3 * OUT; // 9_000
const ESTIMATED = 7 * IN + 5 * OUT; // 17_000

interface UsageRow {
	request_id: string;
	key_id: string;
	model: string;
	node: string | null;
	prompt_tokens: number;
	completion_tokens: number;
	total_tokens: number;
	cost_usd: number;
	cost_nanos: number;
	status: string;
	estimated: boolean;
	search_count: number;
	created_at: number;
}

interface UsagePage {
	object: string;
	data: UsageRow[];
	next_cursor: string | null;
}

interface ErrorBody {
	error: { message: string; type: string; param: string | null; code: string | null; [k: string]: unknown };
}

/** An 11-character message unique to this call, so the engine's log can be matched to it. */
function ping(): string {
	const id = crypto.randomUUID().replaceAll("-", "").slice(0, 6);
	return `ping ${id}`;
}

const usd = (nanos: number) => Number((nanos / 1e9).toFixed(9));

function info(keyId: string): Promise<LedgerInfo> {
	return ledger(keyId).info();
}

/** Waits until every request of the key has settled and its records have left the outbox. */
async function settledInfo(keyId: string, settles: number): Promise<LedgerInfo> {
	return waitFor(async () => {
		const i = await info(keyId);
		if (i.openHolds !== 0 || i.outboxSize !== 0) {
			if (i.outboxSize > 0) await runDurableObjectAlarm(ledger(keyId));
			return null;
		}
		const n = await env.DB.prepare("SELECT COUNT(*) AS n FROM usage_records WHERE key_id = ?").bind(keyId).first<{ n: number }>();
		return n && n.n >= settles ? i : null;
	}, 10_000);
}

async function usagePage(query: string): Promise<UsagePage> {
	const res = await admin(`/usage${query}`);
	expect(res.status).toBe(200);
	return (await res.json()) as UsagePage;
}

/** All usage records of a key (after settlement), newest first. */
async function usageOf(keyId: string, expected: number): Promise<UsageRow[]> {
	await settledInfo(keyId, expected);
	const page = await usagePage(`?key_id=${keyId}&limit=1000`);
	return page.data;
}

async function engineCallsFor(since: number, marker: string): Promise<EngineRequest[]> {
	const all = await engineRequestsSince(since);
	return all.filter((r) => JSON.stringify(r.body ?? {}).includes(marker));
}

async function keyView(id: string) {
	const res = await admin(`/keys/${id}`);
	expect(res.status).toBe(200);
	return (await res.json()) as Record<string, unknown>;
}

function textDeltas(frames: string[]): string {
	let text = "";
	for (const f of frames) {
		if (f === "[DONE]") continue;
		const j = JSON.parse(f) as { choices?: Array<{ delta?: { content?: string } }> };
		for (const c of j.choices ?? []) text += c.delta?.content ?? "";
	}
	return text;
}

describe("balance checks under concurrency", () => {
	it("50 concurrent requests on a balance worth three: the rest get 402, the books balance", async () => {
		// test/slow streams 40 words, one every 50 ms, so the first requests hold their money
		// while the others arrive. max_tokens 40: hold = 1_052×1_000 + 40×2_000 = 1_132_000; the
		// engine reports 3 prompt + 40 completion tokens: cost = 83_000.
		const hold = PROMPT_BOUND * IN + 40 * OUT;
		const cost = 3 * IN + 40 * OUT;
		expect(hold).toBe(1_132_000);
		expect(cost).toBe(83_000);
		const initial = 3 * hold; // 3_396_000 nano$ = $0.003396
		const k = await createKey({ balance_usd: usd(initial) });
		expect(k.balance_usd).toBe(0.003396);

		const body = { model: "test/slow", stream: true, max_tokens: 40, messages: [{ role: "user", content: "ping conc01" }] };
		const responses = await Promise.all(
			Array.from({ length: 50 }, async () => {
				const res = await chat(k.key, body);
				if (res.status === 200) return { status: 200, frames: await readSse(res), headers: res.headers, json: null };
				return { status: res.status, frames: [], headers: res.headers, json: (await res.json()) as ErrorBody };
			}),
		);

		const ok = responses.filter((r) => r.status === 200);
		const refused = responses.filter((r) => r.status === 402);
		expect(ok.length + refused.length, JSON.stringify(responses.map((r) => r.status))).toBe(50);
		// Balance minus holds hits exactly zero after the third hold: the fourth is refused.
		expect(ok.length).toBe(3);
		expect(refused.length).toBe(47);
		for (const r of refused) {
			const e = r.json?.error;
			expect(e?.code).toBe("insufficient_balance");
			expect(e?.type).toBe("insufficient_quota");
			expect(typeof e?.available_usd).toBe("number");
			expect(e?.available_usd as number).toBeLessThanOrEqual(0);
			expect(e?.required_usd).toBe(usd(hold));
			expect(e?.message).toContain("0.001132");
		}
		for (const r of ok) expect(r.frames.at(-1)).toBe("[DONE]");

		const end = await settledInfo(k.id, ok.length);
		expect(end.openHolds).toBe(0);
		expect(end.heldNanos).toBe(0);
		expect(end.balanceNanos).toBeGreaterThanOrEqual(-hold);
		expect(end.spentNanos).toBe(ok.length * cost);
		expect(end.balanceNanos).toBe(initial - ok.length * cost); // 12_000
		const rows = await usageOf(k.id, ok.length);
		expect(rows).toHaveLength(ok.length);
		const totalRecorded = rows.reduce((s, r) => s + r.cost_nanos, 0);
		expect(totalRecorded).toBe(initial - end.balanceNanos); // Σ records == Σ debits
		expect(totalRecorded).toBe(end.spentNanos); // == spent
		for (const r of rows)
			expect(r).toMatchObject({ status: "completed", prompt_tokens: 3, completion_tokens: 40, cost_nanos: cost });

		const view = await keyView(k.id);
		expect(view.balance_usd).toBe(usd(initial - 3 * cost));
		expect(view.spent_usd).toBe(usd(3 * cost));
		expect(view.open_holds).toBe(0);
	});

	it("50 concurrent fast requests: whatever passes is billed exactly once and nothing is left held", async () => {
		const initial = 3 * HOLD;
		const k = await createKey({ balance_usd: usd(initial) });
		const statuses = await Promise.all(
			Array.from({ length: 50 }, async () => {
				const res = await chat(k.key, { model: "test/ok", messages: [{ role: "user", content: ping() }] });
				const j = (await res.json()) as ErrorBody & Record<string, unknown>;
				if (res.status === 402) expect(j.error.code).toBe("insufficient_balance");
				return {
					status: res.status,
					cost: res.headers.get("x-venym-cost-usd"),
				};
			}),
		);
		const ok = statuses.filter((s) => s.status === 200);
		expect(ok.length + statuses.filter((s) => s.status === 402).length).toBe(50);
		expect(ok.length).toBeGreaterThanOrEqual(3);
		const end = await settledInfo(k.id, ok.length);
		expect(end.openHolds).toBe(0);
		expect(end.balanceNanos).toBeGreaterThanOrEqual(-HOLD);
		expect(end.spentNanos).toBe(ok.length * COMPLETED);
		expect(end.balanceNanos).toBe(initial - ok.length * COMPLETED);
		const debitedByHeaders = ok.reduce((s, r) => s + Math.round(Number(r.cost) * 1e9), 0);
		expect(debitedByHeaders).toBe(end.spentNanos);
		const rows = await usageOf(k.id, ok.length);
		expect(rows).toHaveLength(ok.length);
		expect(rows.reduce((s, r) => s + r.cost_nanos, 0)).toBe(end.spentNanos);
	});
});

describe("each outcome is billed as stated", () => {
	it("completed, non-stream: engine usage, cost = prompt × in + completion × out, headers match the ledger", async () => {
		const k = await createKey({ balance_usd: 10 });
		const since = await lastEngineId();
		const msg = ping();
		const res = await chat(k.key, { model: "test/ok", messages: [{ role: "user", content: msg }] });
		const body = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number } };
		expect(res.status).toBe(200);
		expect(body.usage).toEqual({ prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 });
		expect(res.headers.get("x-venym-cost-usd")).toBe("0.000009");
		expect(res.headers.get("x-venym-balance-usd")).toBe("9.999991");
		const requestId = res.headers.get("x-request-id");
		expect(requestId).toMatch(/^req_/);

		// Settled just after the response went out (README): the ledger then agrees with the headers.
		const now = await waitFor(async () => {
			const i = await info(k.id);
			return i.openHolds === 0 && i.spentNanos > 0 ? i : null;
		});
		expect(now.balanceNanos).toBe(10_000_000_000 - COMPLETED);
		expect(Number(res.headers.get("x-venym-balance-usd"))).toBe(usd(now.balanceNanos));
		expect(Number(res.headers.get("x-venym-cost-usd"))).toBe(usd(now.spentNanos));
		expect(now.openHolds).toBe(0);

		const [row] = await usageOf(k.id, 1);
		expect(row).toMatchObject({
			request_id: requestId,
			key_id: k.id,
			model: "test/ok",
			node: `${env.ENGINE_URL}/v1`,
			prompt_tokens: 3,
			completion_tokens: 3,
			total_tokens: 6,
			cost_nanos: 9_000,
			cost_usd: 0.000009,
			status: "completed",
			estimated: false,
		});
		expect(await engineCallsFor(since, msg)).toHaveLength(1);
	});

	it("completed, stream: the usage frame's tokens are what is billed", async () => {
		const k = await createKey({ balance_usd: 10 });
		const res = await chat(k.key, { model: "test/ok", stream: true, messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(200);
		const frames = await readSse(res);
		expect(frames.at(-1)).toBe("[DONE]");
		const usage = JSON.parse(frames.at(-2) as string).usage;
		expect(usage).toMatchObject({ prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 });
		const end = await settledInfo(k.id, 1);
		expect(end).toMatchObject({ balanceNanos: 10_000_000_000 - COMPLETED, spentNanos: COMPLETED, openHolds: 0 });
		const [row] = await usageOf(k.id, 1);
		expect(row).toMatchObject({
			request_id: res.headers.get("x-request-id"),
			status: "completed",
			estimated: false,
			prompt_tokens: 3,
			completion_tokens: 3,
			cost_nanos: COMPLETED,
			node: `${env.ENGINE_URL}/v1`,
		});
	});

	it("no usage from the engine, non-stream: estimated (prompt estimate + ~4 chars/token), record estimated", async () => {
		const k = await createKey({ balance_usd: 10 });
		const res = await chat(k.key, { model: "test/nousage", messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(200);
		const body = (await res.json()) as { usage: Record<string, number> };
		expect(body.usage).toEqual({ prompt_tokens: 7, completion_tokens: 5, total_tokens: 12 });
		expect(res.headers.get("x-venym-cost-usd")).toBe("0.000017");
		const [row] = await usageOf(k.id, 1);
		expect(row).toMatchObject({
			status: "completed",
			estimated: true,
			prompt_tokens: 7,
			completion_tokens: 5,
			cost_nanos: ESTIMATED,
			node: `${env.ENGINE_URL}/s/nousage/v1`,
		});
		expect((await info(k.id)).spentNanos).toBe(ESTIMATED);
	});

	it("no usage from the engine, stream: estimated from the forwarded text, record estimated", async () => {
		const k = await createKey({ balance_usd: 10 });
		const res = await chat(k.key, { model: "test/nousage", stream: true, messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(200);
		const frames = await readSse(res);
		expect(frames.at(-1)).toBe("[DONE]");
		expect(textDeltas(frames)).toHaveLength(17);
		const end = await settledInfo(k.id, 1);
		expect(end).toMatchObject({ spentNanos: ESTIMATED, balanceNanos: 10_000_000_000 - ESTIMATED, openHolds: 0 });
		const [row] = await usageOf(k.id, 1);
		expect(row).toMatchObject({
			status: "completed",
			estimated: true,
			prompt_tokens: 7,
			completion_tokens: 5,
			cost_nanos: ESTIMATED,
		});
	});

	it("client disconnects mid-stream: client_disconnected, prompt estimate + forwarded, the engine sees the abort", async () => {
		const k = await createKey({ balance_usd: 10 });
		const since = await lastEngineId();
		const msg = ping();
		const controller = new AbortController();
		const res = await SELF.fetch(`${BASE}/v1/chat/completions`, {
			method: "POST",
			headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
			body: JSON.stringify({ model: "test/slow", stream: true, messages: [{ role: "user", content: msg }] }),
			signal: controller.signal,
		});
		expect(res.status).toBe(200);
		const requestId = res.headers.get("x-request-id");
		const reader = (res.body as ReadableStream<Uint8Array>).getReader();
		const decoder = new TextDecoder();
		let raw = "";
		let contentFrames = 0;
		// Read until k = 4 content chunks have arrived, then walk away.
		while (contentFrames < 4) {
			const { value, done } = await reader.read();
			if (done) break;
			raw += decoder.decode(value, { stream: true });
			contentFrames = raw.split("\n\n").filter((f) => f.includes('"content"')).length;
		}
		await reader.cancel();
		controller.abort();
		const received = textDeltas(
			raw
				.split("\n\n")
				.filter((f) => f.startsWith("data: ") && f.includes('"content"'))
				.map((f) => f.slice(6)),
		);
		expect(received.startsWith(`Echo: ${msg}`)).toBe(true);

		const end = await settledInfo(k.id, 1);
		const [row] = await usageOf(k.id, 1);
		expect(row?.request_id).toBe(requestId);
		expect(row?.status).toBe("client_disconnected");
		expect(row?.estimated).toBe(true);
		expect(row?.prompt_tokens).toBe(7); // the gateway's prompt estimate: the engine's usage never came
		const minCompletion = Math.ceil(received.length / 4);
		expect(row?.completion_tokens).toBeGreaterThanOrEqual(minCompletion);
		// Forwarded, not the whole 40-word answer.
		expect(row?.completion_tokens).toBeLessThan(Math.ceil("Echo: ping XXXXXX".length / 4) + 37);
		expect(row?.completion_tokens).toBeLessThanOrEqual(minCompletion + 4);
		expect(row?.cost_nanos).toBe(7 * IN + (row?.completion_tokens as number) * OUT);
		expect(end.spentNanos).toBe(row?.cost_nanos);
		expect(end.balanceNanos).toBe(10_000_000_000 - (row?.cost_nanos as number));
		expect(end.openHolds).toBe(0);

		const calls = await waitFor(async () => {
			const c = await engineCallsFor(since, msg);
			return c.length === 1 && (c[0]?.aborted || c[0]?.finished) ? c : null;
		});
		expect(calls[0]?.aborted).toBe(true);
		expect(calls[0]?.finished).toBe(false);
	});

	it("client leaves a non-stream request mid-answer: client_disconnected, billed for what the engine generated, engine aborted", async () => {
		const k = await createKey({ balance_usd: 10 });
		const since = await lastEngineId();
		const msg = ping();
		const controller = new AbortController();
		const pending = SELF.fetch(`${BASE}/v1/chat/completions`, {
			method: "POST",
			headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
			// The engine is asked for a stream whatever the client asked: test/slow sends a word every 50 ms.
			body: JSON.stringify({ model: "test/slow", messages: [{ role: "user", content: msg }] }),
			signal: controller.signal,
		});
		await waitFor(async () => (await engineCallsFor(since, msg)).length === 1);
		controller.abort();
		await pending.then(
			(r) => r.body?.cancel(),
			() => undefined,
		);
		const end = await settledInfo(k.id, 1);
		const [row] = await usageOf(k.id, 1);
		expect(row).toMatchObject({ status: "client_disconnected", prompt_tokens: 7, estimated: true });
		// Far less than the 40 words the whole answer has: the engine was stopped when the client left.
		const completion = row?.completion_tokens ?? -1;
		expect(completion).toBeGreaterThanOrEqual(0);
		expect(completion).toBeLessThan(40);
		expect(row?.cost_nanos).toBe(7 * IN + completion * OUT);
		expect(end).toMatchObject({ spentNanos: 7 * IN + completion * OUT, openHolds: 0 });
		const calls = await waitFor(async () => {
			const c = await engineCallsFor(since, msg);
			return c[0]?.aborted || c[0]?.finished ? c : null;
		});
		expect(calls[0]?.aborted).toBe(true);
	});

	it("client disconnects while the gateway waits for a node (stream): settled, not left to expire", async () => {
		const k = await createKey({ balance_usd: 10 });
		const since = await lastEngineId();
		const msg = ping();
		const controller = new AbortController();
		const pending = SELF.fetch(`${BASE}/v1/chat/completions`, {
			method: "POST",
			headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
			body: JSON.stringify({ model: "test/all-hang", stream: true, messages: [{ role: "user", content: msg }] }),
			signal: controller.signal,
		});
		// The node never answers: the client gives up while the gateway waits for it.
		await waitFor(async () => (await engineCallsFor(since, msg)).some((c) => c.scenario === "hang"));
		controller.abort();
		await pending.then(
			(r) => r.body?.cancel(),
			() => undefined,
		);
		const end = await settledInfo(k.id, 1);
		const [row] = await usageOf(k.id, 1);
		expect(row).toMatchObject({ status: "client_disconnected", prompt_tokens: 7, completion_tokens: 0, cost_nanos: 7 * IN });
		expect(end).toMatchObject({ spentNanos: 7 * IN, openHolds: 0 });
		// No node after the one it was waiting for was tried.
		const calls = await engineCallsFor(since, msg);
		expect(calls.map((c) => c.scenario)).toEqual(["hang"]);
	});

	for (const stream of [false, true]) {
		it(`engine refuses before any content (test/refuses, ${stream ? "stream" : "non-stream"}): nothing charged, hold released`, async () => {
			const k = await createKey({ balance_usd: 10 });
			const since = await lastEngineId();
			const msg = ping();
			const res = await chat(k.key, { model: "test/refuses", stream, messages: [{ role: "user", content: msg }] });
			expect(res.status).toBe(400);
			const body = (await res.json()) as ErrorBody;
			expect(body.error.message).toBe("This model's maximum context length is 4096 tokens");
			const end = await settledInfo(k.id, 1);
			expect(end).toMatchObject({ balanceNanos: 10_000_000_000, spentNanos: 0, heldNanos: 0, openHolds: 0 });
			const [row] = await usageOf(k.id, 1);
			expect(row).toMatchObject({
				request_id: res.headers.get("x-request-id"),
				status: "engine_error",
				cost_nanos: 0,
				prompt_tokens: 0,
				completion_tokens: 0,
			});
			// Refused, not retried on the next node.
			const calls = await engineCallsFor(since, msg);
			expect(calls.map((c) => c.scenario)).toEqual(["bad400"]);
		});
	}

	for (const stream of [false, true]) {
		it(`every node down (test/all-down, ${stream ? "stream" : "non-stream"}): 502, nothing charged, hold released`, async () => {
			const k = await createKey({ balance_usd: 10 });
			const res = await chat(k.key, { model: "test/all-down", stream, messages: [{ role: "user", content: ping() }] });
			expect(res.status).toBe(502);
			expect(((await res.json()) as ErrorBody).error.code).toBe("upstream_unavailable");
			const end = await settledInfo(k.id, 1);
			expect(end).toMatchObject({ balanceNanos: 10_000_000_000, spentNanos: 0, heldNanos: 0, openHolds: 0 });
			const [row] = await usageOf(k.id, 1);
			expect(row).toMatchObject({ status: "failed", cost_nanos: 0, node: null });
		});
	}

	for (const stream of [false, true]) {
		it(`engine answers 200 with only an error (test/error200, ${stream ? "stream" : "non-stream"}): nothing charged`, async () => {
			const k = await createKey({ balance_usd: 10 });
			const res = await chat(k.key, { model: "test/error200", stream, messages: [{ role: "user", content: ping() }] });
			// An error before the first token is failed over like a 5xx; with no other node, a 502.
			expect(res.status).toBe(502);
			expect(((await res.json()) as ErrorBody).error.code).toBe("upstream_unavailable");
			const end = await settledInfo(k.id, 1);
			expect(end).toMatchObject({ balanceNanos: 10_000_000_000, spentNanos: 0, heldNanos: 0, openHolds: 0 });
			const [row] = await usageOf(k.id, 1);
			expect(row).toMatchObject({ status: "failed", cost_nanos: 0 });
		});
	}

	it("engine fails after content (test/midstream, stream): billed for what was forwarded, status engine_error", async () => {
		const k = await createKey({ balance_usd: 10 });
		const res = await chat(k.key, { model: "test/midstream", stream: true, messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(200);
		const frames = await readSse(res);
		const last = JSON.parse(frames.at(-1) as string) as ErrorBody;
		expect(last.error.code).toBe("upstream_unavailable");
		expect(frames).not.toContain("[DONE]");
		expect(textDeltas(frames)).toHaveLength(17); // "Echo: ping XXXXXX": 3 of 6 words
		const end = await settledInfo(k.id, 1);
		expect(end).toMatchObject({ spentNanos: ESTIMATED, balanceNanos: 10_000_000_000 - ESTIMATED, openHolds: 0 });
		const [row] = await usageOf(k.id, 1);
		expect(row).toMatchObject({
			status: "engine_error",
			estimated: true,
			prompt_tokens: 7,
			completion_tokens: 5,
			cost_nanos: ESTIMATED,
			node: `${env.ENGINE_URL}/s/midstream/v1`,
		});
	});

	it("engine connection cut after content (test/cut, stream): billed for what was forwarded, status engine_error", async () => {
		const k = await createKey({ balance_usd: 10 });
		const res = await chat(k.key, { model: "test/cut", stream: true, messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(200);
		const frames = await readSse(res);
		expect((JSON.parse(frames.at(-1) as string) as ErrorBody).error).toBeDefined();
		const [row] = await usageOf(k.id, 1);
		expect(row).toMatchObject({ status: "engine_error", completion_tokens: 5, cost_nanos: ESTIMATED, estimated: true });
		expect((await info(k.id)).spentNanos).toBe(ESTIMATED);
	});

	it("engine fails mid-answer (test/midstream, non-stream): 502, nothing charged", async () => {
		const k = await createKey({ balance_usd: 10 });
		const res = await chat(k.key, { model: "test/midstream", messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(502);
		const end = await settledInfo(k.id, 1);
		expect(end).toMatchObject({ spentNanos: 0, balanceNanos: 10_000_000_000, openHolds: 0 });
		const [row] = await usageOf(k.id, 1);
		expect(row).toMatchObject({ cost_nanos: 0, status: "engine_error" });
	});

	for (const stream of [false, true]) {
		it(`failover (test/failover, ${stream ? "stream" : "non-stream"}): exactly one settlement, naming the node that answered`, async () => {
			const k = await createKey({ balance_usd: 10 });
			const since = await lastEngineId();
			const msg = ping();
			const res = await chat(k.key, { model: "test/failover", stream, messages: [{ role: "user", content: msg }] });
			expect(res.status).toBe(200);
			if (stream) expect((await readSse(res)).at(-1)).toBe("[DONE]");
			else expect(res.headers.get("x-venym-cost-usd")).toBe("0.000009");
			const end = await settledInfo(k.id, 1);
			expect(end).toMatchObject({ spentNanos: COMPLETED, balanceNanos: 10_000_000_000 - COMPLETED, openHolds: 0 });
			// Settled, no hold left: flush the outbox, so a second settlement would show as a second row.
			await runDurableObjectAlarm(ledger(k.id));
			const rows = await usageOf(k.id, 1);
			expect(rows).toHaveLength(1);
			expect(rows[0]).toMatchObject({
				request_id: res.headers.get("x-request-id"),
				status: "completed",
				node: `${env.ENGINE_URL}/s/ok/v1`,
				cost_nanos: COMPLETED,
				estimated: false,
			});
			// The router's order: whichever broken nodes it tried (each once), then the healthy one.
			const calls = await engineCallsFor(since, msg);
			expect(calls.at(-1)?.scenario).toBe("ok");
			expect(new Set(calls.map((c) => c.scenario)).size).toBe(calls.length);
			expect((await info(k.id)).spentNanos).toBe(COMPLETED);
		});
	}
});

describe("credits", () => {
	it("a top-up revives a key that got 402; credits are idempotent by Idempotency-Key", async () => {
		// Exactly one completed request's worth.
		const k = await createKey({ balance_usd: usd(COMPLETED) });
		expect(k.balance_usd).toBe(0.000009);
		const first = await chat(k.key, { model: "test/ok", messages: [{ role: "user", content: ping() }] });
		expect(first.status).toBe(200);
		expect(first.headers.get("x-venym-balance-usd")).toBe("0");

		const refused = await chat(k.key, { model: "test/ok", messages: [{ role: "user", content: ping() }] });
		expect(refused.status).toBe(402);
		const err = ((await refused.json()) as ErrorBody).error;
		expect(err).toMatchObject({ code: "insufficient_balance", available_usd: 0, required_usd: usd(HOLD) });
		expect(err.message).toContain("$0.000000");
		expect(err.message).toContain("$0.003052");

		const topUp = () =>
			admin(`/keys/${k.id}/credits`, {
				method: "POST",
				headers: { "idempotency-key": "topup-1" },
				body: JSON.stringify({ amount_usd: 0.01, note: "top-up" }),
			});
		const c1 = await topUp();
		expect(c1.status).toBe(200);
		expect(await c1.json()).toEqual({ id: k.id, balance_usd: 0.01, applied: true });
		const c2 = await topUp();
		expect(await c2.json()).toEqual({ id: k.id, balance_usd: 0.01, applied: false });
		const [c3, c4] = await Promise.all([topUp(), topUp()]);
		expect(((await c3.json()) as { applied: boolean }).applied).toBe(false);
		expect(((await c4.json()) as { applied: boolean }).applied).toBe(false);
		expect((await info(k.id)).balanceNanos).toBe(10_000_000);

		const revived = await chat(k.key, { model: "test/ok", messages: [{ role: "user", content: ping() }] });
		expect(revived.status).toBe(200);
		expect(revived.headers.get("x-venym-cost-usd")).toBe("0.000009");
		expect(revived.headers.get("x-venym-balance-usd")).toBe("0.009991");

		// A different key is a different credit.
		const other = await admin(`/keys/${k.id}/credits`, {
			method: "POST",
			headers: { "idempotency-key": "topup-2" },
			body: JSON.stringify({ amount_usd: 0.01 }),
		});
		expect(await other.json()).toEqual({ id: k.id, balance_usd: 0.019991, applied: true });

		const view = await keyView(k.id);
		expect(view.balance_usd).toBe(0.019991);
		expect(view.spent_usd).toBe(0.000018);
		await usageOf(k.id, 2);
	});

	it("concurrent top-ups with the same Idempotency-Key apply once", async () => {
		const k = await createKey({ balance_usd: 0 });
		const results = await Promise.all(
			Array.from({ length: 8 }, () =>
				admin(`/keys/${k.id}/credits`, {
					method: "POST",
					headers: { "idempotency-key": "burst" },
					body: JSON.stringify({ amount_usd: 1.5 }),
				}).then((r) => r.json() as Promise<{ balance_usd: number; applied: boolean }>),
			),
		);
		expect(results.filter((r) => r.applied)).toHaveLength(1);
		for (const r of results) expect(r.balance_usd).toBe(1.5);
		expect((await info(k.id)).balanceNanos).toBe(1_500_000_000);
	});

	it("refuses a credit of zero and an unknown key", async () => {
		const k = await createKey({ balance_usd: 0 });
		const zero = await admin(`/keys/${k.id}/credits`, { method: "POST", body: JSON.stringify({ amount_usd: 0 }) });
		expect(zero.status).toBe(400);
		const unknown = await admin("/keys/key_nope/credits", { method: "POST", body: JSON.stringify({ amount_usd: 1 }) });
		expect(unknown.status).toBe(404);
		expect((await info(k.id)).balanceNanos).toBe(0);
	});
});

describe("key views", () => {
	it("GET /admin/keys/{id} shows balance_usd and spent; GET /v1/key shows the caller's own key without the secret", async () => {
		const k = await createKey({ name: "views", balance_usd: 2.5 });
		const res = await chat(k.key, { model: "test/ok", messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(200);

		const view = await keyView(k.id);
		expect(view).toMatchObject({ id: k.id, name: "views", balance_usd: 2.499991, spent_usd: 0.000009, open_holds: 0 });
		expect(view).not.toHaveProperty("key");

		const own = await gw("/v1/key", { headers: { authorization: `Bearer ${k.key}` } });
		expect(own.status).toBe(200);
		const text = await own.text();
		expect(text).not.toContain(k.key);
		const body = JSON.parse(text) as Record<string, unknown>;
		expect(body).toMatchObject({ id: k.id, name: "views", balance_usd: 2.499991, spent_usd: 0.000009 });
		expect(body).not.toHaveProperty("key");
		expect(body).not.toHaveProperty("hash");
		expect(String(body.prefix).length).toBeLessThan(k.key.length);
		const ledgerNow = await info(k.id);
		expect(body.balance_usd).toBe(usd(ledgerNow.balanceNanos));
		expect(body.spent_usd).toBe(usd(ledgerNow.spentNanos));
	});

	it("GET /v1/key groups the key's limits", async () => {
		const k = await createKey({
			name: "limited",
			rpm: 60,
			spend_limit_usd: 5,
			spend_limit_period: "daily",
			allowed_models: ["test/ok"],
		});
		const body = (await (await gw("/v1/key", { headers: { authorization: `Bearer ${k.key}` } })).json()) as Record<
			string,
			unknown
		>;
		expect(body.limits).toEqual({
			rpm: 60,
			tpm: null,
			spend_limit_usd: 5,
			spend_limit_period: "daily",
			max_tokens: null,
			allowed_models: ["test/ok"],
			allowed_origins: null,
			expires_at: null,
		});
	});
});

describe("GET /admin/usage", () => {
	async function fill(k: CreatedKey, n: number): Promise<string[]> {
		const ids = await Promise.all(
			Array.from({ length: n }, async () => {
				const res = await chat(k.key, { model: "test/ok", messages: [{ role: "user", content: ping() }] });
				expect(res.status).toBe(200);
				return res.headers.get("x-request-id") as string;
			}),
		);
		await settledInfo(k.id, n);
		return ids;
	}

	it("filters by key_id and pages with limit + next_cursor without duplicates or gaps", async () => {
		const a = await createKey({ balance_usd: 10 });
		const b = await createKey({ balance_usd: 10 });
		const [idsA, idsB] = await Promise.all([fill(a, 11), fill(b, 4)]);

		const all = await usagePage(`?key_id=${a.id}&limit=1000`);
		expect(all.next_cursor).toBeNull();
		expect(all.data.map((r) => r.request_id).sort()).toEqual([...idsA].sort());
		expect(all.data.every((r) => r.key_id === a.id)).toBe(true);

		for (const limit of [1, 3, 4, 11]) {
			const seen: string[] = [];
			let cursor: string | null = null;
			let pages = 0;
			do {
				const page: UsagePage = await usagePage(
					`?key_id=${a.id}&limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
				);
				expect(page.data.length).toBeLessThanOrEqual(limit);
				seen.push(...page.data.map((r) => r.request_id));
				cursor = page.next_cursor;
				pages++;
				expect(pages).toBeLessThanOrEqual(12);
			} while (cursor);
			expect(new Set(seen).size, `limit ${limit}: duplicates`).toBe(seen.length);
			expect(seen, `limit ${limit}: same order as one page`).toEqual(all.data.map((r) => r.request_id));
			expect(pages).toBe(Math.ceil(11 / limit));
		}

		// Newest first.
		const times = all.data.map((r) => r.created_at);
		expect([...times].sort((x, y) => y - x)).toEqual(times);

		const other = await usagePage(`?key_id=${b.id}`);
		expect(other.data.map((r) => r.request_id).sort()).toEqual([...idsB].sort());
	});

	it("filters by since (unix seconds or ISO 8601)", async () => {
		const k = await createKey({ balance_usd: 10 });
		const early = await fill(k, 2);
		// Records carry created_at in whole seconds. Date the early ones an hour back instead of
		// waiting for the clock to cross a second: the boundary falls between them and the rest.
		await env.DB.prepare("UPDATE usage_records SET created_at = created_at - 3600000 WHERE key_id = ?").bind(k.id).run();
		const boundary = Math.floor(Date.now() / 1000) - 60;
		const late = await fill(k, 3);

		const bySeconds = await usagePage(`?key_id=${k.id}&since=${boundary}`);
		expect(bySeconds.data.map((r) => r.request_id).sort()).toEqual([...late].sort());
		for (const r of bySeconds.data) expect(r.created_at).toBeGreaterThanOrEqual(boundary);

		const iso = new Date(boundary * 1000).toISOString();
		const byIso = await usagePage(`?key_id=${k.id}&since=${encodeURIComponent(iso)}`);
		expect(byIso.data.map((r) => r.request_id).sort()).toEqual([...late].sort());

		const everything = await usagePage(`?key_id=${k.id}&since=0`);
		expect(everything.data.map((r) => r.request_id).sort()).toEqual([...early, ...late].sort());

		const future = await usagePage(`?key_id=${k.id}&since=${boundary + 3600}`);
		expect(future.data).toEqual([]);
		expect(future.next_cursor).toBeNull();

		// since and paging together.
		const p1 = await usagePage(`?key_id=${k.id}&since=${boundary}&limit=2`);
		expect(p1.data).toHaveLength(2);
		expect(p1.next_cursor).not.toBeNull();
		const p2 = await usagePage(
			`?key_id=${k.id}&since=${boundary}&limit=2&cursor=${encodeURIComponent(p1.next_cursor as string)}`,
		);
		expect(p2.data).toHaveLength(1);
		expect(p2.next_cursor).toBeNull();
		expect([...p1.data, ...p2.data].map((r) => r.request_id).sort()).toEqual([...late].sort());

		const bad = await admin(`/usage?since=yesterday`);
		expect(bad.status).toBe(400);
		expect(((await bad.json()) as ErrorBody).error.param).toBe("since");
	});

	it("usage requires the admin token", async () => {
		const k = await createKey({ balance_usd: 1 });
		expect((await gw("/admin/usage")).status).toBe(401);
		expect((await gw("/admin/usage", { headers: { authorization: `Bearer ${k.key}` } })).status).toBe(401);
	});
});
