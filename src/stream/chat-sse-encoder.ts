/**
 * The chat completions SSE encoder: every chunk names the gateway model (swapped in the raw
 * engine text when that is unambiguous, so most chunks are never re-serialised), one usage
 * chunk before `[DONE]`, and an in-band error frame built by the one error mapping when the
 * engine fails.
 */
import { GatewayError, toErrorFrame } from "../errors";
import type { ChatStreamReducer, EngineOutcome, ForwardedChunk } from "./chat-reducer";
import type { StreamEncoder } from "./pipe-engine-stream";

type Json = Record<string, unknown>;

function frame(json: string): string {
	return `data: ${json}\n\n`;
}

// The openai SDK throws an APIError for any data frame whose JSON has a truthy `error` key.
// 5xx details stay in the logs.
const ERROR_FRAME = toErrorFrame(
	new GatewayError("upstream_unavailable", "The model engine failed while streaming the response."),
);
const IDLE_FRAME = toErrorFrame(
	new GatewayError("upstream_timeout", "The model engine stopped sending data before the response was complete."),
);
const DONE_FRAME = frame("[DONE]");

/** The client-facing error of a failed engine stream: the same kinds the HTTP path uses. */
export function streamFailure(outcome: EngineOutcome): GatewayError {
	return outcome.status === "engine_error" && outcome.idle
		? new GatewayError("upstream_timeout", "The model engine stopped sending data before the response was complete.")
		: new GatewayError("upstream_unavailable", "The model engine failed while streaming the response.");
}

export class ChatSseEncoder implements StreamEncoder {
	readonly #model: string;
	readonly #modelField: string;
	readonly #prelude: string[] | undefined;
	// The engine's model rarely changes within a stream; keep its encoded field ready.
	#engineModel: string | undefined;
	#engineModelField = "";

	/** `prelude`: already-encoded JSON payloads sent as the first data frames (web-search sources). */
	constructor(model: string, prelude?: string[]) {
		this.#model = model;
		this.#modelField = `"model":${JSON.stringify(model)}`;
		this.#prelude = prelude;
	}

	start(): string {
		return this.#prelude?.length ? this.#prelude.map(frame).join("") : "";
	}

	chunks(chunks: ForwardedChunk[]): string {
		let out = "";
		for (const f of chunks) out += frame(f.data === null ? this.#serialise(f.chunk) : this.#withGatewayModel(f.data, f.chunk));
		return out;
	}

	finish(outcome: EngineOutcome, reducer: ChatStreamReducer): string {
		const usage = frame(
			JSON.stringify({
				id: reducer.id ?? `chatcmpl-${crypto.randomUUID().replaceAll("-", "")}`,
				object: "chat.completion.chunk",
				created: reducer.created ?? Math.floor(Date.now() / 1000),
				model: this.#model,
				choices: [],
				usage: reducer.usageField(),
			}),
		);
		if (outcome.status === "completed") return usage + DONE_FRAME;
		return usage + (outcome.idle ? IDLE_FRAME : ERROR_FRAME);
	}

	#serialise(chunk: Json): string {
		chunk.model = this.#model;
		return JSON.stringify(chunk);
	}

	/** Swap the model without re-serialising when the raw text allows it unambiguously. */
	#withGatewayModel(raw: string, chunk: Json): string {
		// A raw newline would break the frame, so multi-line data is always re-serialised.
		if (typeof chunk.model === "string" && !raw.includes("\n")) {
			if (chunk.model !== this.#engineModel) {
				this.#engineModel = chunk.model;
				this.#engineModelField = `"model":${JSON.stringify(chunk.model)}`;
			}
			// Outside string values `"model"` only appears as a key, so a single occurrence
			// that starts the exact field is the top-level one; anything else falls through.
			const at = raw.indexOf('"model"');
			if (at !== -1 && at === raw.lastIndexOf('"model"') && raw.startsWith(this.#engineModelField, at)) {
				return raw.slice(0, at) + this.#modelField + raw.slice(at + this.#engineModelField.length);
			}
		}
		return this.#serialise(chunk);
	}
}
