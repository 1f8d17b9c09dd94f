/** An engine answer on the chat pipeline, as a stream or a body, and the settlement of how it ended. */
import type { EngineAnswer } from "../engine/call-types";
import { GatewayError } from "../errors";
import { clientLeft } from "../http/client-gone";
import { errorText, hostOf, logEvent } from "../observability/log-event";
import { isolateFleet } from "../routing/fleet";
import { answerOutcome, type Settled, type Settlement, streamOutcome } from "../settlement/settlement";
import { type AssembledAnswer, assembleAnswer } from "../stream/assemble-answer";
import { ChatSseEncoder } from "../stream/chat-sse-encoder";
import { rewriteChatStream, type StreamEnd } from "../stream/chat-stream";
import type { EngineEvents } from "../stream/engine-events";
import type { ChunkTransform } from "../stream/pipe-engine-stream";
import { repairBodyToolCalls } from "../stream/tool-call-repair";
import type { UsageBounds } from "../stream/usage-bounds";
import type { Outcome, Source } from "../types";
import type { AuthorizedChat } from "./authorize-chat";
import type { ChatResult, ChatRun } from "./chat-run";
import { attachSources } from "./chat-search";
import type { SearchRound, SearchUnderWay } from "./search-tool";

/** What the engine call gave the answer step. */
export interface Served {
	/** What the stream layers use of the engine call (a search round's second call, late-bound: early-round.ts). */
	answer: Pick<EngineAnswer, "node" | "abort" | "secrets" | "firstTokenMs">;
	events: EngineEvents;
	/** The model id the answer names (a fallback's once one served). */
	requestedId: string;
	bounds: UsageBounds;
	/** The tool-call repair (stream/tool-call-repair.ts, or the live one for Messages): how many calls it changed. */
	repair: (ChunkTransform & { readonly repaired: number }) | undefined;
	/** Rewrites the answer's chunks before the client's encoder (a search call taken out, the repair). */
	transform?: ChunkTransform;
	sources: Source[];
	/** The search round the answer follows, when the engine called the gateway's search (search-round.ts). */
	search?: SearchRound;
	/** A search round the stream starts before its search ran; settlement waits for its work to end. */
	underWay?: SearchUnderWay & { over: Promise<void> };
	headers: Record<string, string>;
}

/** Settles a chat-pipeline request; the node's prefix-cache hit rate (/admin/nodes) counts engine-counted prompts only. */
export function settleChat(settlement: Settlement, outcome: Outcome): Promise<Settled> {
	if (!settlement.settled && outcome.node !== null && !outcome.estimated) {
		isolateFleet.usage(outcome.node, outcome.usage.prompt_tokens, outcome.usage.cached_tokens ?? 0);
	}
	return settlement.settle(outcome);
}

/**
 * What the answer showed of its node's prefill rate, which the first-token wait of long prompts
 * is figured at (routing/node-state.ts): the engine's own timings (llama.cpp), else the uncached
 * prompt tokens over the time to the first token (which counts the queue too: a slower rate).
 */
function learnPrefill(node: string, end: StreamEnd, firstTokenMs: number | undefined): void {
	if (end.prefill) isolateFleet.prefill(node, end.prefill.tokens, end.prefill.ms);
	else if (firstTokenMs !== undefined && !end.estimated && end.status === "completed") {
		isolateFleet.prefill(node, end.usage.prompt_tokens - (end.usage.cached_tokens ?? 0), firstTokenMs);
	}
}

export function streamAnswer(run: ChatRun, authorized: AuthorizedChat, served: Served): ChatResult {
	const { config, clientSignal } = run;
	const { req, settlement } = authorized;
	const { answer, requestedId, repair, sources } = served;
	const completions = authorized.lane === "completions";
	const encoder =
		run.streamEncoder?.(sources, served.search, served.underWay) ??
		new ChatSseEncoder(
			requestedId,
			completions ? undefined : sources,
			completions ? "text_completion" : undefined,
			repair ? () => ({ tool_calls_repaired: repair.repaired }) : undefined,
		);
	const { stream, done, frames } = rewriteChatStream(
		served.events,
		{
			model: requestedId,
			// Read when the usage is: a search round under way sets them once its second call answered.
			get promptTokensEstimate() {
				return authorized.promptTokens;
			},
			get bounds() {
				return served.bounds;
			},
			encoder,
			// workerd fires the request's signal when the client goes, without cancelling the body.
			clientSignal,
			transform: served.transform,
			earlierUsage: settlement.earlierUsage,
			// A client that reads nothing (or left without the runtime saying so) ends the stream.
			clientIdleTimeoutMs: config.client_idle_timeout_ms,
			// Node keys never reach the client, even split over chunks (secret-filter.ts).
			secrets: answer.secrets,
		},
		(reason) => answer.abort(reason),
	);
	// Frames taken by the client are progress: a stalled client does not keep the hold alive.
	settlement.countProgress(frames);
	// The settlement is already under waitUntil, so this runs even if the client goes away.
	void done.then(async (end) => {
		// A search round under way settles the request itself when it fails or the client left during it.
		await served.underWay?.over;
		if (repair) req.toolCallsRepaired = repair.repaired;
		// An engine read that broke as the client left is the client's doing, even when the
		// runtime broke it before firing the client's signal.
		const gone = clientSignal.aborted || (end.status === "engine_error" && !end.idleTimedOut && (await clientLeft(clientSignal)));
		logStreamEnd(req.requestId, answer.node, end, gone);
		learnPrefill(answer.node, end, answer.firstTokenMs);
		return settleChat(settlement, streamOutcome(end, answer.node, gone));
	});
	return { kind: "stream", stream, headers: served.headers, done };
}

