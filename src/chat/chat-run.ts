/** What a chat run is given and what it gives back, shared by the authorize and run steps and their callers. */
import type { Principal } from "../app-env";
import type { GatewayConfig } from "../config";
import type { RequestLog } from "../observability/request-log";
import type { StreamEnd } from "../stream/chat-reducer";
import type { StreamEncoder } from "../stream/pipe-engine-stream";
import type { Source, Usage } from "../types";
import type { SearchRound, SearchUnderWay } from "./search-tool";

export interface ChatRun {
	env: Env;
	config: GatewayConfig;
	/** The calling key's id (`callerKeyId(principal)`): a `vk-tmp-` token's own; its stored responses live under it. */
	callerKeyId: string;
	/**
	 * The authenticated caller. Its scopes apply (allowed models, output ceiling, rpm/tpm, spend
	 * caps) and a `vk-tmp-` token bills the key that minted it.
	 */
	principal: Principal;
	requestId: string;
	/** Fires when the client goes away. */
	clientSignal: AbortSignal;
	/** Keeps settlement alive after the response is returned (ctx.waitUntil). */
	waitUntil: (p: Promise<unknown>) => void;
	/**
	 * The stream's encoder when the lane is not chat SSE (Responses events); given the web-search
	 * sources, which the encoder puts where its wire format wants them.
	 */
	streamEncoder?: (sources: Source[], search?: SearchRound, underWay?: SearchUnderWay) => StreamEncoder;
	/** The request's log line (src/observability): the engine call and settlement fill it in. */
	log?: RequestLog;
	/** Set when the request is a batch line (src/batches): where it runs and what its usage record names. */
	batchLine?: BatchLine;
}

/**
 * A batch line's placement: the batch dispatcher chose its node (an idle one), so the engine
 * call goes there only, with the engine's `priority` when the node schedules by it; no fallback
 * model serves it (its fleet was not checked for room).
 */
export interface BatchLine {
	batchId: string;
	customId: string;
	/** The node's URL (config.ts `EngineNode.url`). */
	node: string;
}

/** The engine `priority` a batch line carries on a node with `priority: true` (vLLM: lower values run first; interactive requests send none, 0). */
export const BATCH_LINE_PRIORITY = 1;

export type ChatResult =
	| {
			kind: "stream";
			stream: ReadableStream<Uint8Array>;
			headers: Record<string, string>;
			/** The stream's one end (settlement is already attached to it). */
			done: Promise<StreamEnd>;
	  }
	| {
			kind: "completion";
			body: Record<string, unknown>;
			usage: Usage;
			headers: Record<string, string>;
			/** The search round the answer follows, when the engine called the gateway's search. */
			search?: SearchRound;
	  };
