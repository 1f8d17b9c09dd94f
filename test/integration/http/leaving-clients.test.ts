/**
 * Clients that leave at any point, on a mix of engines and lanes: settlement and the log line
 * start just after the response (http/after-response.ts); the request-log middleware keeps an
 * inference request alive until its handler returns; streams end on the request's signal;
 * non-stream engine answers are read without a pass-through (engine/call-engine.ts
 * answerOf/readBody); one idle check per edge allowance (ledger/allowance.ts
 * armIdleCheck/idleCheckDue), so traffic stopping and starting gives allowances back.
 *
 * The invariants held throughout: every request that held money settles exactly once (no open hold,
 * nothing held once allowances are given back or expire), usage records add up to the debits, a
 * refused request reaches no engine, overspend stays within one hold, every held request writes
 * exactly one request log line, and the engine nodes' in-flight counts return to 0.
 */
import { createExecutionContext, env } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { loadConfig } from "../../../src/config";
import { measureChatPrompt } from "../../../src/estimate";
import worker from "../../../src/index";
import { idleReleaseMs } from "../../../src/ledger/allowance";
import { localAllowance } from "../../../src/ledger/edge-allowance-state";
import { holdNanos } from "../../../src/ledger/ledger-client";
import type { RequestLogLine } from "../../../src/observability/request-log";
import { isolateFleet } from "../../../src/routing/fleet";
import { promptBound } from "../../../src/stream/usage-bounds";
import { BASE, chat, createKey, engineRequests, gw, waitFor } from "../../support/gateway";
import { expectBooks, ledger, usageRows } from "../../support/ledger";
import { testGatewayConfig } from "../../support/test-config";

/** The request log lines the worker wrote during this file (it runs in this isolate). */
const lines: RequestLogLine[] = [];

beforeAll(() => {
	vi.spyOn(console, "log").mockImplementation((...args: unknown[]) => {
		const text = args.map(String).join(" ");
		if (text.startsWith('{"message":"request"')) lines.push(JSON.parse(text) as RequestLogLine);
	});
	vi.spyOn(console, "warn").mockImplementation(() => {});
	vi.spyOn(console, "error").mockImplementation(() => {});
});
afterAll(() => vi.restoreAllMocks());

/**
 * Traffic pacing, part of a scenario (pauses around the idle release, staggered racers): what
 * these tests assert never depends on how long a pause really took.
 */
const pace = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** A scenario node of this file's engine tenant, as testGatewayConfig names it. */
const node = (scenario?: string) => (scenario ? `${env.ENGINE_URL}/s/${scenario}/v1` : `${env.ENGINE_URL}/v1`);

/** Every request of the key that held money wrote exactly one log line, and nothing else of the key was logged but refusals. */
async function expectOneLinePerRequest(
	keyId: string,
	rows: { request_id: string; cost_nanos: number; status: string }[],
	answeredIds: string[],
) {
	// Lines are written under waitUntil just after the answer (a stream's when it ends).
	await waitFor(async () => rows.every((r) => lines.some((l) => l.request_id === r.request_id)), 3000).catch(() => null);
	const mine = lines.filter((l) => l.key_id === keyId);
	const count = new Map<string, number>();
	for (const l of mine) count.set(l.request_id, (count.get(l.request_id) ?? 0) + 1);
	expect([...count].filter(([, n]) => n !== 1)).toEqual([]);
	for (const r of rows) expect(count.get(r.request_id), r.request_id).toBe(1);
	// The line says what settlement debited, and how the request ended.
	const byId = new Map(mine.map((l) => [l.request_id, l]));
	const mismatched = rows.filter((r) => {
		const l = byId.get(r.request_id);
		return l && (Math.round(l.cost_usd * 1e9) !== r.cost_nanos || l.outcome !== r.status);
	});
	expect(mismatched.map((r) => ({ row: r, line: byId.get(r.request_id) }))).toEqual([]);
	for (const id of answeredIds) expect(count.get(id), id).toBe(1);
	const held = new Set(rows.map((r) => r.request_id));
	expect(mine.filter((l) => !held.has(l.request_id) && l.outcome !== "refused").map((l) => l.request_id)).toEqual([]);
}

async function expectNodesIdle(urls: string[]) {
	await waitFor(async () => urls.every((u) => isolateFleet.runtime(u).inFlight === 0), 3000).catch(() => null);
	expect(Object.fromEntries(urls.map((u) => [u, isolateFleet.runtime(u).inFlight]))).toEqual(
		Object.fromEntries(urls.map((u) => [u, 0])),
	);
}

