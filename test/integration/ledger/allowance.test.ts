/**
 * Edge allowances (docs/allowances.md) in workerd with real Durable Objects and D1. The test
 * config grants allowances only to keys holding 200 million holds (`ledger.allowance_min_headroom`)
 * and lets them live 3 s (`allowance_ttl_ms`), so these tests use keys of up to $1,000,000 and
 * every other test file keeps the synchronous hold. Other isolates are simulated by granting
 * allowances straight through the ledger's stub and running the isolate arithmetic
 * (src/ledger/allowance.ts) on them.
 */
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../../src/config";
import { measureChatPrompt } from "../../../src/estimate";
import * as A from "../../../src/ledger/allowance";
import { allowanceCounters, allowanceTuning, localAllowance } from "../../../src/ledger/edge-allowance-state";
import { holdNanos } from "../../../src/ledger/ledger-client";
import { promptBound } from "../../../src/stream/usage-bounds";
import {
	admin,
	engineRequestsSince as allSince,
	chat,
	createKey,
	engineRequests,
	gw,
	lastEngineId,
	releaseEngine,
	waitFor,
} from "../../support/gateway";
import { flushUsage, ledger, record } from "../../support/ledger";

const config = loadConfig(env.GATEWAY_CONFIG);
const TTL = config.ledger.allowance_ttl_ms;
const HEADROOM = config.ledger.allowance_min_headroom;
const MAX_TOKENS = 5;
/** The synchronous requests that warm a key up before its isolate asks for an allowance. */
const WARM = A.ALLOWANCE_WARMUP_REQUESTS;

/** Inference calls the engine received (health probes left out). */
async function engineRequestsSince(since: number) {
	return (await allSince(since)).filter((r) => /\/(chat\/completions|completions|embeddings)$/.test(r.path));
}

function body(extra: Record<string, unknown> = {}) {
	return { model: "test/ok", messages: [{ role: "user", content: "hi there" }], max_tokens: MAX_TOKENS, ...extra };
}

/** The hold the gateway places for `body()` (authorize-chat.ts), computed the same way. */
function chatHold(): number {
	const model = config.models.find((m) => m.id === "test/ok");
	if (!model) throw new Error("test/ok missing");
	return holdNanos(model, promptBound(model, measureChatPrompt(body()).size), MAX_TOKENS);
}

type MoneyView = { balance_usd: number; held_usd: number; reserved_usd: number; open_holds: number };

async function keyView(id: string): Promise<MoneyView> {
	const res = await admin(`/keys/${id}`);
	expect(res.status).toBe(200);
	return (await res.json()) as MoneyView;
}

/** The key's own view of itself (GET /v1/key). */
async function ownView(key: string): Promise<MoneyView> {
	const res = await gw("/v1/key", { headers: { authorization: `Bearer ${key}` } });
	expect(res.status).toBe(200);
	return (await res.json()) as MoneyView;
}

/** Waits until nothing of the key is in flight (no hold), then flushes its usage to D1; returns the D1 sum and count. */
async function settledUsage(keyId: string, count: number): Promise<{ n: number; total: number }> {
	await waitFor(async () => (await ledger(keyId).info()).openHolds === 0, 15_000);
	await flushUsage(ledger(keyId));
	return waitFor(async () => {
		const row = await env.DB.prepare(
			"SELECT COUNT(*) AS n, COALESCE(SUM(cost_nanos), 0) AS total FROM usage_records WHERE key_id = ?",
		)
			.bind(keyId)
			.first<{ n: number; total: number }>();
		return row && row.n >= count ? row : null;
	}, 10_000);
}

/** Whether a request of `body()` arriving within `ms` would still be served from the isolate's allowance. */
function takeableFor(keyId: string, ms: number): boolean {
	const a = localAllowance(keyId);
	return a !== undefined && A.canTake(a, chatHold(), 0, Date.now() + ms);
}

