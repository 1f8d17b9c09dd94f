/**
 * A fleet of simulated engines (engine.mjs) on a virtual clock, fed by a workload
 * (workloads.mjs) and routed by a policy (policies.mjs). Deterministic: one seed drives every
 * random draw, and events at the same time run in the order they were scheduled, so a run depends
 * on its flags, never on the machine or its load.
 */
import { BLOCK, Engine } from "./engine.mjs";

/** A seeded PRNG (mulberry32): uniform in [0, 1). */
export function prng(seed) {
	let a = seed >>> 0;
	return () => {
		a = (a + 0x6d2b79f5) >>> 0;
		let t = a;
		t = Math.imul(t ^ (t >>> 15), t | 1);
		t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
		return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
	};
}

/** A min-heap of events by time (ties by insertion order, so runs are deterministic). */
class Events {
	heap = [];
	seq = 0;
	push(time, fn) {
		const h = this.heap;
		h.push({ time, seq: this.seq++, fn });
		let i = h.length - 1;
		while (i > 0) {
			const p = (i - 1) >> 1;
			if (less(h[p], h[i])) break;
			[h[p], h[i]] = [h[i], h[p]];
			i = p;
		}
	}
	pop() {
		const h = this.heap;
		const top = h[0];
		const last = h.pop();
		if (h.length) {
			h[0] = last;
			let i = 0;
			for (;;) {
				const l = 2 * i + 1;
				const r = l + 1;
				let m = i;
				if (l < h.length && less(h[l], h[m])) m = l;
				if (r < h.length && less(h[r], h[m])) m = r;
				if (m === i) break;
				[h[m], h[i]] = [h[i], h[m]];
				i = m;
			}
		}
		return top;
	}
	get size() {
		return this.heap.length;
	}
}
const less = (a, b) => a.time < b.time || (a.time === b.time && a.seq < b.seq);

/**
 * Runs one policy over one workload. `opts`: nodes, spec (an engine profile), rate, durationS
 * (arrivals stop), warmupS (not measured), drainS (how long after the last arrival the run may
 * go on; a request without a first token by then counts with the time it waited, a lower bound),
 * metricsS (how often engine gauges refresh), seed. `policy.pick(fleet, request, now)` returns a
 * node index; `fleet` holds the engines and the gateway's in-flight counts.
 */
export function simulate(workload, policy, opts) {
	const events = new Events();
	const engines = Array.from({ length: opts.nodes }, (_, i) => new Engine(i, opts.spec, policy.knowsQueues));
	const fleet = { engines, inflight: new Array(opts.nodes).fill(0) };
	const records = [];
	const seen = new Set(); // every block any engine has computed: what a perfect cache could reuse
	const end = opts.durationS + opts.drainS;
	const inWindow = (t) => t >= opts.warmupS && t < opts.durationS;
	let produced = 0;
	const kv = [];
	const routed = new Array(opts.nodes).fill(0);

	const refresh = (now) => {
		for (const e of engines) e.reported = { waiting: e.queue.length, running: e.running.length, kvCacheUsage: e.usage };
		if (inWindow(now)) {
			let held = 0;
			let cached = 0;
			let cap = 0;
			for (const e of engines) {
				held += e.pinned.size + e.reserved;
				cached += e.used;
				cap += e.capacity;
			}
			kv.push({ held: held / cap, cached: cached / cap });
		}
		if (now + opts.metricsS <= end) events.push(now + opts.metricsS, refresh);
	};
	events.push(0, refresh);

	const startStep = (e, now) => {
		const step = e.plan(now);
		if (!step) {
			e.busy = false;
			return;
		}
		e.busy = true;
		events.push(now + step.duration, (t) => endStep(e, step, t));
	};
	const endStep = (e, step, t) => {
		e.busyS = (e.busyS ?? 0) + step.duration;
		const { finished, produced: n } = e.apply(step, t);
		if (inWindow(t)) produced += n;
		for (const r of finished) {
			const answerKeys = r.answerKeys?.() ?? [];
			e.release(r, answerKeys);
			for (const k of answerKeys) seen.add(k);
			if (r.node !== undefined) fleet.inflight[e.index]--;
			policy.finished?.(e.index);
			r.onFinish?.(t);
		}
		startStep(e, t);
	};

	const rng = prng(opts.seed);
	const sim = {
		fleet,
		rng,
		fork: (salt) => prng(opts.seed * 7919 + salt),
		at(t, fn) {
			if (t <= end) events.push(t, fn);
		},
		/** Hands a request straight to node `i` (a batch line: the dispatcher picked it, not `policy`). */
		submitTo(req, i, now) {
			req.arrival ??= now;
			req.sent = now;
			const e = engines[i];
			e.enqueue(req);
			if (!e.busy) startStep(e, now);
		},
		submit(req, now) {
			req.arrival = now;
			let ideal = 0;
			while (ideal < req.keys.length && seen.has(req.keys[ideal])) ideal++;
			req.ideal = Math.min(req.prompt, ideal * BLOCK);
			for (const k of req.keys) seen.add(k);
			const i = policy.pick(fleet, req, now);
			req.node = i;
			fleet.inflight[i]++;
			if (inWindow(now)) routed[i]++;
			records.push(req);
			const e = engines[i];
			e.enqueue(req);
			if (!e.busy) startStep(e, now);
		},
	};
	workload.start(sim, opts);

	let now = 0;
	while (events.size) {
		const ev = events.pop();
		if (ev.time > end) break;
		now = ev.time;
		ev.fn(now);
	}
	return { records, produced, kv, routed, engines, end: Math.max(now, opts.durationS) };
}

function percentile(sorted, p) {
	if (!sorted.length) return Number.NaN;
	return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
}

/** The measured window of a run: hit rates, TTFT percentiles, output tokens/s, the busiest node. */
export function summarize(result, opts) {
	const window = opts.durationS - opts.warmupS;
	const rs = result.records.filter((r) => r.arrival >= opts.warmupS && r.arrival < opts.durationS);
	let censored = 0;
	const ttft = rs
		.map((r) => {
			if (r.firstToken !== undefined) return r.firstToken - r.arrival;
			censored++;
			return result.end - r.arrival;
		})
		.sort((a, b) => a - b);
	let prompt = 0;
	let cached = 0;
	let ideal = 0;
	let offered = 0;
	for (const r of rs) {
		offered += r.answer;
		if (r.cached === undefined) continue;
		prompt += r.prompt;
		cached += r.cached;
		ideal += r.ideal;
	}
	const mean = rs.length / opts.nodes;
	const kvHeld = result.kv.length ? result.kv.reduce((s, k) => s + k.held, 0) / result.kv.length : Number.NaN;
	const kvPeak = result.kv.length ? Math.max(...result.kv.map((k) => k.held)) : Number.NaN;
	return {
		requests: rs.length,
		censored,
		hit: prompt ? cached / prompt : Number.NaN,
		ideal: prompt ? ideal / prompt : Number.NaN,
		p50: percentile(ttft, 0.5),
		p90: percentile(ttft, 0.9),
		p99: percentile(ttft, 0.99),
		outputTps: result.produced / window,
		offeredTps: offered / window,
		busiest: mean ? Math.max(...result.routed) / mean : Number.NaN,
		kvHeld,
		kvPeak,
	};
}
