/**
 * Engine bytes → typed events: the first layer of every engine stream. It owns the byte
 * decoding, the SSE grammar (with a bounded event buffer), the events' classification
 * (engine-event.ts), the idle watch and the request's deadline; the layers above (the chat reducer, the encoders) never see bytes.
 */
import { classifyEvent, type EngineEvent, failure, isFirstToken, type StreamError } from "./engine-event";
import { createSseParser, MAX_EVENT_CHARS, SseOverflowError } from "./sse-parser";

export type { EngineEvent, StreamError } from "./engine-event";
export { classifyEvent, isFirstToken } from "./engine-event";

/** What the stream layers read: an `EngineEventReader`, or one with read events put back (chat/search-tool.ts). */
export type EngineEvents = Pick<EngineEventReader, "next" | "cancel">;

/** Events kept while waiting for the first token (a role chunk, empty deltas) before handing the stream on. */
const MAX_PRIMED_EVENTS = 64;
/**
 * After `[DONE]` the rest of the body (the chunked terminator, a stray blank line) is read rather
 * than cancelled: cancelling a subrequest's body before its end makes workerd tear the engine
 * connection down (about 5% of the gateway's CPU per non-stream request in bench/profile.mjs),
 * where reading it leaves the connection to be reused. At most this many bytes, within DRAIN_MS.
 */
const MAX_DRAIN_BYTES = 16_384;
const DRAIN_MS = 100;

export interface EngineEventOptions {
	/** Ends the stream with an idle error when the engine sends nothing for this long while we wait on it (0: never). */
	idleTimeoutMs?: number;
	/** Aborts the engine request (idle timeout). */
	abortEngine?: (reason: unknown) => void;
	/** Largest pending SSE event. */
	maxEventSize?: number;
	/** Called once when the body has been read to its end, failed or been cancelled (the node's in-flight count). */
	onEnd?: () => void;
	/**
	 * The request's overall deadline (epoch ms): past it the stream ends as a timeout (the lane's
	 * 504, or its in-band error frame), the engine request aborted. Watched from the first `next()`:
	 * until then the engine call's own timer watches it (engine/attempt-timer.ts).
	 */
	deadlineAt?: number;
}

/**
 * Pull-based: `next()` reads one piece of the engine body and returns the events it completed
 * (often none, sometimes several). Once an ending event (done, error, closed) has been returned,
 * `next()` returns nothing more. Idle is time spent waiting on the engine without a data event:
 * comment lines and blank keep-alives do not reset it (an engine trickling `: ping` forever is
 * still stalled), and a client reading slowly (backpressure) is not mistaken for a stalled engine.
 * One timer per idle period, not one per chunk.
 */
export class EngineEventReader {
	readonly #reader: ReadableStreamDefaultReader<Uint8Array>;
	readonly #decoder = new TextDecoder();
	readonly #parser;
	readonly #opts: EngineEventOptions;
	#events: EngineEvent[] = [];
	#ended = false;
	#idle: EngineEvent | null = null;
	#timer: ReturnType<typeof setTimeout> | undefined;
	#waitingSince = 0;
	/** Time spent waiting on the engine since its last data event, over finished reads. */
	#quietMs = 0;
	#released = false;
	#deadline: ReturnType<typeof setTimeout> | undefined;

