/**
 * A request's settlement (src/settlement/settlement.ts) against a fake ledger: exactly once
 * whatever races, what each ending bills, an unused hold released, a queued hold handed off, an
 * allowance's share given back, and the hold kept alive only while the request moves. The
 * ledger's own side is tested in workerd (test/integration/abort-settlement.test.ts and others).
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { LedgerConfig, ModelConfig } from "../../../src/config";
import { GatewayError } from "../../../src/errors";
import type { SettleInput } from "../../../src/ledger/durable/rpc-types";
import { localAllowance } from "../../../src/ledger/edge-allowance-state";
import { afterSyncHold } from "../../../src/ledger/edge-allowances";
import type { RequestContext } from "../../../src/ledger/ledger-client";
import { RequestLog } from "../../../src/observability/request-log";
import { HOLD_KEEPALIVE_MS } from "../../../src/settlement/hold-keep-alive";
import {
	answerOutcome,
	engineFailedOutcome,
	noAnswerOutcome,
	placeHold,
	releaseStoredHold,
	Settlement,
	streamOutcome,
} from "../../../src/settlement/settlement";
import type { StreamEnd } from "../../../src/stream/chat-reducer";
import type { Outcome } from "../../../src/types";
import { resetIsolate } from "../../support/reset-isolate";

const MODEL = {
	id: "m/one",
	engine_model: "one",
	max_output_tokens: 100,
	capabilities: [],
	// $1 per million tokens both ways: a token costs 1,000 nanos.
	pricing: { input_usd_per_mtok: 1, output_usd_per_mtok: 1 },
} as unknown as ModelConfig;

const BALANCE = 1_000_000_000;

/** A key's ledger as the settlement reaches it: records every call, answers like the real one. */
function fakeLedger(opts: { refuse?: boolean } = {}) {
	const settled: SettleInput[] = [];
	const authorized: Array<{ requestId: string; holdNanos: number }> = [];
	const stub = {
		authorize: async (input: { requestId: string; holdNanos: number }) => {
			authorized.push(input);
			if (opts.refuse) return { ok: false, availableNanos: 0, requiredNanos: input.holdNanos };
			return { ok: true, availableNanos: BALANCE, holdNanos: input.holdNanos, balanceNanos: BALANCE };
		},
		settleMany: async (inputs: SettleInput[]) => inputs.map((i) => settle(i)),
		settle: async (input: SettleInput) => settle(input),
		grant: async (input: { wantNanos: number; ttlMs: number }) => ({
			ok: true,
			grantedNanos: input.wantNanos,
			amountNanos: input.wantNanos,
			ttlMs: input.ttlMs,
			balanceNanos: BALANCE,
		}),
		release: async () => {},
		adopt: async () => ({ ok: true }),
	};
	function settle(input: SettleInput) {
		settled.push(input);
		return { requestId: input.requestId, costNanos: input.costNanos, balanceNanos: BALANCE - input.costNanos, applied: true };
	}
	const env = { LEDGER: { idFromName: (name: string) => name, get: () => stub } } as unknown as Env;
	return { env, settled, authorized };
}

function request(id: string, extra: Partial<RequestContext> = {}): RequestContext {
	return { payerKeyId: "key_pay", requestId: id, model: MODEL, requestedModel: MODEL.id, searchCount: 0, ...extra };
}

function scope(env: Env, log?: RequestLog) {
	const waits: Promise<unknown>[] = [];
	return { scope: { env, waitUntil: (p: Promise<unknown>) => void waits.push(p), log }, waits };
}

function completed(prompt: number, completion: number, node = "http://node-a:8000"): Outcome {
	return {
		status: "completed",
		usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion },
		estimated: false,
		node,
	};
}

const END: StreamEnd = {
	status: "completed",
	usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
	estimated: false,
	contentForwarded: true,
};

beforeEach(() => {
	vi.spyOn(console, "log").mockImplementation(() => {});
	vi.spyOn(console, "warn").mockImplementation(() => {});
	vi.spyOn(console, "error").mockImplementation(() => {});
});

afterEach(() => {
	vi.useRealTimers();
	vi.restoreAllMocks();
	resetIsolate();
});

