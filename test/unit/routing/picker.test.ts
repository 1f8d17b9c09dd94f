import { describe, expect, it } from "vitest";
import type { EngineNode } from "../../../src/config";
import { Fleet } from "../../../src/routing/fleet";
import { applyProbe, cooldownMs, newRuntime, recordFailure, recordSuccess } from "../../../src/routing/node-state";
import { LONG_QUEUE, type NodeView, pickNode } from "../../../src/routing/picker";
import { rendezvousPick } from "../../../src/routing/rendezvous";
import { seededRandom } from "../../support/seeded-random";

function node(url: string, extra: Partial<NodeView> = {}): NodeView {
	return { url, weight: 1, inFlight: 0, coolingUntil: 0, failedAt: 0, healthy: true, waiting: 0, kvCacheUsage: 0, ...extra };
}

function counts(nodes: NodeView[], n: number, opts: { seed?: number; affinity?: (i: number) => string } = {}) {
	const random = seededRandom(opts.seed ?? 1);
	const out: Record<string, number> = {};
	for (let i = 0; i < n; i++) {
		const picked = pickNode(nodes, { now: 1000, random, affinityKey: opts.affinity?.(i) });
		if (picked) out[picked.url] = (out[picked.url] ?? 0) + 1;
	}
	return out;
}

describe("pickNode: spread and weights", () => {
	it("spreads requests evenly over equal idle nodes", () => {
		const c = counts([node("a"), node("b"), node("c")], 6000);
		for (const url of ["a", "b", "c"]) expect(c[url]).toBeGreaterThan(1800);
	});

	it("follows weights when loads are equal (3:1)", () => {
		const c = counts([node("a", { weight: 3 }), node("b", { weight: 1 })], 8000);
		const ratio = (c.a ?? 0) / (c.b ?? 1);
		expect(ratio).toBeGreaterThan(2.7);
		expect(ratio).toBeLessThan(3.3);
	});

	it("prefers the node with fewer requests in flight (the better of two picks)", () => {
		const c = counts([node("a", { inFlight: 5 }), node("b"), node("c")], 3000);
		// a wins only when both picks are a, which two distinct picks never are.
		expect(c.a ?? 0).toBe(0);
	});

	it("weighs in-flight requests per unit of weight", () => {
		// a: 4 in flight on weight 4 (1 per unit); b: 2 on weight 1 (2 per unit): a is less loaded.
		const c = counts([node("a", { weight: 4, inFlight: 4 }), node("b", { inFlight: 2 })], 1000);
		expect(c.b ?? 0).toBe(0);
	});

	it("never picks a drained node (weight 0), even when it is the only one", () => {
		expect(counts([node("a", { weight: 0 }), node("b")], 500)).toEqual({ b: 500 });
		expect(pickNode([node("a", { weight: 0 })], { now: 0, random: Math.random })).toBeNull();
	});

	it("skips nodes this request already tried", () => {
		const tried = new Set(["a", "b"]);
		expect(pickNode([node("a"), node("b"), node("c")], { now: 0, random: Math.random, tried })?.url).toBe("c");
		expect(pickNode([node("a"), node("b")], { now: 0, random: Math.random, tried })).toBeNull();
	});
});

