// The fleet simulator (bench/fleet, `npm run bench:fleet`) in seconds: its engine's KV cache, its
// determinism, and the ordering of its policies on llm-d's workload, routed by the gateway's own code.
import { describe, expect, it } from "vitest";
import { DAY, runDay } from "../../bench/fleet/batch.mjs";
import { BLOCK, ENGINES, Engine } from "../../bench/fleet/engine.mjs";
import { makePolicies } from "../../bench/fleet/policies.mjs";
import { simulate, summarize } from "../../bench/fleet/sim.mjs";
import { WORKLOADS } from "../../bench/fleet/workloads.mjs";
import { homeNode, lineLimit, loadIsStale, prefixGroup, roomOn } from "../../src/batches/schedule";
import { pickRoute, powerOfTwo } from "../../src/routing/picker";
import { prefixAffinityKey } from "../../src/routing/prefix-affinity";
import { rendezvousPick } from "../../src/routing/rendezvous";

const routing = {
	pickRoute,
	powerOfTwo,
	prefixAffinityKey,
	rendezvousPick,
	homeNode,
	prefixGroup,
	roomOn,
	lineLimit,
	loadIsStale,
};

interface Req {
	prompt: number;
	keys: number[];
	answer: number;
	reserve: number;
	cached?: number;
	firstToken?: number;
	done?: number;
}

const request = (keys: number[], answer = 2): Req => ({ prompt: keys.length * BLOCK, keys, answer, reserve: 1 });

/** Steps an engine until it is idle; returns the end time. */
function drain(e: InstanceType<typeof Engine>, start = 0): number {
	let now = start;
	for (;;) {
		const step = e.plan(now);
		if (!step) return now;
		now += step.duration;
		for (const r of e.apply(step, now).finished) e.release(r);
	}
}

describe("fleet simulator engine", () => {
	const spec = { ...ENGINES["h100-llama-8b"], kvTokens: 10 * BLOCK };

	it("reuses a computed prefix and evicts the least recently used blocks, a prefix's tail first", () => {
		const e = new Engine(0, spec);
		const a = request([1, 2, 3]);
		e.enqueue(a);
		drain(e);
		expect(a.cached).toBe(0);
		expect(e.leadingHit([1, 2, 3, 4])).toBe(3);

		const b = request([1, 2, 9]);
		e.enqueue(b);
		drain(e);
		expect(b.cached).toBe(2 * BLOCK);

		// 10 blocks: [1, 2, 3, 9] are cached; a 7-block prompt plus its answer's block needs 2 evicted.
		const c = request([20, 21, 22, 23, 24, 25, 26]);
		e.enqueue(c);
		drain(e);
		expect(e.leadingHit([1, 2])).toBe(2);
		expect(e.has(3)).toBe(false);
		expect(e.has(9)).toBe(false);
	});

	it("counts no hit on a prefix another request is still computing", () => {
		const e = new Engine(0, { ...spec, kvTokens: 100 * BLOCK, maxBatchedTokens: 64 });
		const keys = [1, 2, 3, 4, 5, 6, 7, 8];
		const [a, b] = [request(keys), request(keys)];
		e.enqueue(a);
		e.enqueue(b);
		drain(e);
		expect(a.cached).toBe(0);
		// b started after a had computed it (64-token steps: a's prefill takes two).
		expect(b.cached).toBe(keys.length * BLOCK - 1);
		expect(b.firstToken).toBeGreaterThan(a.firstToken as number);
	});

	it("keeps a request waiting while its blocks do not fit beside the running ones", () => {
		const e = new Engine(0, spec);
		const a = request([1, 2, 3, 4, 5, 6], 40);
		const b = request([7, 8, 9, 10, 11]);
		a.reserve = 3;
		e.enqueue(a);
		e.enqueue(b);
		drain(e);
		expect(b.firstToken).toBeGreaterThanOrEqual(a.done as number);
	});
});

