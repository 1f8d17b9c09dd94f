/**
 * A streamed search round whose response starts as soon as the engine's first answer called the
 * search (search-round.ts), as OpenAI streams a hosted search: the client gets the response's
 * opening events and the search under way at once, the search's end once it ran, then the second
 * call's answer. This is the stream's engine events meanwhile: its first read waits on the search
 * (and yields nothing, so the encoder's `ready` sends the search's end), its next on the second
 * call, and from then on it relays the second call's events. The second call (its node, its
 * abort) is known only later: what the stream layers need of it is read when they need it.
 */
import type { EngineAnswer } from "../engine/call-types";
import { errorText } from "../observability/log-event";
import type { EngineEvent, EngineEvents } from "../stream/engine-events";
import type { AfterRound, RestOfRound } from "./search-round";
import type { SearchRound, SearchUnderWay } from "./search-tool";

export class EarlyRound implements EngineEvents, SearchUnderWay, Pick<EngineAnswer, "node" | "abort" | "secrets"> {
	readonly query: string;
	searched: SearchRound | undefined;
	failure: unknown;
	/** The node secrets of the request's targets: the second call is made on the same ones as the first. */
	readonly secrets: readonly string[];
	/**
	 * Settles (never rejects) once the round's own work is over: the search charged, and the second
	 * call answered, or failed and settled the request (as every failed engine call does).
	 */
	readonly over: Promise<void>;
	readonly #first: Pick<EngineAnswer, "node">;
	readonly #ran: Promise<void>;
	readonly #stop = new AbortController();
	#second: AfterRound | undefined;
	#phase: "search" | "second" | "relay" = "search";

	/** `onSecond`: the second call answered (before its events are read). */
	constructor(
		underWay: { query: string; rest: RestOfRound },
		first: Pick<EngineAnswer, "node" | "secrets">,
		clientSignal: AbortSignal,
		onSecond: (second: AfterRound) => void,
	) {
		this.query = underWay.query;
		this.secrets = first.secrets;
		this.#first = first;
		let ran = () => {};
		this.#ran = new Promise<void>((resolve) => {
			ran = resolve;
		});
		// The client leaving, or the stream let go (the client read nothing for too long), stops the search and the second call.
		const signal = AbortSignal.any([clientSignal, this.#stop.signal]);
		const work = underWay.rest(signal, (searched) => {
			this.searched = searched;
			ran();
		});
		this.over = work.then(
			(second) => {
				onSecond(second);
				this.#second = second;
				// The stream was let go as the second call answered.
				if (this.#stop.signal.aborted) void this.#release(second, this.#stop.signal.reason);
			},
			(err: unknown) => {
				this.failure = err;
				ran();
			},
		);
	}

	/** The node that answers the client: the second call's once it answered. */
	get node(): string {
		return this.#second?.answer.node ?? this.#first.node;
	}

	abort(reason?: unknown): void {
		this.#stop.abort(reason);
		this.#second?.answer.abort(reason);
	}

	async next(): Promise<EngineEvent[]> {
		if (this.#phase === "search") {
			this.#phase = "second";
			await this.#ran;
			// Nothing read yet: the encoder sends the search's end before the second call is waited on.
			if (this.searched) return [];
		}
		if (this.#phase === "second") {
			await this.over;
			this.#phase = "relay";
		}
		const second = this.#second;
		if (second) return second.events.next();
		const message = `the search round's second call failed before its first token: ${errorText(this.failure)}`;
		return [{ type: "error", error: { message, type: "server_error", code: null } }];
	}

	cancel(reason?: unknown): Promise<void> {
		this.#stop.abort(reason);
		return this.#second ? this.#release(this.#second, reason) : Promise.resolve();
	}

	#release(second: AfterRound, reason: unknown): Promise<void> {
		const cancelled = second.events.cancel(reason);
		second.answer.abort(reason);
		return cancelled;
	}
}
