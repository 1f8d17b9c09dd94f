/**
 * How fast the client takes a stream's frames, for the stream driver (pipe-engine-stream.ts): a
 * frame is owed from the moment it is queued for the client until the client asks for the next
 * one (the stream's next pull). A client that owes a frame for `idleTimeoutMs` has stopped
 * reading: a socket left open by a client that is gone (local workerd never says so before the
 * headers) or a client that paused. Time spent waiting on the engine is not the client's: the
 * engine's silence is the engine reader's idle watch (engine-events.ts). One timer per idle
 * period, not one per frame.
 */
export class ClientPace {
	readonly #idleMs: number;
	readonly #onIdle: () => void;
	/** When the oldest frame the client has not asked past was queued; 0 when nothing is owed. */
	#owedSince = 0;
	#timer: ReturnType<typeof setTimeout> | undefined;
	#stopped = false;
	/** Frames handed to the client so far: what the hold keep-alive calls progress. */
	#frames = 0;

	/** `idleMs` 0 or less: never cut (frames are still counted). */
	constructor(idleMs: number, onIdle: () => void) {
		this.#idleMs = idleMs;
		this.#onIdle = onIdle;
	}

	/** Frames handed to the client so far. */
	get frames(): number {
		return this.#frames;
	}

	/** A frame was queued for the client: it owes a read from now, unless it already did. */
	queued(): void {
		this.#frames += 1;
		if (this.#stopped || this.#idleMs <= 0 || this.#owedSince !== 0) return;
		this.#owedSince = Date.now();
		this.#timer ??= setTimeout(() => this.#check(), this.#idleMs);
	}

	/** The client asked for more: everything queued so far was taken (or is being). */
	asked(): void {
		this.#owedSince = 0;
	}

	/** The stream ended: no more watching. */
	stop(): void {
		this.#stopped = true;
		clearTimeout(this.#timer);
		this.#timer = undefined;
	}

	#check(): void {
		this.#timer = undefined;
		if (this.#stopped || this.#owedSince === 0) return;
		const owed = Date.now() - this.#owedSince;
		if (owed < this.#idleMs) {
			this.#timer = setTimeout(() => this.#check(), this.#idleMs - owed);
			return;
		}
		this.stop();
		this.#onIdle();
	}
}
