/**
 * A fleet of simulated inference engines on a virtual clock, driven by a routing policy.
 *
 * Each node: a prefix cache (LRU over 16-token blocks, chained so a block is reused only after
 * the same prefix), prefill at `prefillTps` tokens/s through one prefill queue, decode at
 * `decodeTps` tokens/s per sequence, up to `batch` sequences at once, a FIFO queue beyond that.
 * Workload: multi-turn sessions arriving as a Poisson process; each turn's prompt is the whole
 * history; the next turn follows the answer after a think time.
 */

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

const uniformInt = (r, lo, hi) => lo + Math.floor(r() * (hi - lo + 1));
const exp = (r, mean) => -Math.log(1 - r()) * mean;

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

const BLOCK = 16;

/** Chain ids: a segment's id after a given prefix, interned to small integers. */
class Chains {
	ids = new Map();
	of(prev, seg) {
		const k = `${prev},${seg}`;
		let id = this.ids.get(k);
		if (id === undefined) {
			id = this.ids.size + 1;
			this.ids.set(k, id);
		}
		return id;
	}
}

/** The block keys of a token sequence made of segments ({chain, len}): one per full 16-token block. */
function blockKeys(segments, tokens) {
	const keys = [];
	let start = 0;
	let si = 0;
	for (let end = BLOCK; end <= tokens; end += BLOCK) {
		while (start + segments[si].len < end) {
			start += segments[si].len;
			si++;
		}
		keys.push(segments[si].chain * 65536 + (end - start));
	}
	return keys;
}

class Node {
	constructor(index, opts) {
		this.index = index;
		this.opts = opts;
		this.cache = new Map(); // block key → true, in LRU order (oldest first)
		this.capacityBlocks = Math.floor(opts.cacheTokens / BLOCK);
		this.running = 0;
		this.queue = [];
		this.prefillFreeAt = 0;
		this.served = 0;
		// What the engine's /metrics last said (refreshed every metricsMs).
		this.reportedWaiting = 0;
		this.reportedRunning = 0;
	}
	/** Leading blocks of `keys` in the cache (refreshed as used), then every block inserted. */
	touch(keys) {
		let hit = 0;
		while (hit < keys.length && this.cache.has(keys[hit])) hit++;
		for (const k of keys) {
			this.cache.delete(k);
			this.cache.set(k, true);
		}
		while (this.cache.size > this.capacityBlocks) this.cache.delete(this.cache.keys().next().value);
		return hit;
	}
	get load() {
		return this.running + this.queue.length;
	}
}

/**
 * Runs one policy over the workload. `policy.pick(nodes, request, now)` returns a node index.
 * Returns the per-request records and per-node counts.
 */
export function simulate(policy, opts) {
	const events = new Events();
	const chains = new Chains();
	const nodes = Array.from({ length: opts.nodes }, (_, i) => new Node(i, opts));
	const rng = prng(opts.seed);
	const apps = Array.from({ length: opts.apps }, (_, i) => ({ id: `app-${i}`, len: uniformInt(rng, opts.appMin, opts.appMax) }));
	const records = [];
	let sessionId = 0;

	const refreshMetrics = (now) => {
		for (const n of nodes) {
			n.reportedWaiting = n.queue.length;
			n.reportedRunning = n.running;
		}
		if (now < opts.durationS) events.push(now + opts.metricsS, refreshMetrics);
	};
	events.push(0, refreshMetrics);

	const startSession = (now) => {
		const id = sessionId++;
		const r = prng(opts.seed * 7919 + id);
		const shared = r() < opts.sharedShare;
		const app = shared ? apps[Math.floor(r() * apps.length)] : { id: `own-${id}`, len: uniformInt(r, opts.ownMin, opts.ownMax) };
		const session = {
			id,
			r,
			app,
			turns: uniformInt(r, opts.turnsMin, opts.turnsMax),
			turn: 0,
			cacheKey: r() < opts.keyShare ? `pck-${id}` : undefined,
			segments: [{ chain: chains.of(0, app.id), len: app.len }],
			tokens: app.len,
		};
		turn(session, now);
		const next = now + exp(rng, 1 / opts.sessionRate);
		if (next < opts.durationS) events.push(next, startSession);
	};

	const turn = (s, now) => {
		const user = uniformInt(s.r, opts.userMin, opts.userMax);
		const answer = uniformInt(s.r, opts.answerMin, opts.answerMax);
		const prev = s.segments[s.segments.length - 1].chain;
		s.segments.push({ chain: chains.of(prev, `u${s.id}.${s.turn}`), len: user });
		s.tokens += user;
		const request = {
			session: s,
			arrival: now,
			prompt: s.tokens,
			answer,
			// What the gateway hashes for a request without prompt_cache_key: the system prompt and the first user message.
			body: {
				messages: [
					{ role: "system", content: s.app.id },
					{ role: "user", content: `first message of session ${s.id}` },
				],
			},
			cacheKey: s.cacheKey,
		};
		const n = nodes[policy.pick(nodes, request, now)];
		policy.started?.(n.index);
		request.node = n;
		n.served++;
		if (n.running < opts.batch) admit(n, request, now);
		else n.queue.push(request);
	};

	const admit = (n, req, now) => {
		n.running++;
		const keys = blockKeys(req.session.segments, req.prompt);
		const cached = Math.min(req.prompt, n.touch(keys) * BLOCK);
		const prefillStart = Math.max(now, n.prefillFreeAt);
		const firstToken = prefillStart + (req.prompt - cached) / opts.prefillTps;
		n.prefillFreeAt = firstToken;
		const done = firstToken + req.answer / opts.decodeTps;
		records.push({
			arrival: req.arrival,
			ttft: firstToken - req.arrival,
			prompt: req.prompt,
			cached,
			answer: req.answer,
			done,
			node: n.index,
		});
		events.push(done, (t) => finish(n, req, t));
	};

	const finish = (n, req, now) => {
		n.running--;
		policy.finished?.(n.index);
		const s = req.session;
		const prev = s.segments[s.segments.length - 1].chain;
		s.segments.push({ chain: chains.of(prev, `a${s.id}.${s.turn}`), len: req.answer });
		s.tokens += req.answer;
		// The answer is cached with the prompt (the engine keeps the generated blocks).
		n.touch(blockKeys(s.segments, s.tokens));
		const queued = n.queue.shift();
		if (queued) admit(n, queued, now);
		s.turn++;
		if (s.turn < s.turns) events.push(now + exp(s.r, opts.thinkS), (t) => turn(s, t));
	};

	events.push(exp(rng, 1 / opts.sessionRate), startSession);
	let now = 0;
	while (events.size) {
		const e = events.pop();
		now = e.time;
		e.fn(now);
	}
	return { records, served: nodes.map((n) => n.served), end: now };
}