describe("a request's settlement", () => {
	it("registers its waitUntil before the hold is placed, and settles it once the outcome is known", async () => {
		const l = fakeLedger();
		const { scope: s, waits } = scope(l.env);
		const placing = placeHold(s, request("req_wait"), 5_000);
		// Before the ledger answered: a client leaving now cannot end the request unsettled.
		expect(waits).toHaveLength(1);
		const { settlement } = await placing;
		expect(l.authorized).toEqual([expect.objectContaining({ requestId: "req_wait", holdNanos: 5_000 })]);
		void settlement.settle(completed(10, 5));
		await Promise.all(waits);
		expect(l.settled).toHaveLength(1);
		expect(l.settled[0]).toMatchObject({ requestId: "req_wait", costNanos: 15_000, record: { status: "completed" } });
	});

	it("settles exactly once when outcomes race, and the first one stands", async () => {
		const l = fakeLedger();
		const log = new RequestLog("req_race", "chat");
		const { scope: s, waits } = scope(l.env, log);
		const { settlement } = await placeHold(s, request("req_race"), 5_000);
		const noted = vi.spyOn(log, "settled");
		const first = settlement.settle(completed(10, 5));
		const second = settlement.settle(streamOutcome({ ...END, status: "client_disconnected" }, "http://node-a:8000", true));
		const third = settlement.release();
		settlement.handOff();
		expect(second).toBe(first);
		expect(third).toBe(first);
		await Promise.all([first, ...waits]);
		expect(l.settled.map((i) => i.record.status)).toEqual(["completed"]);
		expect(noted).toHaveBeenCalledTimes(1);
		expect(log.line(200)).toMatchObject({ outcome: "completed", key_id: "key_pay", cost_usd: 0.000015 });
	});

	it("settles nothing and leaves nothing waiting when the hold is refused", async () => {
		const l = fakeLedger({ refuse: true });
		const { scope: s, waits } = scope(l.env);
		await expect(placeHold(s, request("req_refused"), 5_000)).rejects.toMatchObject({ kind: "insufficient_balance" });
		expect(await Promise.all(waits)).toEqual([null]);
		expect(l.settled).toEqual([]);
	});

	it("releases an unused hold at no cost without touching the log line's outcome", async () => {
		const l = fakeLedger();
		const log = new RequestLog("req_release", "responses");
		const { scope: s, waits } = scope(l.env, log);
		const { settlement } = await placeHold(s, request("req_release"), 5_000);
		await settlement.release();
		await Promise.all(waits);
		expect(l.settled).toEqual([
			expect.objectContaining({
				requestId: "req_release",
				costNanos: 0,
				record: expect.objectContaining({ status: "client_disconnected" }),
			}),
		]);
		// The store refused the request: the line says so, not "client_disconnected".
		expect(log.line(413).outcome).toBe("refused");
	});

	it("leaves a handed-off hold to the queued job that runs on it", async () => {
		const l = fakeLedger();
		const { scope: s, waits } = scope(l.env);
		const { settlement } = await placeHold(s, request("req_queued"), 5_000);
		settlement.handOff();
		expect(await Promise.all(waits)).toEqual([null]);
		await settlement.settle(completed(1, 1));
		expect(l.settled).toEqual([]);
	});

	it("releases a queued job's stored hold by its request id", async () => {
		const l = fakeLedger();
		await releaseStoredHold(l.env, { payerKeyId: "key_pay", requestId: "req_stored", model: MODEL, requestedModel: MODEL.id });
		expect(l.settled).toEqual([expect.objectContaining({ requestId: "req_stored", costNanos: 0 })]);
	});

	it("bills a web search that answered with the request, whatever the engine did", async () => {
		const l = fakeLedger();
		const { scope: s, waits } = scope(l.env);
		const { settlement } = await placeHold(s, request("req_search"), 5_000);
		settlement.chargeSearch(7_000);
		expect(settlement.costHeaders(completed(10, 5))).toEqual({
			"x-venym-cost-usd": "0.000022",
			"x-venym-balance-usd": String((BALANCE - 22_000) / 1e9),
		});
		void settlement.settle(noAnswerOutcome(new GatewayError("upstream_unavailable", "down")));
		await Promise.all(waits);
		expect(l.settled[0]).toMatchObject({ costNanos: 7_000, record: { status: "failed", search_count: 1 } });
	});

	it("bills an earlier engine call's usage once, summed with the outcome's, however the request ends", async () => {
		const first = { prompt_tokens: 100, completion_tokens: 20, total_tokens: 120, cached_tokens: 40 };
		const endings: Array<[string, Outcome, number, Partial<SettleInput["record"]>]> = [
			// The call that answered the client: both calls' tokens.
			["completed", { ...completed(130, 50), usage: { ...completed(130, 50).usage, cached_tokens: 60 } }, 300_000, {}],
			// The second call found no node: the first call's tokens, and the search.
			["failed", noAnswerOutcome(new GatewayError("upstream_unavailable", "down")), 120_000, {}],
			// The client left while the second call had the request: its prompt's estimate too.
			["client_disconnected", noAnswerOutcome(new GatewayError("client_closed", "gone"), 90), 210_000, { estimated: true }],
		];
		for (const [status, outcome, tokensNanos, extra] of endings) {
			const l = fakeLedger();
			const { scope: s, waits } = scope(l.env);
			const { settlement } = await placeHold(s, request(`req_two_${status}`), 1_000_000);
			settlement.chargeSearch(7_000);
			settlement.addUsage(first, false, MODEL.pricing);
			expect(settlement.costOf(outcome)).toBe(tokensNanos + 7_000);
			void settlement.settle(outcome);
			void settlement.settle(completed(1, 1));
			settlement.addUsage(first, false, MODEL.pricing);
			await Promise.all(waits);
			expect(l.settled).toHaveLength(1);
			const { prompt_tokens, completion_tokens } = settlement.total(outcome).usage;
			expect(l.settled[0]).toMatchObject({
				costNanos: tokensNanos + 7_000,
				record: { status, prompt_tokens, completion_tokens, search_count: 1, ...extra },
			});
			expect(prompt_tokens).toBe(first.prompt_tokens + outcome.usage.prompt_tokens);
		}
	});

	it("bills an earlier call at the prices of the model that served it, not the model that answers the client", async () => {
		const l = fakeLedger();
		const { scope: s, waits } = scope(l.env);
		// The first call on a model at ten times MODEL's prices; the request then served by MODEL.
		const { settlement } = await placeHold(s, request("req_two_models"), 1_000_000);
		settlement.addUsage(completed(100, 20).usage, false, { input_usd_per_mtok: 10, output_usd_per_mtok: 10 });
		expect(settlement.costOf(completed(30, 5))).toBe(120 * 10_000 + 35 * 1_000);
		void settlement.settle(completed(30, 5));
		await Promise.all(waits);
		expect(l.settled[0]).toMatchObject({ costNanos: 1_235_000, record: { prompt_tokens: 130, completion_tokens: 25 } });
	});

	it("sums cached tokens and keeps an estimate flagged", () => {
		const l = fakeLedger();
		const settlement = new Settlement({ env: l.env, waitUntil: () => {} }, request("req_sum"), { keepAlive: false });
		settlement.addUsage({ prompt_tokens: 10, completion_tokens: 2, total_tokens: 12, cached_tokens: 4 }, true, MODEL.pricing);
		expect(settlement.total({ ...completed(5, 1), usage: { ...completed(5, 1).usage, cached_tokens: 3 } })).toEqual({
			status: "completed",
			usage: { prompt_tokens: 15, completion_tokens: 3, total_tokens: 18, cached_tokens: 7 },
			estimated: true,
			node: "http://node-a:8000",
		});
		settlement.handOff();
	});

	it("gives an edge allowance's share back when it settles or releases", async () => {
		const l = fakeLedger();
		const ledgerConfig: LedgerConfig = { allowance_ttl_ms: 30_000, allowance_min_headroom: 2 };
		const pending: Promise<unknown>[] = [];
		const edge = { ledger: ledgerConfig, waitUntil: (p: Promise<unknown>) => void pending.push(p) };
		const stub = () => l.env.LEDGER.get(l.env.LEDGER.idFromName("key_pay")) as never;
		for (let i = 0; i < 3; i++) afterSyncHold(stub, "key_pay", 5_000, 1e12, edge, Date.now());
		await Promise.all(pending);
		expect(localAllowance("key_pay")).toBeDefined();
		const { scope: s, waits } = scope(l.env);
		const a = await placeHold(s, request("req_edge_a", { edge }), 5_000);
		const b = await placeHold(s, request("req_edge_b", { edge }), 5_000);
		// Served from the allowance: no ledger call before the engine.
		expect(l.authorized).toEqual([]);
		expect(localAllowance("key_pay")?.inFlight).toBe(10_000);
		void a.settlement.settle(completed(2, 1));
		void b.settlement.release();
		await Promise.all(waits);
		expect(localAllowance("key_pay")?.inFlight).toBe(0);
		expect(l.settled.map((i) => i.allowanceId)).toEqual([expect.any(String), expect.any(String)]);
	});

	it("keeps the hold alive only while the request moves, and stops at settlement", async () => {
		vi.useFakeTimers({ toFake: ["setInterval", "clearInterval"] });
		const l = fakeLedger();
		const { scope: s, waits } = scope(l.env);
		const { settlement } = await placeHold(s, request("req_alive"), 5_000);
		let frames = 0;
		settlement.countProgress(() => frames);
		const renewals = () => l.authorized.filter((a) => a.holdNanos === 0).length;
		await vi.advanceTimersByTimeAsync(HOLD_KEEPALIVE_MS);
		expect(renewals()).toBe(0);
		settlement.progressed();
		await vi.advanceTimersByTimeAsync(HOLD_KEEPALIVE_MS);
		expect(renewals()).toBe(1);
		frames += 2;
		await vi.advanceTimersByTimeAsync(HOLD_KEEPALIVE_MS);
		expect(renewals()).toBe(2);
		// The client stopped reading: nothing moves, nothing is renewed.
		await vi.advanceTimersByTimeAsync(HOLD_KEEPALIVE_MS * 3);
		expect(renewals()).toBe(2);
		void settlement.settle(completed(1, 1));
		await Promise.all(waits);
		frames += 1;
		await vi.advanceTimersByTimeAsync(HOLD_KEEPALIVE_MS * 2);
		expect(renewals()).toBe(2);
	});
});