/** When the client leaves: never, right after the headers, after the first read, after the second, or after some ms. */
type Leave = "never" | "headers" | "first" | "mid" | number;
type Kind = readonly [model: string, stream: boolean, leave: Leave];

/** One chat request whose client leaves as `leave` says; the request id when it got an answer. */
async function hostile(key: string, body: Record<string, unknown>, leave: Leave, i: number) {
	const client = new AbortController();
	const timer = typeof leave === "number" ? setTimeout(() => client.abort(), leave) : undefined;
	try {
		const res = await chat(key, body, { signal: client.signal });
		const id = res.headers.get("x-request-id");
		if (leave === "headers") {
			client.abort();
		} else if ((leave === "first" || leave === "mid") && res.body) {
			const reader = res.body.getReader();
			await reader.read();
			if (leave === "mid") await reader.read();
			// Some cancel their read first, others just drop the connection.
			if (i % 2) await reader.cancel().catch(() => undefined);
			client.abort();
		} else {
			await res.text();
		}
		clearTimeout(timer);
		return { id, status: res.status };
	} catch {
		return { id: null, status: 0 };
	}
}

function chatBody(model: string, stream: boolean, text: string, maxTokens = 8) {
	return { model, stream, messages: [{ role: "user", content: text }], max_tokens: maxTokens };
}

/**
 * The worker called directly with a config of the test's own, answering as soon as the response is
 * read (its background work, such as an allowance's idle check, goes on under its own context).
 */
function directGateway(config: unknown) {
	const bindings = { ...env, GATEWAY_CONFIG: JSON.stringify(config) };
	return async (path: string, key: string, init: { method?: string; body?: unknown } = {}) => {
		const req = new Request(`${BASE}${path}`, {
			method: init.method ?? "POST",
			headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
			body: init.body === undefined ? undefined : JSON.stringify(init.body),
		}) as Request<unknown, IncomingRequestCfProperties>;
		const res = await worker.fetch(req, bindings, createExecutionContext());
		const text = await res.text();
		return { status: res.status, text, id: res.headers.get("x-request-id") };
	};
}

describe("clients that leave at random points, on a mix of engines", () => {
	it("90 concurrent stream and non-stream requests of one key: settled once, one log line each, nodes idle", async () => {
		const CREDIT = 50_000_000_000;
		const k = await createKey({ balance_usd: CREDIT / 1e9 });
		const kinds: Kind[] = [
			["test/ok", false, "never"],
			["test/ok", true, "first"],
			["test/slow", true, "mid"],
			["test/slow", false, 100],
			["test/slow", true, "headers"],
			["test/cut", true, "first"],
			["test/midstream", false, "never"],
			["test/stall", true, "first"],
			["test/stall", false, 300],
			["test/slowbody", false, 200],
			["test/trickle", false, "never"],
			["test/ok", true, 5],
			["test/slow", true, 30],
			["test/failover", false, "never"],
			["test/failover", true, "first"],
		];
		const results = await Promise.all(
			Array.from({ length: 90 }, (_, i) => {
				const [model, stream, leave] = kinds[i % kinds.length] as Kind;
				return hostile(k.key, chatBody(model, stream, `walk away ${i}`), leave, i);
			}),
		);
		const { rows } = await expectBooks(k.id, CREDIT);
		// Most requests got as far as a hold (local workerd does not abort before the answer starts).
		expect(rows.length).toBeGreaterThan(60);
		expect(rows.filter((r) => r.status === "client_disconnected").length).toBeGreaterThan(10);
		const answered = results.filter((r) => r.id !== null).map((r) => r.id as string);
		await expectOneLinePerRequest(k.id, rows, answered);
		await expectNodesIdle(
			["", "slow", "cut", "midstream", "stall", "slowbody", "trickle", "fail500", "drop", "fail429", "hang", "fail503", "ok"].map(
				(s) => node(s || undefined),
			),
		);
	});

	it("a near-empty key in waves of leaving clients: 402s reach no engine, overspend within one hold", async () => {
		const config = loadConfig(env.GATEWAY_CONFIG);
		const model = config.models.find((m) => m.id === "test/slow");
		if (!model) throw new Error("test/slow missing");
		const mark = `ne${crypto.randomUUID().slice(0, 8)}`;
		// Fixed-width texts: every request has the same hold.
		const text = (i: number) => `${mark}-${String(i).padStart(4, "0")}`;
		const hold = holdNanos(model, promptBound(model, measureChatPrompt(chatBody("test/slow", true, text(0))).size), 8);
		const CREDIT = 9 * hold + 7;
		const k = await createKey({ balance_usd: CREDIT / 1e9 });
		const leaves: Leave[] = ["first", "never", "never", "headers", 60];
		const results: { id: string | null; status: number }[] = [];
		for (let wave = 0; wave < 4; wave++) {
			results.push(
				...(await Promise.all(
					Array.from({ length: 20 }, (_, j) => {
						const i = wave * 20 + j;
						return hostile(k.key, chatBody("test/slow", j % 2 === 0, text(i)), leaves[j % leaves.length] as Leave, i);
					}),
				)),
			);
		}
		const { rows, info } = await expectBooks(k.id, CREDIT);
		const refused = results.filter((r) => r.status === 402).length;
		expect(refused).toBeGreaterThan(20);
		// Every engine call is an admitted request; no 402 got there.
		const calls = await engineRequests({ contains: mark });
		expect(calls.length).toBeLessThanOrEqual(rows.length);
		expect(rows.length + refused).toBeLessThanOrEqual(results.length);
		expect(info.balanceNanos).toBeGreaterThanOrEqual(-hold);
		const answered = results.filter((r) => r.id !== null && r.status === 200).map((r) => r.id as string);
		await expectOneLinePerRequest(k.id, rows, answered);
		// Each 402 the client saw was logged as a refusal.
		const refusedIds = results.filter((r) => r.status === 402).map((r) => r.id as string);
		for (const id of refusedIds) expect(lines.filter((l) => l.request_id === id).map((l) => l.outcome)).toEqual(["refused"]);
	});
});

