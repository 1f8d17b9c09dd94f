/**
 * The driver of every engine stream: typed engine events → the chat reducer → an encoder (chat
 * SSE or Responses events) → the client, pulled one read at a time so backpressure reaches the
 * engine. It ends exactly once — engine done, engine failure, or client gone — and that one end
 * (`done`) is what settlement and logging hang off.
 */
import type { ChatStreamReducer, EngineOutcome, ForwardedChunk, StreamEnd } from "./chat-reducer";
import { ClientPace } from "./client-pace";
import type { EngineEvents } from "./engine-events";

/** Turns the reducer's output into client bytes (as text); each lane has its own. */
export interface StreamEncoder {
	/** What goes out before any engine chunk (the sources frame, Responses' opening events). */
	start(): string;
	/** Forwarded chunks. */
	chunks(chunks: ForwardedChunk[]): string;
	/** Frames of the gateway's own between engine reads (a search round's search once it ran), sent after each read. */
	ready?(): string;
	/** The closing frames once the engine's side has ended (usage, then done or the error). */
	finish(outcome: EngineOutcome, reducer: ChatStreamReducer): string;
	/**
	 * Sent every `everyMs` while the gateway waits on a quiet engine (Anthropic's `ping` events,
	 * which its clients expect); lanes without one send nothing.
	 */
	readonly keepAlive?: { everyMs: number; text: string };
}

/** Rewrites forwarded chunks between the reducer and the encoder; may hold some back until `flush`. */
export interface ChunkTransform {
	push(chunks: ForwardedChunk[]): ForwardedChunk[];
	/** What is still held once the engine's side has ended. */
	flush(): ForwardedChunk[];
}

/** Two transforms one after the other (either may be absent). */
export function chainTransforms(first?: ChunkTransform, second?: ChunkTransform): ChunkTransform | undefined {
	if (!first || !second) return first ?? second;
	return {
		push: (chunks) => second.push(first.push(chunks)),
		flush: () => {
			const held = first.flush();
			return [...(held.length ? second.push(held) : []), ...second.flush()];
		},
	};
}

export interface EngineStream {
	stream: ReadableStream<Uint8Array>;
	/** Resolves exactly once, never rejects. */
	done: Promise<StreamEnd>;
	/** Frames handed to the client so far: stops growing when the client stops reading (the hold keep-alive's progress). */
	frames(): number;
}

/** Why a stream whose client stopped reading was ended. */
export class ClientIdleError extends Error {
	constructor(ms: number) {
		super(`the client read nothing for ${ms} ms`);
		this.name = "ClientIdleError";
	}
}

