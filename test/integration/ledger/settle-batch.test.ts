/**
 * Settlement batches (src/ledger/settle-batch.ts) in workerd with the real KeyLedger and D1:
 * concurrent requests of one key settle in fewer ledger calls than requests, and the books still
 * balance to the nano-dollar; a batch replaying a settled request debits it once. (How the queue
 * handles a failed or stuck call: test/unit/ledger/settle-batch.test.ts.)
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../../src/config";
import { measureChatPrompt } from "../../../src/estimate";
import * as A from "../../../src/ledger/allowance";
import type { SettleInput } from "../../../src/ledger/durable/rpc-types";
import { allowanceCounters } from "../../../src/ledger/edge-allowance-state";
import { holdNanos } from "../../../src/ledger/ledger-client";
import { type SettleManyLedger, settleCounters, settleInBatch } from "../../../src/ledger/settle-batch";
import { promptBound } from "../../../src/stream/usage-bounds";
import { admin, chat, createKey, gw, waitFor } from "../../support/gateway";
import { flushUsage, freshKeyId, ledger, record } from "../../support/ledger";

const config = loadConfig(env.GATEWAY_CONFIG);
const APP = "https://app.example";

/** One request of a mixed load: what kind, the status it got, and its request id (when it got one). */
interface Sent {
	kind: string;
	status: number;
	requestId: string | null;
}

/**
 * One request of the mixed load, by `i`: plain and streamed answers, engine errors before and
 * after content, a cut connection, an engine without usage, a refusal, a fallback to a dearer
 * model, and a slow stream. (Clients that walk away are left out: under load in this harness an
 * aborted request can leave its hold open with batching off too, so it would not test batching.)
 */
async function mixed(key: string, i: number, headers: Record<string, string> = {}): Promise<Sent> {
	const kinds = [
		["test/ok", false],
		["test/ok", true],
		["test/midstream", true],
		["test/cut", true],
		["test/nousage", true],
		["test/refuses", false],
		["test/slow", true],
		["test/fb-down", false],
		["test/midstream", false],
		["test/nousage", false],
	] as const;
	const [model, stream] = kinds[i % kinds.length] as readonly [string, boolean];
	const kind = `${model}${stream ? ":stream" : ""}`;
	const body = { model, stream, messages: [{ role: "user", content: `mixed ${i}` }], max_tokens: 8 };
	const res = await chat(key, body, { headers });
	await res.text().catch(() => "");
	return { kind, status: res.status, requestId: res.headers.get("x-request-id") };
}

/** The D1 usage rows of a key, once its ledger flushed them. */
async function usageRows(keyId: string) {
	await flushUsage(ledger(keyId));
	const rows = await env.DB.prepare("SELECT request_id, key_id, cost_nanos, model, status FROM usage_records WHERE key_id = ?")
		.bind(keyId)
		.all<{ request_id: string; key_id: string; cost_nanos: number; model: string; status: string }>();
	return rows.results;
}

/**
 * The money invariants of a key after a load: every request that got past the hold has exactly
 * one usage record, the records add up to the ledger's debits, the balance is credits less debits
 * to the nano-dollar, and nothing is held.
 */
async function expectBooksBalance(keyId: string, creditNanos: number, settledIds: string[], unknown = 0) {
	await waitFor(async () => (await ledger(keyId).info()).openHolds === 0, 10_000);
	const rows = await usageRows(keyId);
	const ids = rows.map((r) => r.request_id);
	expect(new Set(ids).size).toBe(ids.length);
	for (const id of settledIds) expect(ids).toContain(id);
	// A client that left before it had an answer may still have held, and then settled: at most one row each.
	expect(ids.length - settledIds.length).toBeGreaterThanOrEqual(0);
	expect(ids.length - settledIds.length).toBeLessThanOrEqual(unknown);
	const charged = rows.reduce((s, r) => s + r.cost_nanos, 0);
	const info = await ledger(keyId).info();
	expect(info.spentNanos).toBe(charged);
	expect(info.balanceNanos).toBe(creditNanos - charged);
	expect(info.openHolds).toBe(0);
	return { rows, charged, info };
}