describe("non-stream engine answers that are too large or go idle", () => {
	it("502/504, the hold released, one log line each, the node's in-flight count back to 0; only the oversized generation is billed", async () => {
		const CREDIT = 100_000_000_000;
		const k = await createKey({ balance_usd: CREDIT / 1e9 });
		const post = (path: string, body: unknown) =>
			gw(path, {
				method: "POST",
				headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
				body: JSON.stringify(body),
			});
		const word = "w".repeat(150_000);
		// The fake engine builds a ~10 MB answer before its headers: on a busy box that takes longer than
		// the test config's 1 s first-byte timeout (a 504), so these two get a config that waits.
		const patient = directGateway({ ...testGatewayConfig(env.ENGINE_URL), first_byte_timeout_ms: 30_000 });
		// 4 prompts × n=16 echoed back: about 9.6 MB, over the 8 MiB cap.
		const big = await patient("/v1/completions", k.key, {
			body: { model: "test/big", prompt: [word, word, word, word], n: 16, max_tokens: 4 },
		});
		expect(big.status).toBe(502);
		// 64 vectors of 20,000 numbers: over the cap too. (Alone: the engine takes a while to build it.)
		const embed = await patient("/v1/embeddings", k.key, {
			body: { model: "test/embed", input: Array.from({ length: 64 }, (_, i) => `x${i}`), dimensions: 20_000 },
		});
		expect(embed.status).toBe(502);
		// Headers and then silence; headers and then whitespace keep-alives only.
		const [stall, trickle] = await Promise.all([
			post("/v1/chat/completions", chatBody("test/stall", false, "stall")),
			post("/v1/chat/completions", chatBody("test/trickle", false, "trickle")),
		]);
		expect([stall.status, trickle.status]).toEqual([504, 504]);
		for (const r of [stall, trickle]) await r.text();
		const { rows, charged } = await expectBooks(k.id, CREDIT);
		expect(rows).toHaveLength(4);
		// The engine generated the oversized answers at the client's asking (n = 16 of long prompts, a
		// batch at many dimensions): what it processed is billed (the embeddings' input estimate),
		// though the client gets a 502. The idle ones cost nothing.
		const bigRow = rows.find((r) => r.request_id === big.id);
		const embedRow = rows.find((r) => r.request_id === embed.id);
		expect(bigRow?.cost_nanos).toBeGreaterThan(0);
		expect(embedRow?.cost_nanos).toBeGreaterThan(0);
		expect(charged).toBe((bigRow?.cost_nanos ?? 0) + (embedRow?.cost_nanos ?? 0));
		const ids = [big.id, embed.id, ...[stall, trickle].map((r) => r.headers.get("x-request-id"))] as string[];
		await expectOneLinePerRequest(k.id, rows, ids);
		await expectNodesIdle([node(), node("stall"), node("trickle")]);
	});
});