describe("pickNode: cooling and overloaded nodes", () => {
	it("skips a cooling node while another is available, and takes it back when its cooldown ends", () => {
		const nodes = [node("a", { coolingUntil: 2000, failedAt: 500 }), node("b")];
		expect(counts(nodes, 200)).toEqual({ b: 200 });
		expect(pickNode(nodes, { now: 2000, random: () => 0 })?.url).toBe("a");
	});

	it("skips a node whose last probe failed", () => {
		expect(counts([node("a", { healthy: false }), node("b")], 200)).toEqual({ b: 200 });
	});

	it("tries the least recently failed node when every node is cooling", () => {
		const nodes = [
			node("a", { coolingUntil: 9000, failedAt: 900 }),
			node("b", { coolingUntil: 9000, failedAt: 300 }),
			node("c", { healthy: false, failedAt: 600 }),
		];
		expect(pickNode(nodes, { now: 1000, random: Math.random })?.url).toBe("b");
		expect(pickNode(nodes, { now: 1000, random: Math.random, tried: new Set(["b"]) })?.url).toBe("c");
	});

	it("gives a node with a long engine queue no new request while a peer has none", () => {
		const c = counts([node("a", { waiting: 30 }), node("b")], 1000);
		expect(c.a ?? 0).toBeLessThanOrEqual(100);
		expect(c.a ?? 0).toBe(0);
	});

	it("uses overloaded nodes when nothing else is available, the shorter queue first", () => {
		const c = counts([node("a", { waiting: 40 }), node("b", { waiting: LONG_QUEUE })], 500);
		expect(c).toEqual({ b: 500 });
		const cooling = [node("a", { waiting: 40 }), node("b", { coolingUntil: 5000, failedAt: 1 })];
		expect(counts(cooling, 50)).toEqual({ a: 50 });
	});

	it("counts a short queue and a full KV cache as load", () => {
		expect(counts([node("a", { waiting: 2 }), node("b", { inFlight: 1 })], 300)).toEqual({ b: 300 });
		expect(counts([node("a", { kvCacheUsage: 0.99 }), node("b")], 300)).toEqual({ b: 300 });
	});

	it("counts what the engine runs for other isolates and clients, and a node whose every slot is busy", () => {
		// llama.cpp's requests_processing: busy with requests this isolate did not send.
		expect(counts([node("a", { running: 3 }), node("b")], 300)).toEqual({ b: 300 });
		// This isolate's own in-flight requests are among the engine's running ones, not added to them.
		expect(counts([node("a", { running: 2, inFlight: 2 }), node("b", { inFlight: 3 })], 300)).toEqual({ a: 300 });
		// Four of four slots busy: the next request waits in requests_deferred, unlike on a node with a free slot.
		expect(counts([node("a", { running: 4, slots: 4 }), node("b", { running: 4, slots: 8 })], 300)).toEqual({ b: 300 });
	});
});

describe("pickNode: cache affinity", () => {
	const three = [node("http://a/v1"), node("http://b/v1"), node("http://c/v1")];

	it("sends the same key to the same node every time", () => {
		const c = counts(three, 50, { affinity: () => "conversation-42" });
		expect(Object.values(c)).toEqual([50]);
	});

	it("spreads distinct keys over the nodes", () => {
		const c = counts(three, 3000, { affinity: (i) => `user-${i}` });
		for (const url of ["http://a/v1", "http://b/v1", "http://c/v1"]) expect(c[url]).toBeGreaterThan(850);
	});

	it("moves only the keys of a node that leaves (rendezvous hashing)", () => {
		const keys = Array.from({ length: 600 }, (_, i) => `k${i}`);
		const before = new Map(keys.map((k) => [k, pickNode(three, { now: 0, random: Math.random, affinityKey: k })?.url]));
		const cooling = [three[0]!, { ...three[1]!, coolingUntil: 10 }, three[2]!];
		let moved = 0;
		for (const k of keys) {
			const after = pickNode(cooling, { now: 0, random: Math.random, affinityKey: k })?.url;
			if (before.get(k) !== "http://b/v1") expect(after).toBe(before.get(k));
			else moved++;
		}
		expect(moved).toBeGreaterThan(100);
	});

	it("leaves a key's node when it is overloaded, and weights scale shares", () => {
		const key = "sticky";
		const home = pickNode(three, { now: 0, random: Math.random, affinityKey: key })!.url;
		const loaded = three.map((n) => (n.url === home ? { ...n, waiting: 50 } : n));
		expect(pickNode(loaded, { now: 0, random: Math.random, affinityKey: key })?.url).not.toBe(home);
		const weighted = [node("x", { weight: 3 }), node("y", { weight: 1 })];
		const c: Record<string, number> = {};
		for (let i = 0; i < 4000; i++) {
			const url = rendezvousPick(`u${i}`, weighted)!.url;
			c[url] = (c[url] ?? 0) + 1;
		}
		expect((c.x ?? 0) / (c.y ?? 1)).toBeGreaterThan(2.5);
		expect((c.x ?? 0) / (c.y ?? 1)).toBeLessThan(3.5);
	});
});

