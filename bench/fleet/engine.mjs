/**
 * One simulated inference engine (vLLM-like) on a virtual clock: a paged KV cache of
 * `kvTokens` tokens in 64-token blocks, continuous batching in steps, chunked prefill.
 *
 * KV cache. A block is *pinned* while a running request uses it and *free* (cached, evictable)
 * otherwise; free blocks are evicted least recently used first, so a prefix stays cached until
 * newer work needs the room. A request's cache hit is the leading run of its prompt's blocks
 * present and computed at admission (vLLM's automatic prefix caching, SGLang's radix cache: two
 * requests prefilling the same new prefix at once both compute it). Admission is FIFO:
 * the head of the queue enters when its missing prompt blocks plus its whole answer fit beside the
 * pinned blocks (vLLM admits more eagerly and preempts; reserving the answer up front never
 * preempts, so this engine's capacity is slightly conservative), and while fewer than `maxSeqs` run.
 *
 * A step: every decoding request gets one token; what is left of `maxBatchedTokens` goes to
 * prefills in admission order. Its duration: `stepBaseS` (the weights read once, the floor of a
 * decode step) + prefill tokens / `prefillTps` + the context of every running request × `ctxReadS`
 * (attention reads each request's KV once a step). A request's first token comes at the end of the
 * step that finishes its prefill.
 */

/**
 * Tokens a block. vLLM's pages are 16 tokens and SGLang's 1; 64 is llm-d's hashBlockSize and keeps
 * the simulation four times cheaper than 16. A hit is rounded down to it: under 64 tokens of
 * 2,000–10,000-token prompts, and an answer's room is rounded up to it.
 */
export const BLOCK = 64;

const GiB = 1024 ** 3;

/**
 * Engine profiles. KV capacity: (GPU memory × the engine's memory fraction − weights − activations)
 * ÷ KV bytes per token, where KV bytes per token = 2 (K and V) × layers × KV heads × head dim × 2 bytes.
 * Timing: a decode step cannot be faster than reading the weights at ~70% of HBM bandwidth; prefill
 * runs at ~50% of dense bf16 peak at 2 FLOPs per parameter per token; attention reads a token's KV
 * bytes at the same ~70% bandwidth. These are estimates stated so they can be checked, not measurements.
 */
export const ENGINES = {
	/**
	 * llm-d's pods in "KV-Cache Wins You Can See": vLLM, Qwen3-32B, TP=2 on 2× H100 80GB. KV/pod
	 * 307,328 tokens is llm-d's own figure (workload profile X-70R-6kSys). KV per token: 2 × 64 layers
	 * × 8 KV heads × 128 × 2 B = 256 KiB. Weights 65.5 GB over 2 GPUs at 2 × 3.35 TB/s × 0.7 → 14 ms a
	 * step; prefill 2 × 989 TFLOP/s × 0.5 ÷ 65.5 GFLOP a token ≈ 15,000 tokens/s; attention
	 * 256 KiB ÷ 4.69 TB/s = 56 ns a context token.
	 */
	"h100x2-qwen3-32b": {
		label: "vLLM, Qwen3-32B TP=2 on 2× H100 80GB",
		kvTokens: 307_328,
		stepBaseS: 0.014,
		prefillTps: 15_000,
		ctxReadS: 56e-9,
		maxSeqs: 256,
		maxBatchedTokens: 8192,
	},
	/**
	 * vLLM, Llama-3.1-8B on one H100 80GB (our own workload's default). KV: (80 GiB × 0.90
	 * gpu_memory_utilization − 14.96 GiB of bf16 weights − ~2.5 GiB activations and CUDA graphs)
	 * = 54.5 GiB ÷ 128 KiB a token (2 × 32 layers × 8 KV heads × 128 × 2 B) ≈ 446,000 tokens.
	 * Weights 16.1 GB ÷ (3.35 TB/s × 0.7) ≈ 7 ms a step; prefill 989 TFLOP/s × 0.5 ÷ 16.1 GFLOP
	 * ≈ 30,000 tokens/s; attention 128 KiB ÷ 2.35 TB/s = 56 ns a context token.
	 */
	"h100-llama-8b": {
		label: "vLLM, Llama-3.1-8B on 1× H100 80GB",
		kvTokens: 446_000,
		stepBaseS: 0.007,
		prefillTps: 30_000,
		ctxReadS: 56e-9,
		maxSeqs: 256,
		maxBatchedTokens: 8192,
	},
	/**
	 * SGLang's router benchmark: Llama-3.1-8B, one worker per A100 80GB (`--dp-size 8`). KV:
	 * (80 GiB × 0.88 mem_fraction_static − 14.96 GiB weights) = 55.4 GiB ÷ 128 KiB ≈ 454,000 tokens.
	 * Weights 16.1 GB ÷ (2.04 TB/s × 0.7) ≈ 11.3 ms a step; prefill 312 TFLOP/s × 0.5 ÷ 16.1 GFLOP
	 * ≈ 9,700 tokens/s; attention 128 KiB ÷ 1.43 TB/s = 92 ns a context token.
	 */
	"a100-llama-8b": {
		label: "SGLang, Llama-3.1-8B on 1× A100 80GB",
		kvTokens: 454_000,
		stepBaseS: 0.0113,
		prefillTps: 9_700,
		ctxReadS: 92e-9,
		maxSeqs: 256,
		maxBatchedTokens: 8192,
	},
};