	constructor(body: ReadableStream<Uint8Array>, opts: EngineEventOptions = {}) {
		this.#reader = body.getReader();
		this.#opts = opts;
		this.#parser = createSseParser(
			(e) => {
				const ev = classifyEvent(e);
				if (ev) this.#events.push(ev);
			},
			undefined,
			opts.maxEventSize ?? MAX_EVENT_CHARS,
		);
	}

	/**
	 * Reads until the engine has produced its first token: a chunk carrying content, reasoning, a
	 * tool call, a finish reason or usage, or anything that ends the stream. What was read stays
	 * queued for `next()`. False when the read failed first (the engine call was aborted: the
	 * caller's first-token timeout, or the client leaving), so another node may be tried.
	 * Before the first token an engine sends only headers, a role chunk and keep-alives: past
	 * `MAX_PRIMED_EVENTS` of those the stream is handed on as it is.
	 */
	/** The engine's error that ended the wait for the first token (for the log), if one did. */
	firstError(): StreamError | undefined {
		for (const e of this.#events) if (e.type === "error") return e.error;
		return undefined;
	}

	async firstToken(): Promise<"token" | "silent" | "error"> {
		for (;;) {
			for (const e of this.#events) {
				if (e.type === "error" || e.type === "closed") return "error";
				if (isFirstToken(e)) return "token";
			}
			// Empty chunks are no progress: keep the first (the role chunk) and wait on, in bounded memory.
			if (this.#events.length >= MAX_PRIMED_EVENTS) this.#events.length = 1;
			let result: ReadableStreamReadResult<Uint8Array>;
			try {
				result = await this.#reader.read();
			} catch {
				this.#release();
				return "silent";
			}
			this.#feed(result);
		}
	}

	/** The events completed by the next piece of the body; an ending event is always last. */
	async next(): Promise<EngineEvent[]> {
		if (this.#ended) return [];
		if (this.#opts.deadlineAt !== undefined && this.#deadline === undefined) this.#watchDeadline(this.#opts.deadlineAt);
		if (this.#events.length) return this.#takeDrained();
		const idleMs = this.#opts.idleTimeoutMs ?? 0;
		if (idleMs > 0) {
			this.#waitingSince = Date.now();
			this.#timer ??= setTimeout(() => this.#checkIdle(idleMs), idleMs);
		}
		let result: ReadableStreamReadResult<Uint8Array>;
		try {
			result = await this.#reader.read();
		} catch (err) {
			return this.#end(this.#idle ?? failure(`upstream read failed: ${err instanceof Error ? err.message : String(err)}`));
		} finally {
			if (this.#waitingSince) this.#quietMs += Date.now() - this.#waitingSince;
			this.#waitingSince = 0;
		}
		if (this.#idle) return this.#end(this.#idle);
		this.#feed(result);
		return this.#takeDrained();
	}

	/**
	 * #take, and after a `[DONE]` the body's end read before the events are handed on. Only that
	 * last read waits on the drain: every other read returns its events with no extra promise.
	 */
	#takeDrained(): EngineEvent[] | Promise<EngineEvent[]> {
		const events = this.#take();
		if (events.at(-1)?.type !== "done") return events;
		return this.#drain().then(() => events);
	}

	/** Parses one piece of the body into the queue. */
	#feed(result: ReadableStreamReadResult<Uint8Array>): void {
		try {
			if (result.done) {
				this.#release();
				this.#parser.feed(this.#decoder.decode());
				this.#parser.end();
				this.#events.push({ type: "closed" });
			} else {
				this.#parser.feed(this.#decoder.decode(result.value, { stream: true }));
			}
		} catch (err) {
			if (!(err instanceof SseOverflowError)) throw err;
			this.#events.push(failure(`upstream sent an event over ${this.#opts.maxEventSize ?? MAX_EVENT_CHARS} characters`));
		}
	}

	/** Everything queued, up to and including an ending event. */
	#take(): EngineEvent[] {
		const events = this.#events;
		this.#events = [];
		if (events.length) this.#quietMs = 0;
		// Whatever follows an ending in the same read is not an event of this stream.
		const endAt = events.findIndex((e) => e.type !== "chunk");
		if (endAt === -1) return events;
		return this.#end(...events.slice(0, endAt + 1));
	}

	/** Stops reading and frees the engine connection (harmless once it has closed). */
	cancel(reason?: unknown): Promise<void> {
		this.#ended = true;
		clearTimeout(this.#timer);
		clearTimeout(this.#deadline);
		return this.#reader
			.cancel(reason)
			.catch(() => {})
			.finally(() => this.#release());
	}

	#end(...events: EngineEvent[]): EngineEvent[] {
		this.#ended = true;
		clearTimeout(this.#timer);
		clearTimeout(this.#deadline);
		// A clean `[DONE]` is drained by next(); any other ending but the body's own close is cancelled.
		const last = (events.at(-1) as EngineEvent).type;
		if (last !== "closed" && last !== "done") void this.cancel();
		return events;
	}

	/** Reads the body's end after `[DONE]` (bounded in bytes and time), else cancels it. */
	async #drain(): Promise<void> {
		if (this.#released) return;
		const timer = setTimeout(() => void this.cancel(), DRAIN_MS);
		let left = MAX_DRAIN_BYTES;
		try {
			for (;;) {
				const { done, value } = await this.#reader.read();
				if (done) {
					this.#release();
					return;
				}
				left -= value.byteLength;
				if (left < 0) break;
			}
		} catch {
			// The read failed (or the timer cancelled it): cancelled below, which releases.
		} finally {
			clearTimeout(timer);
		}
		await this.cancel();
	}

	#release(): void {
		if (this.#released) return;
		this.#released = true;
		this.#opts.onEnd?.();
	}

	#watchDeadline(deadlineAt: number): void {
		this.#deadline = setTimeout(
			() => {
				if (this.#ended || this.#idle) return;
				this.#stop("request deadline passed (request_timeout_ms)", new Error("request deadline"));
			},
			Math.max(0, deadlineAt - Date.now()),
		);
	}

	/** Ends the stream as a timeout (idle or the deadline): the next read returns the error, the engine is aborted. */
	#stop(message: string, reason: Error): void {
		this.#idle = { type: "error", error: { message, type: "server_error", code: null }, idle: true };
		this.#opts.abortEngine?.(reason);
		void this.#reader
			.cancel(reason)
			.catch(() => {})
			.finally(() => this.#release());
	}

	#checkIdle(idleMs: number): void {
		this.#timer = undefined;
		if (this.#ended) return;
		const quiet = this.#quietMs + (this.#waitingSince === 0 ? 0 : Date.now() - this.#waitingSince);
		if (quiet < idleMs) {
			this.#timer = setTimeout(() => this.#checkIdle(idleMs), idleMs - quiet);
			return;
		}
		this.#stop(`engine sent nothing for ${idleMs} ms`, new Error("engine idle timeout"));
	}
}