describe("fleet simulator", () => {
	const w = WORKLOADS.llmd;
	const opts = {
		nodes: 4,
		spec: { ...ENGINES["h100x2-qwen3-32b"], kvTokens: 150_000 },
		rate: 2,
		durationS: 50,
		warmupS: 15,
		drainS: 30,
		metricsS: 10,
		seed: 39,
		factor: 1.25,
	};
	const policies = makePolicies(routing, opts);
	const run = (name: keyof typeof policies) => summarize(simulate(w, policies[name](), opts), opts);

	it("is deterministic for a seed", () => {
		expect(run("gateway")).toEqual(run("gateway"));
	});

	it("ranks the oracle and the gateway above random on llm-d's workload, all under what any policy could reuse", () => {
		const oracle = run("oracle");
		const gateway = run("gateway");
		const random = run("random");
		expect(oracle.requests).toBeGreaterThan(50);
		for (const s of [oracle, gateway, random]) {
			expect(s.censored).toBe(0);
			expect(s.hit).toBeLessThanOrEqual(s.ideal);
		}
		// 4 nodes: random finds a prefix where it was computed about a quarter of the time.
		expect(oracle.hit).toBeGreaterThan(2 * random.hit);
		expect(gateway.hit).toBeGreaterThan(2 * random.hit);
		expect(gateway.p90).toBeLessThan(random.p90);
		expect(gateway.busiest).toBeLessThan(2);
	});
});

describe("fleet simulator: the batch lane (--batch)", () => {
	const base = {
		...DAY,
		nodes: 2,
		dayS: 96,
		peakRate: 12,
		// The engine's line prefill capped (vLLM's long_prefill_token_threshold), as the README's table row.
		spec: { ...ENGINES[DAY.engine as keyof typeof ENGINES], lowPrefill: 256 },
		seed: 36,
		drainS: 30,
		metricsS: 10,
		factor: 1.25,
	};
	const run = (maxInFlight: number, extra = {}) =>
		runDay(routing, makePolicies(routing, base).gateway(), base, maxInFlight, extra);
	const limit = lineLimit(undefined, base.spec.maxSeqs);

	it("finishes lines in the idle capacity and keeps interactive TTFT bounded", () => {
		const off = run(0);
		const on = run(limit);
		expect(limit).toBe(64);
		expect(on).toEqual(run(limit));
		expect(off.lines).toBe(0);
		expect(on.requests).toBe(off.requests);
		expect(on.lines).toBeGreaterThan(1000);
		expect(on.preempted).toBe(0);
		// Lines take no interactive tokens away, and interactive TTFT stays within a few steps.
		expect(on.interactiveTps).toBeCloseTo(off.interactiveTps, -2);
		expect(on.p99).toBeLessThan(2 * (off.p99 ?? 0));
		expect(on.p99).toBeLessThan(0.5);
	});

	it("fills more on the dispatcher's own gauge reads than on the health check's", () => {
		const fresh = run(limit);
		const stale = run(limit, { freshLoad: false });
		expect(fresh.lines).toBeGreaterThan(1.2 * stale.lines);
		expect(fresh.p99).toBeLessThan(1.1 * (stale.p99 ?? 0));
	});

	it("runs an interactive request ahead of queued lines and preempts a line for it", () => {
		// Two sequences at once: two lines run, a third waits.
		const e = new Engine(0, { ...ENGINES["h100-llama-8b"], kvTokens: 40 * BLOCK, maxSeqs: 2 });
		const lines = [request([1, 2, 3, 4], 50), request([5, 6, 7, 8], 50), request([9, 10, 11, 12], 50)].map((r) =>
			Object.assign(r, { priority: 1 }),
		);
		for (const l of lines) e.enqueue(l);
		const first = e.plan(0);
		expect(first).not.toBeNull();
		e.apply(first as NonNullable<typeof first>, 0.01);
		expect(e.queue).toEqual([lines[2]]);
		const user = request([20, 21, 22, 23, 24], 2);
		e.enqueue(user);
		expect(e.queue[0]).toBe(user);
		drain(e, 0.01);
		expect(user.firstToken).toBeLessThan(Math.min(...lines.map((l) => l.done ?? 0)));
		expect(lines.some((l) => (l as { preempted?: number }).preempted)).toBe(true);
		for (const l of lines) expect(l.done).toBeDefined();
	});
});