export function pipeEngineStream(
	events: EngineEvents,
	reducer: ChatStreamReducer,
	encoder: StreamEncoder,
	/** Aborts the engine request when the client leaves. */
	abortEngine?: (reason: unknown) => void,
	/** Fires when the client goes away (the request's signal). */
	clientSignal?: AbortSignal,
	/**
	 * A client that takes no frame for this long has stopped reading: the stream ends as
	 * client_disconnected, the engine request is aborted (client-pace.ts). 0 or absent: never.
	 */
	clientIdleTimeoutMs = 0,
	/** Rewrites forwarded chunks between the reducer and the encoder (tool-call repair). */
	transform?: ChunkTransform,
): EngineStream {
	const bytes = new TextEncoder();
	let concluded = false;
	let resolveDone: (end: StreamEnd) => void = () => {};
	const done = new Promise<StreamEnd>((resolve) => {
		resolveDone = resolve;
	});
	/** The stream's one ending: later calls change nothing. */
	const conclude = (end: StreamEnd) => {
		if (concluded) return;
		concluded = true;
		pace.stop();
		clientSignal?.removeEventListener("abort", onClientAbort);
		resolveDone(end);
	};
	/** The client left: stop reading the engine, abort its request, end as client_disconnected. */
	const clientGone = (reason: unknown, idle = false): Promise<void> | undefined => {
		if (concluded) return;
		const cancelled = events.cancel(reason);
		try {
			abortEngine?.(reason);
		} finally {
			const end = reducer.end("client_disconnected");
			conclude(idle ? { ...end, clientIdleTimedOut: true } : end);
		}
		return cancelled;
	};
	let ctl!: ReadableStreamDefaultController<Uint8Array>;
	/**
	 * The client stopped reading (or is gone without the runtime saying so): nothing pulls, so
	 * the engine is not read either (backpressure), and only this ends the request. The body is
	 * errored, so the runtime drops the connection instead of waiting to flush into it.
	 */
	const pace = new ClientPace(clientIdleTimeoutMs, () => {
		if (concluded) return;
		const reason = new ClientIdleError(clientIdleTimeoutMs);
		void clientGone(reason, true);
		try {
			ctl.error(reason);
		} catch {
			// Already closed or errored: nothing left to end.
		}
	});
	/** A frame for the client: queued, and owed until the client asks for more. */
	const send = (controller: ReadableStreamDefaultController<Uint8Array>, text: string) => {
		controller.enqueue(bytes.encode(text));
		pace.queued();
	};
	/**
	 * The runtime does not always cancel a response body whose client went away: a body it is not
	 * reading at that moment (the client had stopped reading, or the frames sit in the queue) is
	 * dropped with no cancel, so nothing would pull again and `done`, which settlement waits on,
	 * would never come. The request's signal does fire: it ends the stream the way a cancel does.
	 * The body is closed, not errored: a read left pending by the dropped body would reject with
	 * nobody to handle it (an uncaught error in the logs), and no client is left to tell.
	 */
	function onClientAbort() {
		if (concluded) return;
		void clientGone(clientSignal?.reason);
		try {
			ctl.close();
		} catch {
			// Already closed or errored: nothing left to end.
		}
	}

	const keepAlive = encoder.keepAlive;
	const beat = keepAlive ? bytes.encode(keepAlive.text) : undefined;
	/** Waits on the engine, with the encoder's keep-alive going out meanwhile. */
	async function quietly<T>(controller: ReadableStreamDefaultController<Uint8Array>, wait: () => Promise<T>): Promise<T> {
		if (!keepAlive || !beat) return wait();
		const timer = setInterval(() => {
			if (concluded) return;
			try {
				controller.enqueue(beat);
			} catch {
				// The body was closed under us (the client left): nothing to keep alive.
			}
		}, keepAlive.everyMs);
		try {
			return await wait();
		} finally {
			clearInterval(timer);
		}
	}

	const stream = new ReadableStream<Uint8Array>({
		start(controller) {
			ctl = controller;
			const head = encoder.start();
			if (head) send(controller, head);
		},
		async pull(controller) {
			pace.asked();
			try {
				// Keep reading until something can be sent: a pull that enqueues nothing leaves the
				// client's read pending with nobody to call pull again.
				while (!concluded) {
					const batch = await quietly(controller, () => events.next());
					if (concluded) return;
					const forwarded: ForwardedChunk[] = [];
					for (const e of batch) {
						const f = reducer.push(e);
						if (f) forwarded.push(f);
					}
					const passed = transform && forwarded.length ? transform.push(forwarded) : forwarded;
					// Frames that arrived together leave together: one enqueue per pull.
					let out = (encoder.ready?.() ?? "") + (passed.length ? encoder.chunks(passed) : "");
					const outcome = reducer.outcome;
					if (outcome) {
						const held = transform?.flush();
						if (held?.length) out += encoder.chunks(held);
						out += encoder.finish(outcome, reducer);
						send(controller, out);
						controller.close();
						conclude(
							outcome.status === "completed"
								? reducer.end("completed")
								: reducer.end("engine_error", outcome.error, outcome.idle),
						);
						return;
					}
					if (out) {
						send(controller, out);
						return;
					}
				}
			} catch (err) {
				// A bug here must still end the request's billing and the client's stream.
				void events.cancel(err);
				conclude(
					reducer.end("engine_error", { message: `stream rewrite failed: ${String(err)}`, type: "server_error", code: null }),
				);
				controller.error(err);
			}
		},
		cancel(reason) {
			return clientGone(reason);
		},
	});
	if (clientSignal?.aborted) onClientAbort();
	else clientSignal?.addEventListener("abort", onClientAbort, { once: true });
	return { stream, done, frames: () => pace.frames };
}