/** The arithmetic behind a profile's KV capacity, for the README. */
export function kvArithmetic() {
	const perToken = (layers, kvHeads) => (2 * layers * kvHeads * 128 * 2) / 1024;
	return {
		"h100x2-qwen3-32b": `llm-d's figure: 307,328 tokens a pod (KV ${perToken(64, 8)} KiB a token, 75 GiB over 2 GPUs)`,
		"h100-llama-8b": `(80 GiB × 0.90 − 14.96 GiB weights − 2.5 GiB activations) ÷ ${perToken(32, 8)} KiB ≈ ${Math.round(((80 * 0.9 - 14.96 - 2.5) * GiB) / (perToken(32, 8) * 1024)).toLocaleString("en-US")} tokens`,
		"a100-llama-8b": `(80 GiB × 0.88 − 14.96 GiB weights) ÷ ${perToken(32, 8)} KiB ≈ ${Math.round(((80 * 0.88 - 14.96) * GiB) / (perToken(32, 8) * 1024)).toLocaleString("en-US")} tokens`,
	};
}

export class Engine {
	constructor(index, spec, trackQueue = false) {
		this.index = index;
		this.trackQueue = trackQueue; // keep queuedKeys (for a policy that reads them)
		this.releases = 0; // finished requests so far: room only grows when one ends
		this.spec = spec;
		this.capacity = Math.floor(spec.kvTokens / BLOCK);
		this.free = new Map(); // block key → true, least recently used first
		this.pinned = new Map(); // block key → how many running requests use it
		this.reserved = 0; // blocks held for answers being generated
		this.computing = new Set(); // blocks allocated but not yet computed: no hit until their prefill ends
		this.queuedKeys = new Map(); // block key → how many waiting requests will compute or reuse it
		this.queuedPrefill = 0; // prompt tokens the waiting requests are expected to compute (the oracle's guess)
		this.queue = [];
		this.running = [];
		this.busy = false;
		// What the engine's /metrics last said (the simulation refreshes these).
		this.reported = { waiting: 0, running: 0, kvCacheUsage: 0 };
	}

	get used() {
		return this.free.size + this.pinned.size + this.reserved;
	}

	has(key) {
		return this.pinned.has(key) || this.free.has(key);
	}

	/** Leading blocks of `keys` in this cache, computed (a prefix still being prefilled is no hit yet). */
	leadingHit(keys) {
		let h = 0;
		while (h < keys.length && this.has(keys[h]) && !this.computing.has(keys[h])) h++;
		return h;
	}

	/** Share of blocks held by running requests (vLLM's kv_cache_usage_perc). */
	get usage() {
		return (this.pinned.size + this.reserved) / this.capacity;
	}

	fits(req) {
		let inFree = 0;
		let missing = 0;
		for (const k of req.keys) {
			if (this.pinned.has(k)) continue;
			if (this.free.has(k)) inFree++;
			else missing++;
		}
		return this.pinned.size + this.reserved + inFree + missing + req.reserve <= this.capacity;
	}

	/** `fits` for the head of the queue; a head that did not fit waits for a request to end (nothing else makes room). */
	headFits() {
		const head = this.queue[0];
		if (head.noRoomAt === this.releases) return false;
		if (this.fits(head)) return true;
		head.noRoomAt = this.releases;
		return false;
	}