describe("settlement runs after the answer", () => {
	it("the ledger may still show the hold right after a non-stream answer; it settles once, moments later", async () => {
		let openRightAfter = 0;
		for (let i = 0; i < 10; i++) {
			const k = await createKey({ balance_usd: 1 });
			const res = await chat(k.key, chatBody("test/ok", false, "right after"));
			await res.text();
			const now = await ledger(k.id).info();
			if (now.openHolds > 0) openRightAfter++;
			const info = await waitFor(async () => {
				const x = await ledger(k.id).info();
				return x.openHolds === 0 ? x : null;
			}, 2000);
			expect(info.heldNanos).toBe(0);
			expect(info.spentNanos).toBe(Math.round(Number(res.headers.get("x-venym-cost-usd")) * 1e9));
		}
		// Recorded, not required: README "Settlement itself runs after the answer is sent".
		expect(openRightAfter).toBeGreaterThanOrEqual(0);
	});

	it("a sequential client on an exact balance is not refused for its previous request's hold", async () => {
		const config = loadConfig(env.GATEWAY_CONFIG);
		const model = config.models.find((m) => m.id === "test/ok");
		if (!model) throw new Error("test/ok missing");
		for (const stream of [false, true]) {
			const body = chatBody("test/ok", stream, "sequential");
			const hold = holdNanos(model, promptBound(model, measureChatPrompt(body).size), 8);
			// Room for exactly one hold: the second request is admitted once the first has settled.
			const k = await createKey({ balance_usd: hold / 1e9 });
			const first = await chat(k.key, body);
			expect(first.status).toBe(200);
			await first.text();
			const second = await chat(k.key, body);
			await second.text();
			expect(second.status).toBe(200);
			await expectBooks(k.id, hold);
		}
	});
});

describe("edge allowances with traffic stopping and starting around the idle release", () => {
	it("bursts with leaving clients, pauses just under and over the idle release: books exact, nothing left held", async () => {
		const CREDIT = 1_000_000 * 1e9;
		const k = await createKey({ balance_usd: CREDIT / 1e9 });
		for (let i = 0; i < 3; i++) {
			const r = await chat(k.key, chatBody("test/ok", false, "warm", 5));
			await r.text();
		}
		await waitFor(async () => localAllowance(k.id) !== undefined, 5000);
		const kinds: Kind[] = [
			["test/ok", false, "never"],
			["test/ok", true, "first"],
			["test/slow", true, "mid"],
			["test/ok", true, "never"],
			["test/cut", true, "never"],
			["test/slow", false, 50],
		];
		const R = idleReleaseMs(loadConfig(env.GATEWAY_CONFIG).ledger.allowance_ttl_ms);
		const results: { id: string | null; status: number }[] = [];
		let n = 0;
		for (const pause of [R - 200, R + 200, 0]) {
			const burst = await Promise.all(
				Array.from({ length: 18 }, (_, i) => {
					const [model, stream, leave] = kinds[i % kinds.length] as Kind;
					return hostile(k.key, chatBody(model, stream, `burst ${n + i}`), leave, n + i);
				}),
			);
			n += burst.length;
			results.push(...burst);
			await pace(pause);
		}
		// Given back when idle, or expired: nothing reserved once traffic stopped.
		await waitFor(async () => (await ledger(k.id).allowanceInfo()).allowanceNanos === 0, 8000);
		const { rows } = await expectBooks(k.id, CREDIT);
		const answered = results.filter((r) => r.id !== null).map((r) => r.id as string);
		await expectOneLinePerRequest(k.id, rows, answered);
	});
});