describe("node state", () => {
	it("cools a failing node for longer each time, up to sixteen times the base", () => {
		expect([1, 2, 3, 4, 5, 6, 9].map((f) => cooldownMs(f, 1000))).toEqual([1000, 2000, 4000, 8000, 16000, 16000, 16000]);
		const rt = newRuntime();
		recordFailure(rt, "timeout", 100, 1000);
		expect(rt.coolingUntil).toBe(1100);
		recordFailure(rt, "status 500", 200, 1000);
		expect(rt.coolingUntil).toBe(2200);
		expect(rt.lastError).toBe("status 500");
		recordSuccess(rt, 40, 300);
		expect(rt).toMatchObject({ failures: 0, coolingUntil: 0, latencyMs: 40, lastSuccessAt: 300 });
		recordSuccess(rt, 140, 400);
		expect(rt.latencyMs).toBeCloseTo(70);
	});

	it("ends a cooldown when a probe passes after the failure, not before", () => {
		const rt = newRuntime();
		recordFailure(rt, "timeout", 1000, 60_000);
		applyProbe(rt, { healthy: true, checked_at: 900 });
		expect(rt.coolingUntil).toBe(61_000);
		applyProbe(rt, { healthy: false, checked_at: 1500 });
		expect(rt.coolingUntil).toBe(61_000);
		applyProbe(rt, { healthy: true, checked_at: 1500 });
		expect(rt.coolingUntil).toBe(0);
		// Failures keep counting until a request succeeds: the next cooldown is longer.
		recordFailure(rt, "timeout", 2000, 60_000);
		expect(rt.coolingUntil).toBe(2000 + 120_000);
	});
});

describe("Fleet", () => {
	const a: EngineNode = { url: "http://a/v1", weight: 1 };
	const b: EngineNode = { url: "http://b/v1", weight: 1 };
	const pick = (f: Fleet, now = 1000, tried = new Set<string>()) => f.pick("m", [a, b], { now, random: () => 0, tried })?.url;

	it("remembers a failure for every later request of the isolate", () => {
		const f = new Fleet();
		expect(pick(f)).toBe("http://a/v1");
		f.failed("http://a/v1", "status 500", 1000, 15_000);
		expect(pick(f, 2000)).toBe("http://b/v1");
		expect(pick(f, 16_001)).toBe("http://a/v1");
	});

	it("counts requests in flight", () => {
		const f = new Fleet();
		f.started("http://a/v1");
		f.started("http://a/v1");
		expect(pick(f)).toBe("http://b/v1");
		f.finished("http://a/v1");
		f.finished("http://a/v1");
		f.finished("http://a/v1");
		expect(f.runtime("http://a/v1").inFlight).toBe(0);
	});

	it("routes as if every node were healthy before any shared view, then follows probes and load", () => {
		const f = new Fleet();
		expect(f.sharedView()).toBeNull();
		f.ingest({
			at: 10,
			nodes: { "http://a/v1": { healthy: false, checked_at: 10, error: "status 503", latency_ms: null, load: null } },
			overrides: [],
		});
		expect(pick(f)).toBe("http://b/v1");
		// A request that succeeded on it since outranks the older probe.
		f.succeeded("http://a/v1", 5, 20);
		expect(pick(f)).toBe("http://a/v1");
		f.ingest({
			at: 30,
			nodes: {
				"http://a/v1": {
					healthy: true,
					checked_at: 30,
					error: null,
					latency_ms: 1,
					load: { source: "vllm", waiting: 12, running: 8, kv_cache_usage: 0.5 },
				},
			},
			overrides: [],
		});
		expect(pick(f)).toBe("http://b/v1");
	});

	it("ends a cooldown when a newer view carries a passing probe, and ignores an older view", () => {
		const f = new Fleet();
		f.failed("http://a/v1", "timeout", 100, 60_000);
		f.ingest({
			at: 50,
			nodes: { "http://a/v1": { healthy: true, checked_at: 50, error: null, latency_ms: 1, load: null } },
			overrides: [],
		});
		expect(pick(f, 200)).toBe("http://b/v1");
		f.ingest({
			at: 150,
			nodes: { "http://a/v1": { healthy: true, checked_at: 150, error: null, latency_ms: 1, load: null } },
			overrides: [],
		});
		expect(pick(f, 200)).toBe("http://a/v1");
		f.ingest({
			at: 120,
			nodes: {},
			overrides: [{ url: "http://a/v1", model: null, weight: null, drained: true, updated_at: 1 }],
		});
		expect(f.sharedView()?.at).toBe(150);
	});

	it("applies operator overrides: drained, a model's own weight before the node-wide one", () => {
		const f = new Fleet();
		f.ingest({
			at: 1,
			nodes: {},
			overrides: [
				{ url: "http://a/v1", model: null, weight: null, drained: true, updated_at: 1 },
				{ url: "http://b/v1", model: null, weight: 5, drained: false, updated_at: 1 },
				{ url: "http://b/v1", model: "m", weight: 2, drained: false, updated_at: 1 },
			],
		});
		expect(f.weight("m", a)).toBe(0);
		expect(f.weight("m", b)).toBe(2);
		expect(f.weight("other", b)).toBe(5);
		expect(pick(f)).toBe("http://b/v1");
	});
});