	evictOne() {
		const oldest = this.free.keys().next();
		if (oldest.done) return false;
		this.free.delete(oldest.value);
		return true;
	}

	pin(key) {
		const n = this.pinned.get(key);
		if (n !== undefined) this.pinned.set(key, n + 1);
		else {
			if (!this.free.delete(key) && this.used >= this.capacity) this.evictOne();
			this.pinned.set(key, 1);
		}
	}

	unpin(key) {
		const n = this.pinned.get(key);
		if (n === undefined) return;
		if (n > 1) this.pinned.set(key, n - 1);
		else {
			this.pinned.delete(key);
			this.free.set(key, true);
		}
	}

	/** Caches blocks no request holds (an answer's, after it ends), evicting as needed. */
	remember(keys) {
		for (const k of keys) {
			if (this.pinned.has(k)) continue;
			if (this.free.delete(k)) {
				this.free.set(k, true);
				continue;
			}
			if (this.used >= this.capacity && !this.evictOne()) return;
			this.free.set(k, true);
		}
	}

	/**
	 * Queues a request. With `priority` set (vLLM's `--scheduling-policy priority`: lower runs
	 * first), it goes ahead of every waiting request of a higher number: a batch line (1) never
	 * makes an interactive request (0) wait in the queue.
	 */
	enqueue(req) {
		const p = req.priority ?? 0;
		const at = this.queue.findIndex((q) => (q.priority ?? 0) > p);
		if (at < 0) this.queue.push(req);
		else this.queue.splice(at, 0, req);
		this.queuedPrefill += req.prompt - (req.expectedHit ?? 0);
		if (this.trackQueue) for (const k of req.keys) this.queuedKeys.set(k, (this.queuedKeys.get(k) ?? 0) + 1);
	}

	/**
	 * Leading blocks of `keys` this engine has or will have computed before a request sent now
	 * starts, and how many of those are pinned (held by running requests, so they cost no room).
	 */
	leadingPromised(keys) {
		let h = 0;
		let pinned = 0;
		for (; h < keys.length; h++) {
			const k = keys[h];
			if (this.pinned.has(k)) pinned++;
			else if (!this.free.has(k) && !this.queuedKeys.has(k)) break;
		}
		return { blocks: h, pinned };
	}

	/** Admits the head of the queue: its cache hit is what is computed now. */
	admitHead(now) {
		const req = this.queue.shift();
		this.queuedPrefill -= req.prompt - (req.expectedHit ?? 0);
		if (this.trackQueue)
			for (const k of req.keys) {
				const n = this.queuedKeys.get(k);
				if (n > 1) this.queuedKeys.set(k, n - 1);
				else this.queuedKeys.delete(k);
			}
		const hit = this.leadingHit(req.keys);
		// The answer's room first, so the prompt's new blocks evict what they must.
		this.reserved += req.reserve;
		while (this.used > this.capacity && this.evictOne());
		req.computing = [];
		for (let i = 0; i < req.keys.length; i++) {
			const k = req.keys[i];
			if (i >= hit && !this.has(k)) {
				this.computing.add(k);
				req.computing.push(k);
			}
			this.pin(k);
		}
		// A fully cached prompt still computes its last token (vLLM does), which yields the first.
		req.cached = Math.min(req.prompt - 1, hit * BLOCK);
		req.prefillLeft = req.prompt - req.cached;
		req.generated = 0;
		req.admitted = now;
		this.running.push(req);
		return req;
	}