describe("allowances given back after the traffic that used them (regressions)", () => {
	/**
	 * Was: one idle check per allowance waited again at most IDLE_CHECK_WAITS (5) times, and a request
	 * that left the allowance idle while that check was pending armed nothing. So when a key's traffic runs for about 5 idle-release periods and stops between the
	 * check's fifth and sixth look, the sixth look gave up (waits used up, idle for less than
	 * idleReleaseMs) and no request was left to arm another: the allowance was never given back and
	 * stayed reserved until it expired (30 s by default, instead of "about 2 s after its last
	 * request", docs/allowances.md "Idle release"). Now a request ending while the check is down to its
	 * last look arms a fresh one. Here with a 1.2 s lifetime (0.6 s idle release).
	 */
	it("gives an idle allowance back after its last request even when the pending idle check has used its waits", async () => {
		const TTL = 1200;
		const R = idleReleaseMs(TTL);
		const call = directGateway({
			...testGatewayConfig(env.ENGINE_URL),
			ledger: { allowance_ttl_ms: TTL, allowance_min_headroom: 2 },
		});
		const k = await createKey({ balance_usd: 10 });
		const body = chatBody("test/ok", false, "idle check", 5);
		// Sequential requests, about R/5 apart (each takes from the allowance once it exists), until the
		// pending check has looked 5 times after it was armed (6 distinct idleCheckAt values).
		let id = "";
		const looks = new Set<number>();
		const started = Date.now();
		while (Date.now() - started < 8000) {
			expect((await call("/v1/chat/completions", k.key, { body })).status).toBe(200);
			const a = localAllowance(k.id);
			if (a && a.id !== id) {
				id = a.id;
				looks.clear();
			}
			if (a && a.idleCheckAt > 0) looks.add(a.idleCheckAt);
			if (looks.size >= 6) break;
			await pace(R / 6);
		}
		// One last request after the fifth look, then the key goes quiet.
		expect((await call("/v1/chat/completions", k.key, { body })).status).toBe(200);
		// Nothing runs on it and nothing takes from it: it is given back (without the fix it stayed for good;
		// a generous wait, so a busy box's late timers do not fail it).
		await waitFor(async () => localAllowance(k.id) === undefined, 2 * R + 3000);
	});

	/**
	 * Was: a Responses request that took its hold from the isolate's allowance and is then refused by
	 * the ResponseStore's `begin` (here: its previous_response_id was deleted between the read of the
	 * conversation and `begin`) gives its hold back with releaseHold (responses/run-response.ts), which
	 * builds its RequestContext from heldRequest(): payerKeyId, requestId, model, requestedModel, and
	 * no `allowance` ticket. settleSafely then never calls afterSettle: the allowance's `inFlight` keeps
	 * the hold for ever (and its adopt timer stays armed), so the allowance is never idle, never given
	 * back, and stays reserved in the ledger until it expires (here 60 s; 30 s by default), with
	 * nothing in flight. Now the request's own settlement releases it (`Settlement.release`,
	 * src/settlement/settlement.ts), with the request's context and its ticket.
	 */
	it("a Responses request refused by begin after taking from an allowance gives the take back", async () => {
		const call = directGateway({
			...testGatewayConfig(env.ENGINE_URL),
			ledger: { allowance_ttl_ms: 60_000, allowance_min_headroom: 2 },
		});
		const CREDIT = 100 * 1e9;
		const k = await createKey({ balance_usd: CREDIT / 1e9 });
		for (let i = 0; i < 3; i++) {
			expect((await call("/v1/chat/completions", k.key, { body: chatBody("test/ok", false, "warm", 5) })).status).toBe(200);
		}
		await waitFor(async () => localAllowance(k.id) !== undefined, 5000);
		let refusedAfterHold = 0;
		for (let round = 0; round < 30 && refusedAfterHold === 0; round++) {
			const first = await call("/v1/responses", k.key, { body: { model: "test/ok", input: "first", max_output_tokens: 16 } });
			const prev = (JSON.parse(first.text) as { id: string }).id;
			const posts = Array.from({ length: 12 }, async (_, i) => {
				await pace(i);
				return call("/v1/responses", k.key, {
					body: { model: "test/ok", input: `next ${i}`, max_output_tokens: 16, previous_response_id: prev },
				});
			});
			await pace(3 + (round % 4));
			await call(`/v1/responses/${prev}`, k.key, { method: "DELETE" });
			const answers = await Promise.all(posts);
			await waitFor(async () => (await ledger(k.id).info()).openHolds === 0, 5000);
			const rows = await usageRows(k.id);
			const held = new Set(rows.map((r) => r.request_id));
			refusedAfterHold += answers.filter((a) => a.status === 404 && a.id && held.has(a.id)).length;
		}
		// The race happened: a request held, then begin refused it (404), and its hold was given back.
		expect(refusedAfterHold).toBeGreaterThan(0);
		// The books are exact (the allowance itself is still reserved: traffic just stopped).
		const rows = await usageRows(k.id);
		const info = await ledger(k.id).info();
		expect(info.openHolds).toBe(0);
		expect(info.spentNanos).toBe(rows.reduce((s, r) => s + r.cost_nanos, 0));
		expect(info.balanceNanos).toBe(CREDIT - info.spentNanos);
		// Nothing runs on the allowance now: the isolate must not count anything in flight on it...
		expect.soft(localAllowance(k.id)?.inFlight ?? 0).toBe(0);
		// ...and gives it back once idle, well before it expires.
		await waitFor(async () => (await ledger(k.id).allowanceInfo()).allowanceNanos === 0, idleReleaseMs(60_000) + 3000);
		expect((await ledger(k.id).info()).heldNanos).toBe(0);
	});
});
