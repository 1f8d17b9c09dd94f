/**
 * The chat completions SSE encoder: every chunk names the gateway model (swapped in the raw
 * engine text when that is unambiguous, so most chunks are never re-serialised), one usage
 * chunk before `[DONE]`, and an in-band error frame built by the one error mapping when the
 * engine fails.
 */
import { GatewayError, toErrorFrame } from "../errors";
import type { Source } from "../types";
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
	readonly #sources: Source[] | undefined;
	/**
	 * With web-search sources the gateway speaks first, before any engine chunk, so it names the
	 * stream: every chunk carries this id (OpenAI streams carry one id throughout).
	 */
	readonly #id: string | undefined;
	readonly #idPrefix: string | undefined;
	readonly #created = Math.floor(Date.now() / 1000);
	// The engine's model rarely changes within a stream; keep its encoded field ready.
	#engineModel: string | undefined;
	#engineModelField = "";

	readonly #chunkObject: string;
	readonly #venym: (() => Record<string, unknown>) | undefined;

	/**
	 * `sources`: web-search results, sent first as a chunk-shaped `venym.sources` event.
	 * `chunkObject`: the usage chunk's `object` (legacy completions stream `text_completion`).
	 */
	constructor(
		model: string,
		sources?: Source[],
		chunkObject = "chat.completion.chunk",
		/** The usage chunk's `venym` field (e.g. `tool_calls_repaired`), asked for when the stream ends. */
		venym?: () => Record<string, unknown>,
	) {
		this.#model = model;
		this.#venym = venym;
		this.#chunkObject = chunkObject;
		this.#modelField = `"model":${JSON.stringify(model)}`;
		if (sources?.length) {
			this.#sources = sources;
			this.#id = `chatcmpl-${crypto.randomUUID().replaceAll("-", "")}`;
			this.#idPrefix = `{"id":${JSON.stringify(this.#id)}`;
		}
	}

	start(): string {
		if (!this.#sources) return "";
		// Shaped like a chunk (id, created, model, empty choices) so every client's chunk parser takes it.
		return frame(
			JSON.stringify({
				id: this.#id,
				object: "venym.sources",
				created: this.#created,
				model: this.#model,
				choices: [],
				sources: this.#sources,
			}),
		);
	}

	chunks(chunks: ForwardedChunk[]): string {
		let out = "";
		for (const f of chunks) {
			const text = f.data === null ? this.#serialise(f.chunk) : this.#withGatewayModel(f.data, f.chunk);
			out += frame(this.#id === undefined ? text : this.#withStreamId(text, f.chunk));
		}
		return out;
	}

	/** The gateway's stream id in place of the engine's: a prefix swap when the id leads the chunk, as engines send it. */
	#withStreamId(text: string, chunk: Json): string {
		if (typeof chunk.id === "string") {
			const engineId = `{"id":${JSON.stringify(chunk.id)}`;
			if (text.startsWith(engineId)) return (this.#idPrefix as string) + text.slice(engineId.length);
		}
		chunk.id = this.#id;
		chunk.model = this.#model;
		return JSON.stringify(chunk);
	}

	finish(outcome: EngineOutcome, reducer: ChatStreamReducer): string {
		const usage = frame(
			JSON.stringify({
				id: this.#id ?? reducer.id ?? `chatcmpl-${crypto.randomUUID().replaceAll("-", "")}`,
				object: this.#chunkObject,
				created: reducer.created ?? this.#created,
				model: this.#model,
				choices: [],
				usage: reducer.usageField(),
				...(this.#venym ? { venym: this.#venym() } : {}),
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