/** A key the test config grants allowances to, warmed: its first WARM requests placed holds, the last asked for an allowance. */
async function warmKey(balanceUsd = 1_000_000) {
	const k = await createKey({ balance_usd: balanceUsd });
	for (let i = 0; i < WARM; i++) {
		expect(await ledger(k.id).allowanceInfo()).toMatchObject({ allowances: 0 });
		const res = await chat(k.key, body());
		expect(res.status).toBe(200);
		await res.text();
	}
	await waitFor(async () => (await ledger(k.id).allowanceInfo()).allowances === 1, 5000);
	await waitFor(async () => (await ledger(k.id).info()).openHolds === 0, 5000);
	return k;
}

describe("edge allowances through the worker", () => {
	// These tests look at an allowance between requests: it must not be given back for being idle meanwhile.
	beforeAll(() => {
		allowanceTuning.idleRelease = false;
	});
	afterAll(() => {
		allowanceTuning.idleRelease = true;
	});

	it("serves requests after the first from the isolate's allowance, shown as reserved_usd apart from held_usd", async () => {
		const since = await lastEngineId();
		const k = await warmKey();
		const { allowanceNanos } = await ledger(k.id).allowanceInfo();
		const hold = chatHold();
		expect(allowanceNanos).toBe(A.ALLOWANCE_HOLDS * hold);
		expect(localAllowance(k.id)?.remaining).toBe(allowanceNanos);
		// Nothing in flight: held_usd is 0, the allowance shows as reserved_usd, on both views.
		for (const view of [await keyView(k.id), await ownView(k.key)]) {
			expect(view.open_holds).toBe(0);
			expect(view.held_usd).toBe(0);
			expect(view.reserved_usd).toBeCloseTo(allowanceNanos / 1e9, 9);
		}

		const taken = allowanceCounters.taken;
		for (let i = 0; i < 5; i++) {
			const res = await chat(k.key, body());
			expect(res.status).toBe(200);
			// The last balance the isolate knows, less this request's cost: approximate, but never above the start.
			expect(Number(res.headers.get("x-venym-balance-usd"))).toBeLessThan(1_000_000);
			await res.text();
		}
		expect(allowanceCounters.taken - taken).toBe(5);
		expect((await engineRequestsSince(since)).length).toBe(WARM + 5);
		const usage = await settledUsage(k.id, WARM + 5);
		const info = await ledger(k.id).info();
		// Every settled request debited once; the records add up to the debits.
		expect(usage.n).toBe(WARM + 5);
		expect(usage.total).toBe(1_000_000 * 1e9 - info.balanceNanos);
		// The allowance's reservation went down by exactly what its requests cost.
		const after = await ledger(k.id).allowanceInfo();
		const costOfFive = usage.total - (await firstCost(k.id));
		expect(after.allowanceNanos).toBe(allowanceNanos - costOfFive);
		expect(info.heldNanos).toBe(after.allowanceNanos);
	});

	it("returns reserved_usd to 0 once its allowances expire with nothing in flight", async () => {
		const k = await warmKey();
		expect((await keyView(k.id)).reserved_usd).toBeGreaterThan(0);
		await waitFor(async () => {
			if ((await ledger(k.id).allowanceInfo()).allowances > 0) {
				await runDurableObjectAlarm(ledger(k.id));
				return false;
			}
			return true;
		}, TTL + 5000);
		const view = await keyView(k.id);
		expect(view).toMatchObject({ held_usd: 0, reserved_usd: 0, open_holds: 0 });
		// The isolate's copy is past use too: the next request takes the synchronous path and asks again.
		expect(A.isStale(localAllowance(k.id) as A.LocalAllowance, Date.now())).toBe(true);
	});

	it("covers the embeddings lane the same way", async () => {
		const k = await warmKey();
		const embed = () =>
			gw("/v1/embeddings", {
				method: "POST",
				headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
				body: JSON.stringify({ model: "test/embed", input: "hello" }),
			});
		expect((await embed()).status).toBe(200);
		await waitFor(async () => localAllowance(k.id)?.remaining !== undefined);
		const taken = allowanceCounters.taken;
		const res = await embed();
		expect(res.status).toBe(200);
		expect(allowanceCounters.taken - taken).toBe(1);
		await settledUsage(k.id, WARM + 2);
	});

	it("moves a request that outlives its allowance into a hold of its own, and debits it once", async () => {
		// A key whose allowance has room to be taken from for a while yet (a slow warm-up can leave too
		// little of its 3 s: then the request would rightly take the synchronous path), then a request
		// that runs until this test releases it: past its 3 s allowance however slow the machine.
		let k = await warmKey();
		for (let tries = 1; tries < 3 && !takeableFor(k.id, 500); tries++) k = await warmKey();
		expect(takeableFor(k.id, 500)).toBe(true);
		const before = await ledger(k.id).info();
		const taken = allowanceCounters.taken;
		const mark = `outlives-${crypto.randomUUID()}`;
		const pending = chat(k.key, { ...body(), model: "test/gated", messages: [{ role: "user", content: mark }] });
		// Taken from the allowance (no hold), then adopted into a hold of its own before the allowance expires.
		await waitFor(async () => (await engineRequests({ contains: mark })).length === 1);
		expect(allowanceCounters.taken - taken).toBe(1);
		await waitFor(async () => (await ledger(k.id).info()).openHolds === 1, TTL + 10_000);
		expect(await releaseEngine(mark)).toBe(1);
		const res = await pending;
		expect(res.status).toBe(200);
		await res.text();
		await settledUsage(k.id, WARM + 1);
		const after = await ledger(k.id).info();
		const rows = await env.DB.prepare("SELECT cost_nanos FROM usage_records WHERE key_id = ? AND model = 'test/gated'")
			.bind(k.id)
			.all<{ cost_nanos: number }>();
		expect(rows.results.length).toBe(1);
		expect(before.balanceNanos - after.balanceNanos).toBe(rows.results[0]?.cost_nanos);
	});

	it("keeps every invariant for 60 concurrent requests beside other isolates' allowances, near the headroom", async () => {
		const hold = chatHold();
		// Just above the headroom: the worker's isolate gets an allowance, the simulated isolates take the rest.
		const startNanos = Math.ceil(HEADROOM * hold * 1.2);
		const k = await warmKey(Math.ceil(startNanos / 1e9));
		const stub = ledger(k.id);
		const start = (await stub.info()).balanceNanos + (await firstCost(k.id));
		// Three other isolates, each granted a fifth of the headroom in holds: afterwards no grant fits any more.
		const others: A.LocalAllowance[] = [];
		for (let i = 0; i < 3; i++) {
			const id = `alw_sim_${i}_${crypto.randomUUID().slice(0, 6)}`;
			const want = Math.floor(HEADROOM / 5) * hold;
			const g = await stub.grant({
				payerKeyId: k.id,
				allowanceId: id,
				holdNanos: hold,
				wantNanos: want,
				ttlMs: 60_000,
				minHeadroom: HEADROOM,
				extend: false,
			});
			if (g.ok) others.push(A.startAllowance(id, g, Date.now(), want));
		}
		expect(others.length).toBeGreaterThan(0);
		const since = await lastEngineId();
		let simulatedCost = 0;
		let simulatedCount = 0;
		const simulated = others.flatMap((a, i) =>
			Array.from({ length: 10 }, async (_, j) => {
				if (!A.take(a, hold, 0, Date.now())) return;
				const cost = Math.floor(hold / (j + 2));
				simulatedCost += cost;
				simulatedCount++;
				const r = await stub.settle({
					requestId: `sim_${i}_${j}_${k.id}`,
					costNanos: cost,
					record: record(k.id),
					allowanceId: a.id,
				});
				A.settled(a, hold, cost, true);
				expect(r.applied).toBe(true);
			}),
		);
		const through = Array.from({ length: 60 }, async (_, i) => {
			const res = await chat(k.key, body(i % 3 === 0 ? { stream: true } : {}));
			expect(res.status).toBe(200);
			await res.text();
		});
		await Promise.all([...simulated, ...through]);
		expect((await engineRequestsSince(since)).length).toBe(60);
		const usage = await settledUsage(k.id, WARM + 60 + simulatedCount);
		// One read inside the ledger: an allowance refill still under way could otherwise land between two calls.
		const { info, allowanceNanos } = await runInDurableObject(stub, (ledgerObject) => ({
			info: ledgerObject.info(),
			allowanceNanos: ledgerObject.allowanceInfo().allowanceNanos,
		}));
		// Debited exactly once each: the usage records in D1 (the simulated isolates' too) add up to what left the balance.
		expect(usage.n).toBe(WARM + 60 + simulatedCount);
		expect(simulatedCost).toBeGreaterThan(0);
		expect(usage.total).toBe(start - info.balanceNanos);
		// Nothing in flight: only allowances are held, and they never exceed the balance.
		expect(info.heldNanos).toBe(allowanceNanos);
		expect(info.heldNanos).toBeLessThanOrEqual(info.balanceNanos);
		expect(info.balanceNanos).toBeGreaterThan(-hold);
		for (const a of others) expect(a.remaining + a.inFlight).toBeLessThanOrEqual(allowanceNanos);
	});

	it("never grants an allowance to a key with rpm or a spend cap: 429 and 403 stay exact and reach no engine", async () => {
		// An isolate asks for an allowance right after a synchronous hold (ledger-client.ts afterSyncHold): none may be asked for.
		const grants = allowanceCounters.grants;
		const limited = await createKey({ balance_usd: 1_000_000, rpm: 3 });
		const since = await lastEngineId();
		for (let i = 0; i < 3; i++) expect((await chat(limited.key, body())).status).toBe(200);
		const refused = await chat(limited.key, body());
		expect(refused.status).toBe(429);
		expect((await engineRequestsSince(since)).length).toBe(3);

		const capped = await createKey({ balance_usd: 1_000_000, spend_limit_usd: 0.000001 });
		const since2 = await lastEngineId();
		expect((await chat(capped.key, body())).status).toBe(200);
		await waitFor(async () => (await ledger(capped.id).info()).openHolds === 0);
		const over = await chat(capped.key, body());
		expect(over.status).toBe(403);
		expect((await engineRequestsSince(since2)).length).toBe(1);

		expect(allowanceCounters.grants).toBe(grants);
		expect((await ledger(limited.id).allowanceInfo()).allowances).toBe(0);
		expect((await ledger(capped.id).allowanceInfo()).allowances).toBe(0);
		expect(localAllowance(limited.id)).toBeUndefined();
		expect(localAllowance(capped.id)).toBeUndefined();
	});

	it("answers 402 exactly near the bottom, with no allowance and no engine call", async () => {
		const k = await createKey({ balance_usd: 0.00003 });
		const since = await lastEngineId();
		let served = 0;
		let res = await chat(k.key, body());
		// Admitted while anything is available, exactly as without allowances; then 402.
		while (res.status === 200 && served < 20) {
			served++;
			await res.text();
			await waitFor(async () => (await ledger(k.id).info()).openHolds === 0);
			expect((await ledger(k.id).info()).balanceNanos).toBeGreaterThan(-chatHold());
			res = await chat(k.key, body());
		}
		expect(res.status).toBe(402);
		expect(served).toBeGreaterThan(0);
		expect((await engineRequestsSince(since)).length).toBe(served);
		const info = await ledger(k.id).info();
		expect(info.balanceNanos).toBeGreaterThan(-chatHold());
		expect((await ledger(k.id).allowanceInfo()).allowances).toBe(0);
	});

	it("stops a revoked key at its next ledger reply even while its lookup is still cached, and at once through DELETE", async () => {
		const k = await warmKey();
		const stub = ledger(k.id);
		// As the admin call does, without touching the key's row or its cached lookup (a stale isolate).
		await stub.revoke({ change: "revoked", scope: k.id });
		const since = await lastEngineId();
		// Taken before any ledger reply told this isolate: served from the allowance (at most this one).
		const first = await chat(k.key, body());
		expect(first.status).toBe(200);
		await first.text();
		// Its settlement's reply says the allowance is revoked: the isolate drops it and gives back what it does not need.
		await waitFor(async () => localAllowance(k.id) === undefined);
		await waitFor(async () => (await stub.allowanceInfo()).allowanceNanos === 0);
		const next = await chat(k.key, body());
		expect(next.status).toBe(401);
		expect(((await next.json()) as { error: { code: string } }).error.code).toBe("invalid_api_key");
		expect((await engineRequestsSince(since)).length).toBe(1);
		const g = await stub.grant({
			payerKeyId: k.id,
			allowanceId: "alw_after",
			holdNanos: 1,
			wantNanos: 10,
			ttlMs: TTL,
			minHeadroom: 2,
			extend: false,
		});
		expect(g).toMatchObject({ ok: false, reason: "revoked" });

		const k2 = await warmKey();
		expect((await admin(`/keys/${k2.id}`, { method: "DELETE" })).status).toBe(200);
		const since2 = await lastEngineId();
		expect((await chat(k2.key, body())).status).toBe(401);
		expect((await engineRequestsSince(since2)).length).toBe(0);
	});

	it("revokes allowances on PATCH and grants none while cached lookups may be stale", async () => {
		const k = await warmKey();
		expect((await admin(`/keys/${k.id}`, { method: "PATCH", body: JSON.stringify({ name: "renamed" }) })).status).toBe(200);
		const res = await chat(k.key, body());
		expect(res.status).toBe(200);
		await res.text();
		await waitFor(async () => localAllowance(k.id) === undefined);
		const g = await ledger(k.id).grant({
			payerKeyId: k.id,
			allowanceId: "alw_paused",
			holdNanos: 1,
			wantNanos: 10,
			ttlMs: TTL,
			minHeadroom: 2,
			extend: false,
		});
		expect(g).toMatchObject({ ok: false, reason: "paused" });
		// The key itself still works, on the synchronous path.
		expect((await chat(k.key, body())).status).toBe(200);
	});
});

