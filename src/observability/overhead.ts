/**
 * `x-venym-overhead-ms`: the gateway's own time in a request, what its engines (and the web
 * search backend) took left out. Definition (docs/operations.md "Overhead"): from the request's
 * arrival to the response's head, minus the time the request was waiting on an upstream, where
 * an upstream wait runs from an engine attempt's fetch to the end of reading its body (or the
 * attempt's failure), and over a web search call. Overlapping waits count once (their union).
 * The head of a non-stream answer goes out after the engine's last byte, so its overhead is
 * the time before the first engine call, between attempts, and after the last byte; a stream's
 * head goes out at the first token, and its overhead is the time to that head minus the wait.
 *
 * Workers' clock only moves across I/O (a Spectre mitigation): the gateway's pure CPU time reads
 * as zero under workerd in production, its waits on D1, Durable Objects, KV and Cache do not.
 */

declare module "hono" {
	interface ContextVariableMap {
		/** The request's own time against its upstream waits: set for every request (app.ts). */
		clock: GatewayClock;
	}
}

/** Header name, on every response the Worker sends (app.ts). */
export const OVERHEAD_HEADER = "x-venym-overhead-ms";

export class GatewayClock {
	readonly startedAt: number;
	#open = 0;
	#openSince = 0;
	#waitedMs = 0;
	#overheadMs: number | null = null;

	constructor(now = Date.now()) {
		this.startedAt = now;
	}

	/** An upstream wait begins (an engine fetch, a search call). */
	waitBegin(now = Date.now()): void {
		if (this.#open++ === 0) this.#openSince = now;
	}

	/** An upstream wait ended; each `waitBegin` is ended once. */
	waitEnd(now = Date.now()): void {
		if (this.#open === 0) return;
		if (--this.#open === 0) this.#waitedMs += Math.max(0, now - this.#openSince);
	}

	/** Runs `work` as an upstream wait. */
	async during<T>(work: Promise<T>): Promise<T> {
		this.waitBegin();
		try {
			return await work;
		} finally {
			this.waitEnd();
		}
	}

	/** Upstream time so far (an open wait counted up to `now`). */
	waitedMs(now = Date.now()): number {
		return this.#waitedMs + (this.#open > 0 ? Math.max(0, now - this.#openSince) : 0);
	}

	/**
	 * The overhead, fixed the first time it is asked for: at the response's head (app.ts), or for
	 * a request with no head of its own (a background response's run) when its line is written.
	 */
	overheadMs(now = Date.now()): number {
		this.#overheadMs ??= Math.max(0, now - this.startedAt - this.waitedMs(now));
		return this.#overheadMs;
	}
}