/** The hold the gateway places for a test/ok chat of this body (authorize-chat.ts). */
function okHold(body: Record<string, unknown>, maxTokens: number): number {
	const model = config.models.find((m) => m.id === "test/ok");
	if (!model) throw new Error("test/ok missing");
	return holdNanos(model, promptBound(model, measureChatPrompt(body).size), maxTokens);
}

describe("settlement batches", () => {
	it("settles 40 concurrent requests of a key in fewer ledger calls, each once, and the books balance", async () => {
		const k = await createKey({ balance_usd: 50 });
		const before = { ...settleCounters };
		const answers = await Promise.all(
			Array.from({ length: 40 }, async (_, i) => {
				const res = await chat(k.key, { model: "test/ok", messages: [{ role: "user", content: `batch ${i}` }], max_tokens: 8 });
				expect(res.status).toBe(200);
				await res.text();
				return res.headers.get("x-request-id");
			}),
		);
		expect(new Set(answers).size).toBe(40);
		await waitFor(async () => (await ledger(k.id).info()).openHolds === 0, 10_000);
		const settlements = settleCounters.settlements - before.settlements;
		const calls = settleCounters.calls - before.calls;
		expect(settlements).toBeGreaterThanOrEqual(40);
		// Requests that ended while a settlement call was out went together in the next one.
		expect(calls).toBeLessThan(settlements);
		expect(settleCounters.largest).toBeGreaterThan(1);

		await flushUsage(ledger(k.id));
		const rows = await env.DB.prepare("SELECT request_id, cost_nanos FROM usage_records WHERE key_id = ? ORDER BY request_id")
			.bind(k.id)
			.all<{ request_id: string; cost_nanos: number }>();
		expect(rows.results.map((r) => r.request_id).sort()).toEqual([...answers].sort());
		const charged = rows.results.reduce((s, r) => s + r.cost_nanos, 0);
		expect(charged).toBeGreaterThan(0);
		const info = await ledger(k.id).info();
		expect(info.balanceNanos).toBe(50_000_000_000 - charged);
		expect(info.spentNanos).toBe(charged);
		expect(info.heldNanos).toBe(0);
		const view = (await (await admin(`/keys/${k.id}`)).json()) as { balance_usd: number };
		expect(view.balance_usd).toBeCloseTo((50_000_000_000 - charged) / 1e9, 9);
	});

	it("debits once a request that a batch carries twice or that was settled before", async () => {
		const keyId = freshKeyId("batch", "replay");
		const stub = ledger(keyId);
		await stub.credit({ keyId, amountNanos: 1_000_000, idempotencyKey: "seed" });
		const one = { requestId: "r-one", costNanos: 300, record: record(keyId) };
		const two = { requestId: "r-two", costNanos: 200, record: record(keyId) };
		expect(await stub.settle(one)).toMatchObject({ applied: true, balanceNanos: 999_700 });
		const answers = await stub.settleMany([one, two, two]);
		expect(answers).toEqual([
			{ requestId: "r-one", costNanos: 300, balanceNanos: 999_700, applied: false },
			{ requestId: "r-two", costNanos: 200, balanceNanos: 999_500, applied: true },
			{ requestId: "r-two", costNanos: 200, balanceNanos: 999_500, applied: false },
		]);
		expect(await stub.info()).toMatchObject({ balanceNanos: 999_500, spentNanos: 500, outboxSize: 2 });
	});

	it("keeps the books exact for 80 mixed concurrent requests of a key and its token, beside another key", async () => {
		const k = await createKey({ balance_usd: 50 });
		const other = await createKey({ balance_usd: 50 });
		const minted = await gw("/v1/tokens", {
			method: "POST",
			headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
			body: JSON.stringify({ allowed_origins: [APP] }),
		});
		expect(minted.status).toBe(201);
		const token = (await minted.json()) as { token: string; id: string };
		const before = { ...settleCounters };
		const sent = await Promise.all(
			Array.from({ length: 80 }, (_, i) => {
				if (i % 4 === 1) return mixed(token.token, i, { origin: APP });
				if (i % 8 === 3) return mixed(other.key, i);
				return mixed(k.key, i);
			}),
		);
		const mine = sent.filter((_, i) => i % 8 !== 3);
		const theirs = sent.filter((_, i) => i % 8 === 3);
		for (const s of sent) {
			expect(s.requestId, s.kind).toBeTruthy();
			expect([200, 400, 502], `${s.kind}: ${s.status}`).toContain(s.status);
		}
		// Every request held money, so every one settled once, in its payer's ledger only.
		const known = (list: Sent[]) => list.filter((s) => s.requestId !== null).map((s) => s.requestId as string);
		const gone = (list: Sent[]) => list.filter((s) => s.requestId === null).length;
		const a = await expectBooksBalance(k.id, 50_000_000_000, known(mine), gone(mine));
		const b = await expectBooksBalance(other.id, 50_000_000_000, known(theirs), gone(theirs));
		expect(settleCounters.settlements - before.settlements).toBeGreaterThanOrEqual(80 - gone(sent));
		expect(settleCounters.calls - before.calls).toBeLessThan(settleCounters.settlements - before.settlements);
		expect(a.charged).toBeGreaterThan(0);
		expect(b.charged).toBeGreaterThan(0);
		expect(a.info.heldNanos).toBe(0);
		expect(b.info.heldNanos).toBe(0);
		// Nothing landed in a ledger of the token's own.
		expect((await ledger(token.id).info()).spentNanos).toBe(0);
		const strays = await env.DB.prepare("SELECT COUNT(*) AS n FROM usage_records WHERE key_id = ?")
			.bind(token.id)
			.first<{ n: number }>();
		expect(strays?.n).toBe(0);
		// The fallback model served and priced the request that asked for test/fb-down.
		const fallback = a.rows.filter((r) => r.model === "test/fb-dear");
		expect(fallback.length).toBeGreaterThan(0);
		const view = (await (await admin(`/keys/${k.id}`)).json()) as { balance_usd: number; held_usd: number };
		expect(view.held_usd).toBe(0);
	});

	it("refuses with 402 when a near-empty balance is spent, never far below zero, and settles every admitted request once", async () => {
		const body = { model: "test/ok", messages: [{ role: "user", content: "nearly broke" }], max_tokens: 50 };
		const hold = okHold(body, 50);
		// Room for about six holds at once.
		const creditNanos = 6 * hold + 1;
		const k = await createKey({ balance_usd: creditNanos / 1e9 });
		const info0 = await ledger(k.id).info();
		expect(info0.balanceNanos).toBe(creditNanos);
		const sent: Sent[] = [];
		// Three waves: what the first spent limits the next.
		for (let wave = 0; wave < 3; wave++) {
			const got = await Promise.all(
				Array.from({ length: 30 }, async (_, i) => {
					const res = await chat(k.key, { ...body, stream: i % 2 === 0 });
					await res.text();
					return { kind: "ok", status: res.status, requestId: res.headers.get("x-request-id") };
				}),
			);
			sent.push(...got);
		}
		const refused = sent.filter((s) => s.status === 402);
		const admitted = sent.filter((s) => s.status === 200);
		expect(refused.length + admitted.length).toBe(sent.length);
		expect(refused.length).toBeGreaterThan(0);
		expect(admitted.length).toBeGreaterThan(0);
		const { info, rows } = await expectBooksBalance(
			k.id,
			creditNanos,
			admitted.map((s) => s.requestId as string),
		);
		for (const r of rows) expect(r.cost_nanos).toBeLessThanOrEqual(hold);
		// Below zero by at most one request's hold (no engine reported beyond the estimate here).
		expect(info.balanceNanos).toBeGreaterThan(-hold);
		expect(info.heldNanos).toBe(0);
	});

	it("keeps the books exact for allowance-served concurrent requests, and gives the allowance back", async () => {
		const body = { model: "test/ok", messages: [{ role: "user", content: "hi there" }], max_tokens: 5 };
		const k = await createKey({ balance_usd: 1_000_000 });
		const ids: string[] = [];
		for (let i = 0; i < A.ALLOWANCE_WARMUP_REQUESTS; i++) {
			const res = await chat(k.key, body);
			expect(res.status).toBe(200);
			await res.text();
			ids.push(res.headers.get("x-request-id") as string);
		}
		await waitFor(async () => (await ledger(k.id).allowanceInfo()).allowances === 1, 5000);
		const taken = allowanceCounters.taken;
		const minted = await gw("/v1/tokens", {
			method: "POST",
			headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
			body: JSON.stringify({ allowed_origins: [APP] }),
		});
		const token = (await minted.json()) as { token: string; id: string };
		const sent = await Promise.all(
			Array.from({ length: 60 }, (_, i) => (i % 3 === 0 ? mixed(token.token, i, { origin: APP }) : mixed(k.key, i))),
		);
		for (const s of sent) {
			expect(s.requestId, s.kind).toBeTruthy();
			if (s.requestId) ids.push(s.requestId);
		}
		expect(allowanceCounters.taken - taken).toBeGreaterThan(0);
		const { info } = await expectBooksBalance(k.id, 1_000_000 * 1e9, ids, sent.filter((s) => s.requestId === null).length);
		// Idle, the allowance goes back (or expires): nothing stays held.
		await waitFor(async () => (await ledger(k.id).allowanceInfo()).allowances === 0, 8000);
		expect((await ledger(k.id).info()).heldNanos).toBe(0);
		const view = (await (await admin(`/keys/${k.id}`)).json()) as { held_usd: number; balance_usd: number };
		expect(view.held_usd).toBe(0);
		expect(info.openHolds).toBe(0);
	});

	it("debits once when a batch call lands and then fails on its way back, and when one batch carries a request twice", async () => {
		const keyId = freshKeyId("batch", "lost-answer");
		await ledger(keyId).credit({ keyId, amountNanos: 1_000_000, idempotencyKey: "seed" });
		let calls = 0;
		// Every other call lands in the ledger and then throws, as a connection lost on the way back would.
		const flaky = (): SettleManyLedger => {
			const real = ledger(keyId);
			return {
				settleMany: async (inputs: SettleInput[]) => {
					const answers = await real.settleMany(inputs);
					if (calls++ % 2 === 0) throw new Error("lost on the way back");
					return answers;
				},
				settle: (i: SettleInput) => real.settle(i),
			};
		};
		const inputs = Array.from({ length: 30 }, (_, i) => ({ requestId: `r${i % 25}`, costNanos: 100 + i, record: record(keyId) }));
		const results = await Promise.all(inputs.map((i) => settleInBatch(flaky, keyId, i)));
		// r0..r4 twice: whichever landed first is the one debited, and both answers say so.
		for (let i = 0; i < 25; i++) {
			const mine = results.filter((r) => r.requestId === `r${i}`);
			expect(new Set(mine.map((r) => r.costNanos)).size).toBe(1);
			expect(mine.filter((r) => r.applied).length).toBeLessThanOrEqual(1);
		}
		const info = await ledger(keyId).info();
		const debited = new Map(results.map((r) => [r.requestId, r.costNanos]));
		const total = [...debited.values()].reduce((s, c) => s + c, 0);
		expect(debited.size).toBe(25);
		expect(info).toMatchObject({ spentNanos: total, balanceNanos: 1_000_000 - total, outboxSize: 25 });
	});
});