	/**
	 * Plans one step (vLLM's scheduler): decodes first, one token each, then the running prefills in
	 * order, then waiting requests from the head of the queue while the token budget, `maxSeqs` and
	 * the KV cache allow. Returns its duration and what it does, or null when idle.
	 */
	plan(now) {
		const s = this.spec;
		this.preemptFor(this.queue[0]);
		let budget = s.maxBatchedTokens;
		let ctx = 0;
		const decode = [];
		const prefill = [];
		let prefillTokens = 0;
		for (const r of this.running) {
			ctx += r.prompt - r.prefillLeft + r.generated;
			if (r.prefillLeft === 0) {
				decode.push(r);
				budget--;
			}
		}
		// Prefills by priority (vLLM's priority policy; without priorities, one class in order): the
		// running ones of a class, then that class's waiting ones, then the next class. `lowPrefill`
		// (when set) caps the prefill tokens of lower-priority requests a step, as vLLM's
		// long_prefill_token_threshold caps a long prefill's chunk.
		let low = s.lowPrefill ?? Number.POSITIVE_INFINITY;
		const take = (r) => {
			const n = Math.min(r.prefillLeft, budget, r.priority ? low : budget);
			if (r.priority) low -= n;
			return n;
		};
		const prefillRunning = (cls) => {
			for (const r of this.running) {
				if (r.prefillLeft === 0 || budget <= 0 || (r.priority ?? 0) !== cls) continue;
				const n = take(r);
				if (n <= 0) continue;
				prefill.push([r, n]);
				budget -= n;
				prefillTokens += n;
			}
		};
		const admit = (cls) => {
			while (
				budget > 0 &&
				this.queue.length &&
				(this.queue[0].priority ?? 0) <= cls &&
				(!cls || low > 0) &&
				this.running.length < s.maxSeqs &&
				this.headFits()
			) {
				const r = this.admitHead(now);
				ctx += r.cached;
				const n = take(r);
				prefill.push([r, n]);
				budget -= n;
				prefillTokens += n;
			}
		};
		prefillRunning(0);
		admit(0);
		prefillRunning(1);
		admit(1);
		if (!decode.length && !prefill.length) return null;
		const duration = s.stepBaseS + prefillTokens / s.prefillTps + ctx * s.ctxReadS;
		return { duration, decode, prefill };
	}

	/**
	 * vLLM's priority preemption: while a waiting request cannot start (no room in the KV cache, or
	 * `maxSeqs` running) and a running request of a higher priority number holds room, the latest
	 * admitted of those stops, frees its blocks (kept cached, so it recomputes little) and waits again
	 * behind the requests of its priority's betters.
	 */
	preemptFor(head) {
		const p = head?.priority ?? 0;
		if (!head || !this.running.some((r) => (r.priority ?? 0) > p)) return;
		for (;;) {
			if (this.running.length < this.spec.maxSeqs && this.fits(head)) return;
			let victim = -1;
			for (let i = this.running.length - 1; i >= 0; i--) {
				if ((this.running[i].priority ?? 0) > p) {
					victim = i;
					break;
				}
			}
			if (victim < 0) return;
			const [r] = this.running.splice(victim, 1);
			for (const k of r.computing) this.computing.delete(k);
			this.release(r);
			r.preempted = (r.preempted ?? 0) + 1;
			r.firstToken = undefined;
			this.enqueue(r);
		}
	}

	/** Applies a planned step ending at `end`; returns the requests that finished and the tokens produced. */
	apply(step, end) {
		const finished = [];
		let produced = 0;
		// Tokens computed (prefill and decode) by interactive requests [0] and batch lines [1].
		this.tokens ??= [0, 0];
		for (const r of step.decode) this.tokens[r.priority ? 1 : 0]++;
		for (const [r, n] of step.prefill) this.tokens[r.priority ? 1 : 0] += n;
		for (const r of step.decode) {
			r.generated++;
			produced++;
			if (r.generated >= r.answer) finished.push(r);
		}
		for (const [r, n] of step.prefill) {
			r.prefillLeft -= n;
			if (r.prefillLeft === 0) {
				for (const k of r.computing) this.computing.delete(k);
				r.firstToken = end;
				r.generated = 1;
				produced++;
				if (r.generated >= r.answer) finished.push(r);
			}
		}
		if (finished.length) {
			const done = new Set(finished);
			this.running = this.running.filter((r) => !done.has(r));
			for (const r of finished) r.done = end;
		}
		return { finished, produced };
	}

	/**
	 * Frees a finished request's blocks, keeping them cached: its answer's blocks (`answerKeys`, when
	 * a later prompt repeats them) and its prompt's, tail first, as vLLM frees them, so eviction
	 * takes a prefix from its end and the shared head stays longest.
	 */
	release(r, answerKeys = []) {
		this.releases++;
		this.reserved -= r.reserve;
		for (let i = answerKeys.length - 1; i >= 0; i--) this.remember([answerKeys[i]]);
		for (let i = r.keys.length - 1; i >= 0; i--) this.unpin(r.keys[i]);
	}
}