export async function completeAnswer(run: ChatRun, authorized: AuthorizedChat, served: Served): Promise<ChatResult> {
	const { req, settlement } = authorized;
	const { requestedId, repair, sources, headers } = served;
	const { assembled, outcome } = await readAnswer(run, authorized, served);
	void settleChat(settlement, outcome);
	if (assembled.end.usageOutOfBounds)
		logEvent("warn", "engine usage out of bounds; billed at the bound (or the estimate when malformed)", {
			request_id: req.requestId,
			node: hostOf(served.answer.node),
		});
	const body = assembled.body(requestedId);
	if (repair) {
		req.toolCallsRepaired = repairBodyToolCalls(body);
		body.venym = { tool_calls_repaired: req.toolCallsRepaired };
	}
	if (sources.length) attachSources(body, sources);
	// Settled under waitUntil rather than before the answer: the cost is known here, and the
	// balance shown is the one this request started from, less its cost.
	Object.assign(headers, settlement.costHeaders(outcome));
	return { kind: "completion", body, usage: assembled.end.usage, headers, ...(served.search ? { search: served.search } : {}) };
}

/**
 * Reads an engine answer whole (a non-stream client's, or a search round's first call). A client
 * that left, or an engine that failed, is settled here and thrown; a completed answer is returned
 * with its outcome, not settled.
 */
export async function readAnswer(
	run: ChatRun,
	authorized: AuthorizedChat,
	served: Pick<Served, "answer" | "events" | "bounds" | "transform">,
): Promise<{ assembled: AssembledAnswer; outcome: Outcome }> {
	const { config, clientSignal } = run;
	const { req, settlement } = authorized;
	const { answer } = served;
	const assembled = await assembleAnswer(
		served.events,
		{
			object: authorized.lane === "completions" ? "text_completion" : "chat.completion",
			promptTokensEstimate: authorized.promptTokens,
			bounds: served.bounds,
			idleTimeoutMs: config.stream_idle_timeout_ms,
			clientSignal,
			secrets: answer.secrets,
			onData: () => settlement.progressed(),
			transform: served.transform,
			earlierUsage: settlement.earlierUsage,
		},
		(reason) => answer.abort(reason),
	);
	const { end, overflowed } = assembled;
	learnPrefill(answer.node, end, answer.firstTokenMs);
	// An engine read that broke as the client left is the client's doing, even when the runtime
	// broke it before firing the client's signal.
	const clientGone =
		end.status === "client_disconnected" ||
		clientSignal.aborted ||
		(end.status === "engine_error" && !end.idleTimedOut && !overflowed && (await clientLeft(clientSignal)));
	const outcome = answerOutcome(end, answer.node, { clientGone, overflowed });
	if (clientGone) {
		void settleChat(settlement, outcome);
		throw new GatewayError("client_closed", "The client closed the request");
	}
	if (outcome.status === "engine_error") {
		void settleChat(settlement, outcome);
		logStreamEnd(req.requestId, answer.node, end, false, overflowed);
		if (end.idleTimedOut) {
			throw new GatewayError("upstream_timeout", "The model engine stopped sending data before the response was complete.");
		}
		throw new GatewayError("upstream_unavailable", "The inference node sent an invalid response.", { status: 502 });
	}
	return { assembled, outcome };
}

/** Why a stream did not complete, for the operator (the client only sees a generic frame). */
function logStreamEnd(requestId: string, node: string, end: StreamEnd, clientGone: boolean, tooLarge = false): void {
	if (end.usageOutOfBounds)
		logEvent("warn", "engine usage out of bounds; billed at the bound (or the estimate when malformed)", {
			request_id: requestId,
			node: hostOf(node),
		});
	if (end.clientIdleTimedOut)
		logEvent("warn", "client read nothing for client_idle_timeout_ms; stream ended", {
			request_id: requestId,
			node: hostOf(node),
		});
	// A client that left breaks the upstream read too: that is not the engine failing.
	if (end.status !== "engine_error" || clientGone) return;
	const cause = tooLarge
		? "the answer is over the non-stream size limit"
		: end.error
			? `${end.error.message}${end.error.code ? ` (code ${end.error.code})` : ""}`
			: "unknown";
	logEvent("warn", `engine failed mid-stream${end.idleTimedOut ? " (idle timeout)" : ""}`, {
		request_id: requestId,
		node: hostOf(node),
		error: errorText(cause),
	});
}
