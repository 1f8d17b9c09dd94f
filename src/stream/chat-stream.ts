/**
 * An engine's chat-completions SSE stream as the gateway's: the three layers (engine events,
 * the chat reducer, the chat SSE encoder) put together. Every chunk names the gateway model,
 * exactly one usage chunk precedes `[DONE]`, engine comments vanish, and an engine failure ends
 * with an in-band error frame instead of a clean-looking end.
 */

import type { Source, Usage } from "../types";
import { ChatStreamReducer } from "./chat-reducer";
import { ChatSseEncoder } from "./chat-sse-encoder";
import { EngineEventReader, type EngineEvents } from "./engine-events";
import { type ChunkTransform, type EngineStream, pipeEngineStream, type StreamEncoder } from "./pipe-engine-stream";
import { withSecretsRedacted } from "./secret-filter";
import type { UsageBounds } from "./usage-bounds";

export type { StreamEnd } from "./chat-reducer";
export type { StreamError } from "./engine-events";

export interface ChatStreamOptions {
	/** Gateway model id the client asked for, e.g. "venym/qwen-27b" or "venym/qwen-27b:online". */
	model: string;
	/** Used when the engine sends no usage. */
	promptTokensEstimate: number;
	/** Web-search sources: the first event, and the gateway names the stream. */
	sources?: Source[];
	/** Engine usage outside these is replaced by the estimate (see usage-bounds.ts). */
	bounds?: UsageBounds;
	/** The stream ends with an error frame when the engine sends nothing for this long while we wait on it. */
	idleTimeoutMs?: number;
	/** The stream ends as client_disconnected when the client takes no frame for this long (0: never). */
	clientIdleTimeoutMs?: number;
	/** Another encoder than chat SSE (the Responses lane). */
	encoder?: StreamEncoder;
	/**
	 * The request's signal: the stream ends as client_disconnected when it fires, even when the
	 * runtime drops the body without cancelling it (pipe-engine-stream.ts).
	 */
	clientSignal?: AbortSignal;
	/** Rewrites forwarded chunks between the reducer and the encoder (tool-call repair). */
	transform?: ChunkTransform;
	/** Node secrets never relayed, even split over chunks (secret-filter.ts). */
	secrets?: readonly string[];
	/** Usage of the request's earlier engine calls, added to the usage the client is shown (chat-reducer.ts). */
	earlierUsage?: Usage;
}

/**
 * `abortEngine` aborts the engine request: called when the client cancels (or `clientSignal`
 * fires) and when the engine goes idle past `idleTimeoutMs`.
 */
export function rewriteChatStream(
	/** The engine's body, or its events already being read (the engine call waited for the first token). */
	upstream: ReadableStream<Uint8Array> | EngineEvents,
	opts: ChatStreamOptions,
	abortEngine?: (reason: unknown) => void,
): EngineStream {
	const events =
		upstream instanceof ReadableStream
			? new EngineEventReader(upstream, { idleTimeoutMs: opts.idleTimeoutMs, abortEngine })
			: upstream;
	// Read when the usage is, not now: a search round's second call is known only later (chat/early-round.ts).
	const reducer = new ChatStreamReducer(opts);
	const encoder = withSecretsRedacted(opts.encoder ?? new ChatSseEncoder(opts.model, opts.sources), opts.secrets);
	return pipeEngineStream(events, reducer, encoder, abortEngine, opts.clientSignal, opts.clientIdleTimeoutMs, opts.transform);
}