describe("what each ending bills", () => {
	const node = "http://node-a:8000";

	it("an engine call without an answer: nothing, but a client that left pays its prompt's estimate", () => {
		const gone = new GatewayError("client_closed", "gone");
		expect(noAnswerOutcome(gone, 40)).toEqual({
			status: "client_disconnected",
			usage: { prompt_tokens: 40, completion_tokens: 0, total_tokens: 40 },
			estimated: true,
			node: null,
		});
		expect(noAnswerOutcome(gone)).toMatchObject({ status: "client_disconnected", usage: { prompt_tokens: 0 }, estimated: false });
		// Gone before any engine was asked: nothing read the prompt.
		const before = new GatewayError("client_closed", "gone", { beforeEngine: true });
		expect(noAnswerOutcome(before, 40)).toMatchObject({ status: "client_disconnected", usage: { prompt_tokens: 0 } });
		expect(noAnswerOutcome(new GatewayError("engine_refused", "no"), 40)).toMatchObject({
			status: "engine_error",
			usage: { prompt_tokens: 0, completion_tokens: 0 },
		});
		expect(noAnswerOutcome(new Error("boom"), 40)).toMatchObject({ status: "failed", usage: { prompt_tokens: 0 } });
	});

	it("a stream: what was generated, nothing when the engine failed before any content", () => {
		expect(streamOutcome(END, node, false)).toEqual({ status: "completed", usage: END.usage, estimated: false, node });
		expect(streamOutcome(END, node, true)).toMatchObject({ status: "client_disconnected", usage: END.usage });
		const failedEarly = { ...END, status: "engine_error" as const, contentForwarded: false };
		expect(streamOutcome(failedEarly, node, false)).toEqual(engineFailedOutcome(node));
		const failedLate = { ...END, status: "engine_error" as const };
		expect(streamOutcome(failedLate, node, false)).toMatchObject({ status: "engine_error", usage: END.usage });
	});

	it("a body: a client that left pays what was generated, an oversized answer is billed, an engine failure is free", () => {
		const failed = { ...END, status: "engine_error" as const };
		expect(answerOutcome(END, node, { clientGone: false, overflowed: false })).toMatchObject({
			status: "completed",
			usage: END.usage,
		});
		expect(answerOutcome(failed, node, { clientGone: true, overflowed: false })).toMatchObject({
			status: "client_disconnected",
			usage: END.usage,
		});
		expect(answerOutcome(END, node, { clientGone: false, overflowed: true })).toMatchObject({
			status: "engine_error",
			usage: END.usage,
		});
		expect(answerOutcome(failed, node, { clientGone: false, overflowed: false })).toEqual(engineFailedOutcome(node));
	});
});
