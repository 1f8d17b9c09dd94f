/** An engine call as callEngine (call-engine.ts) takes it, and the answer it gives back. */
import type { EngineNode } from "../config";
import type { EngineRouting } from "../routing/engine-routing";
import type { Route } from "../routing/picker";
import type { Secrets } from "../secrets";
import type { ReadBodyOptions } from "./read-body";

/** One model the request may be served by: its nodes, and the body its engine gets. */
export interface EngineTarget {
	/** The model's id: operator overrides are per model, and logs name it. */
	model: string;
	nodes: readonly EngineNode[];
	/** The engine request body; a function is called once, when the model is first tried (fallbacks usually never are). */
	body: string | (() => string);
}

export interface EngineCall {
	/** The requested model first, then its fallbacks, in order. */
	targets: readonly EngineTarget[];
	/** Path under the node's /v1 base, e.g. "/chat/completions". */
	path: string;
	/** Secrets by name, for nodes that configure `api_key_env`. */
	secrets: Secrets;
	/** Aborts the engine request when the client goes away. */
	clientSignal?: AbortSignal;
	/** Each attempt's wait for its first token, before the prompt's prefill time is added (attempt-timer.ts). */
	firstByteTimeoutMs: number;
	/** The prompt's tokens (the estimate): a long prompt's first token is given its prefill time. */
	promptTokens?: number;
	/** The request's overall deadline (epoch ms, `request_timeout_ms` from its start): past it, 504 and no more attempts. */
	deadlineAt?: number;
	routing?: EngineRouting;
	/** `prompt_cache_key`, else `user`, else its prefix (chat/fallback-plans.ts `affinityKey`): keeps a conversation on the node that has its prefix cached. */
	affinityKey?: string;
	/** The key that pays (auth/scopes.ts `payerKeyId`): a `cache_salt` node gets its salt (engine/cache-salt.ts). */
	payerKeyId?: string;
	/** For tests: the fetch to call instead of the global one. */
	fetch?: typeof fetch;
	/** Told of each attempt and of the answer: the request's log line (src/observability/request-log.ts). */
	observer?: EngineObserver;
	/**
	 * Waits, within the attempt's first-token wait (attempt-timer.ts), until a 2xx answer has produced its
	 * first token (the stream layer reads it: src/stream/engine-events.ts `firstToken`). False when
	 * the read failed (the timeout or the client aborted the call): the node counts as timed out and
	 * the next one is tried, since nothing has reached the client yet.
	 */
	firstToken?: (answer: EngineAnswer) => Promise<FirstToken>;
}

/**
 * How a 2xx answer's wait for its first token ended: `token` (or an answer ending cleanly), `silent`
 * (the read failed: the first-byte timeout or the client aborted it), or `error` (the engine's own
 * error, or the stream closing, before any token: the node's trouble or the request's, weighed as a 5xx).
 */
export type FirstToken = "token" | "silent" | "error";

export interface EngineObserver {
	readonly requestId: string;
	/** A node is tried (its URL: keep only the host), chosen by affinity, spilled from its own node, or by load. */
	attempt(node: string, route?: Route): void;
	/** The headers of the answer the client gets arrived: a 2xx, or a refusal (4xx) relayed as is. */
	answered(node: string): void;
	/** An attempt's fetch was sent: the request waits on the engine until `engineEnded` (x-venym-overhead-ms leaves it out). */
	engineStarted?(): void;
	/** That attempt's wait ended: its body was read to the end (or given up), or the fetch failed. Once per `engineStarted`. */
	engineEnded?(): void;
}

export interface EngineAnswer {
	/**
	 * A stream's body, read as it came (no pass-through stream: one hop less a chunk). The reader
	 * calls `done` once it has read the end, failed or cancelled, which drops the node's in-flight
	 * count. Use either this or `readBody`, not both, and only once.
	 */
	takeBody(): EngineBody;
	/** A non-stream answer's body as text (read-body.ts: idle timeout, size cap), with no pass-through stream. */
	readBody(opts: ReadBodyOptions): Promise<string>;
	node: string;
	/** The time from sending the request to the first token (ms), once it came: a prefill measure for engines that report none. */
	firstTokenMs?: number;
	/** Index into `targets` of the model that answered (0 unless a fallback served). */
	target: number;
	/** Aborts the engine request (used when the client disconnects mid-stream). */
	abort: (reason?: unknown) => void;
	/**
	 * The node secrets of this call's models: a stream relays the engine's text through
	 * src/stream/secret-filter.ts with them (`readBody` already returns the text without them).
	 */
	secrets: readonly string[];
}

/** An engine answer's body and the call that says its reading has ended (idempotent). */
export interface EngineBody {
	body: ReadableStream<Uint8Array> | null;
	done: () => void;
}