/** What the key's first WARM (synchronous) requests cost, from their settlements. */
async function firstCost(keyId: string): Promise<number> {
	return runInDurableObject(ledger(keyId), (_i, state) => {
		const rows = state.storage.sql
			.exec<{ cost: number }>("SELECT cost FROM settlements ORDER BY created_at, rowid LIMIT ?", WARM)
			.toArray();
		return rows.reduce((sum, r) => sum + r.cost, 0);
	});
}

describe("allowances follow traffic", () => {
	it("asks for none until a key is busy, and gives an idle one back within seconds, before it expires", async () => {
		const k = await createKey({ balance_usd: 1_000_000 });
		for (let i = 0; i < WARM - 1; i++) {
			const res = await chat(k.key, body());
			expect(res.status).toBe(200);
			await res.text();
		}
		await waitFor(async () => (await ledger(k.id).info()).openHolds === 0);
		// Sporadic traffic: exact synchronous holds only, nothing reserved once they settled.
		expect((await ledger(k.id).allowanceInfo()).allowances).toBe(0);
		expect((await keyView(k.id)).held_usd).toBe(0);

		const busy = await chat(k.key, body());
		expect(busy.status).toBe(200);
		await busy.text();
		await waitFor(async () => localAllowance(k.id) !== undefined, 5000);
		expect((await keyView(k.id)).reserved_usd).toBeGreaterThan(0);
		const taken = allowanceCounters.taken;
		const released = allowanceCounters.released;
		const served = await chat(k.key, body());
		expect(served.status).toBe(200);
		await served.text();
		expect(allowanceCounters.taken - taken).toBe(1);
		const grantedAt = Date.now();
		// Nothing runs on it and nobody takes from it: given back, not left reserved until it expires.
		await waitFor(async () => allowanceCounters.released > released, TTL);
		expect(Date.now() - grantedAt).toBeLessThan(TTL);
		expect(localAllowance(k.id)).toBeUndefined();
		await waitFor(async () => (await keyView(k.id)).reserved_usd === 0, 2000);
		const usage = await settledUsage(k.id, WARM + 1);
		expect(usage.total).toBe(1_000_000 * 1e9 - (await ledger(k.id).info()).balanceNanos);
	});
});
