/**
 * The Responses lane's stream encoder: the chat reducer's chunks become Responses events
 * directly (no chat SSE in between to parse again). The final response — completed, failed with
 * the code the HTTP path gives the same cause, or cancelled when the client left — is handed to
 * storage once, from the stream's one end.
 */

import type { SearchRound, SearchUnderWay } from "../chat/search-tool";
import type { ChatStreamReducer, EngineOutcome, ForwardedChunk, StreamEnd } from "../stream/chat-reducer";
import { streamFailure } from "../stream/chat-sse-encoder";
import type { StreamEncoder } from "../stream/pipe-engine-stream";
import type { Source } from "../types";
import { failureOf } from "./failure";
import type { ResponseObject } from "./response-object";
import { encodeEvent, type ResponseStreamEvent, type ResponsesEventBuilder } from "./stream-events";

function encode(events: ResponseStreamEvent[]): string {
	let out = "";
	for (const e of events) out += encodeEvent(e);
	return out;
}

export class ResponsesStreamEncoder implements StreamEncoder {
	readonly #builder: ResponsesEventBuilder;
	readonly #sources: Source[];
	readonly #round: SearchRound | undefined;
	readonly #underWay: SearchUnderWay | undefined;
	#searchEnded = false;

	/**
	 * `round`: the search the model called (chat/search-round.ts), streamed first. `underWay`: one
	 * the stream starts before it ran (chat/early-round.ts): its item opens at once, closes once it ran.
	 */
	constructor(builder: ResponsesEventBuilder, sources: Source[] = [], round?: SearchRound, underWay?: SearchUnderWay) {
		this.#builder = builder;
		this.#sources = sources;
		this.#round = round;
		this.#underWay = underWay;
	}

	start(): string {
		const events = this.#builder.start();
		const query = this.#underWay?.query;
		if (query !== undefined) events.push(...this.#builder.searched({ query, status: "ok", sources: [] }, "start"));
		else if (this.#round) events.push(...this.#builder.searched(this.#round));
		else if (this.#sources.length) events.push(...this.#builder.chunk({ object: "venym.sources", sources: this.#sources }));
		return encode(events);
	}

	/** The search's end once it ran, before the second answer's events. */
	ready(): string {
		const searched = this.#underWay?.searched;
		if (!searched || this.#searchEnded) return "";
		this.#searchEnded = true;
		return encode(this.#builder.searched(searched, "end"));
	}

	chunks(chunks: ForwardedChunk[]): string {
		let out = "";
		for (const f of chunks) out += encode(this.#builder.chunk(f.chunk));
		return out;
	}

	finish(outcome: EngineOutcome, reducer: ChatStreamReducer): string {
		// The usage the chat lane would put in its usage chunk: what is billed.
		const usage = reducer.usageField();
		if (outcome.status === "completed") {
			this.#builder.chunk({ choices: [], usage });
			return encode(this.#builder.finish());
		}
		// A second call that never answered fails with what the HTTP path gives the same cause.
		const cause = this.#underWay?.failure ?? streamFailure(outcome);
		return encode(this.#builder.fail(failureOf(cause), usage));
	}

	/**
	 * The response to store once the stream has ended: a client that left gets what was produced,
	 * cancelled. `clientGone`: the client's signal fired, so an engine failure seen at the same
	 * time is the engine call being aborted for it, not a failure.
	 */
	finalResponse(end: StreamEnd, clientGone = false): ResponseObject {
		const response = this.#builder.response();
		if (end.status !== "client_disconnected" && !clientGone) return response;
		return { ...response, error: null, status: "cancelled" };
	}
}
