/**
 * Routing policies for the fleet simulator. Each is a factory (fresh state for every run) of
 * `{ pick(fleet, request, now) → node index }`.
 *
 * - gateway: the gateway's shipped code, unchanged: `pickRoute` (src/routing/picker.ts) with the
 *   affinity key it computes (`prompt_cache_key`, else `prefixAffinityKey` of the body), seeing what
 *   it sees in production: its own in-flight counts, and the engines' gauges (waiting, running,
 *   kv_cache_usage_perc) as last scraped, every `metricsS`; `factor` and `slack` set its
 *   affinity_load_factor and the most requests of per-key slack over its bound (`gateway@F:S`).
 * - round-robin, random: no knowledge at all.
 * - oracle: knows every node's cache contents and queue exactly, now (what llm-d's precise scorer
 *   and Dynamo's KV router approximate with engine KV events): sends each request to the node
 *   where its first token is expected soonest, counting the prefill queued ahead, its own uncached
 *   prefill, the length of the node's steps (its running requests' context), and, when the node
 *   cannot admit it now, the wait for running requests to free room.
 * - power of two, consistent hash: the gateway's balanced and affinity halves alone (opt-in).
 */
import { BLOCK } from "./engine.mjs";
import { prng } from "./sim.mjs";

function views(fleet) {
	return fleet.engines.map((e) => ({
		url: `node-${e.index}`,
		index: e.index,
		weight: 1,
		inFlight: fleet.inflight[e.index],
		coolingUntil: 0,
		failedAt: 0,
		healthy: true,
		waiting: e.reported.waiting,
		running: e.reported.running,
		kvCacheUsage: e.reported.kvCacheUsage,
	}));
}

/** The oracle's estimate of a request's time to first token on engine `e`. */
export function expectedTtft(e, req) {
	const s = e.spec;
	// Cached, being computed, or to be computed by a request queued ahead: all there before this one starts.
	const promised = e.leadingPromised(req.keys);
	const hit = Math.min(req.prompt - 1, promised.blocks * BLOCK);
	let ahead = 0;
	let ctx = 0;
	for (const r of e.running) {
		ahead += r.prefillLeft;
		ctx += r.prompt - r.prefillLeft + r.generated;
	}
	ahead += e.queuedPrefill;
	let wait = 0;
	const room = e.pinned.size + e.reserved + req.keys.length - promised.pinned + req.reserve <= e.capacity;
	if (e.queue.length || e.running.length >= s.maxSeqs || !room) {
		// It waits until about queue + 1 of the running requests end (each frees its blocks).
		const left = e.running.map((r) => r.answer - r.generated).sort((a, b) => a - b);
		const k = Math.min(left.length - 1, e.queue.length);
		wait = (left[k] ?? 0) * (s.stepBaseS + ctx * s.ctxReadS);
	}
	// Its prefill runs in steps slowed by every running request's context: about one and a half
	// steps (the one under way, then its own) beside the prefill itself.
	const step = s.stepBaseS + ctx * s.ctxReadS;
	const ttft = wait + 1.5 * step + (ahead + req.prompt - hit) / s.prefillTps;
	return { ttft, hit };
}

export function makePolicies(routing, o) {
	return {
		gateway: () => {
			const random = prng(o.seed + 99);
			return {
				pick: (fleet, req, now) =>
					routing.pickRoute(views(fleet), {
						now: now * 1000,
						random,
						affinityKey: req.cacheKey ?? routing.prefixAffinityKey(req.body),
						loadFactor: o.factor,
						affinitySlack: o.slack,
					}).node.index,
			};
		},
		"round-robin": () => {
			let i = 0;
			return { pick: (fleet) => i++ % fleet.engines.length };
		},
		random: () => {
			const r = prng(o.seed + 7);
			return { pick: (fleet) => Math.floor(r() * fleet.engines.length) };
		},
		oracle: () => ({
			knowsQueues: true,
			pick: (fleet, req) => {
				let best = 0;
				let bestCost = Number.POSITIVE_INFINITY;
				let bestHit = 0;
				for (const e of fleet.engines) {
					const { ttft, hit } = expectedTtft(e, req);
					// Ties (idle nodes) go to the one with fewer requests on it.
					const cost = ttft + 1e-6 * (e.running.length + e.queue.length);
					if (cost < bestCost) {
						best = e.index;
						bestCost = cost;
						bestHit = hit;
					}
				}
				req.expectedHit = bestHit;
				return best;
			},
		}),
		"power of two": () => {
			const random = prng(o.seed + 98);
			return { pick: (fleet) => routing.powerOfTwo(views(fleet), random).index };
		},
		"consistent hash": () => ({
			pick: (fleet, req) => routing.rendezvousPick(req.cacheKey ?? routing.prefixAffinityKey(req.body), views(fleet)).index,
		}),
	};
}
