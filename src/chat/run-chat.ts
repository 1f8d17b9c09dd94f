import { callEngine } from "../engine/call-engine";
import type { EngineAnswer } from "../engine/call-types";
import { GatewayError } from "../errors";
import { afterResponse } from "../http/after-response";
import { clientLeft } from "../http/client-gone";
import type { SettleResult } from "../ledger/durable/key-ledger";
import { keepReservationAlive, outcomeCostNanos, settleSafely } from "../ledger/ledger-client";
import { nanosToUsd } from "../money/pricing";
import { errorText, hostOf, logEvent } from "../observability/log-event";
import { isolateFleet } from "../routing/fleet";
import { engineRouting } from "../routing/shared-view";
import { citationAnnotations, groundingMessage, searchQuery, sourcesOf } from "../search/grounding";
import { runWebSearch, type SearchStatus } from "../search/run-search";
import { assembleAnswer } from "../stream/assemble-answer";
import { ChatSseEncoder } from "../stream/chat-sse-encoder";
import { rewriteChatStream, type StreamEnd } from "../stream/chat-stream";
import { EngineEventReader } from "../stream/engine-events";
import { repairBodyToolCalls, ToolCallRepairStream } from "../stream/tool-call-repair";
import type { Outcome, Source, Usage } from "../types";
import { type AuthorizedChat, authorizeChat } from "./authorize-chat";
import type { ChatResult, ChatRun } from "./chat-run";
import { affinityKey, engineTargets, servedBy } from "./fallback-plans";
import { HOLD_KEEPALIVE_MS, keepHoldAlive } from "./hold-keep-alive";

export type { AuthorizedChat } from "./authorize-chat";
export { authorizeChat } from "./authorize-chat";
export type { ChatResult, ChatRun } from "./chat-run";

const NO_USAGE: Usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };

function promptOnly(promptTokens: number): Usage {
	return { prompt_tokens: promptTokens, completion_tokens: 0, total_tokens: promptTokens };
}

/** What a stream's end bills: nothing when the engine failed before any content. */
export function streamOutcome(end: StreamEnd, node: string, clientGone: boolean): Outcome {
	if (clientGone || end.status === "client_disconnected") {
		return { status: "client_disconnected", usage: end.usage, estimated: end.estimated, node };
	}
	if (end.status === "engine_error" && !end.contentForwarded) {
		return { status: "engine_error", usage: NO_USAGE, estimated: false, node };
	}
	return { status: end.status, usage: end.usage, estimated: end.estimated, node };
}

export { HOLD_KEEPALIVE_MS } from "./hold-keep-alive";

/**
 * One chat completion, from a parsed body to the client-facing result: validate, resolve the
 * model, cap, hold, search, call the engine with failover, rewrite, and settle exactly once.
 */
export async function runChat(run: ChatRun, rawBody: unknown): Promise<ChatResult> {
	return runAuthorized(run, await authorizeChat(run, rawBody));
}

/** Everything after `authorizeChat`: the request holds money, and every path settles it exactly once. */
export async function runAuthorized(run: ChatRun, authorized: AuthorizedChat): Promise<ChatResult> {
	const { rateHeaders } = authorized;
	if (!hasKeys(rateHeaders)) return runHeld(run, authorized);
	// Once the request counted against the key's limits, every answer carries them, errors included.
	try {
		return await runHeld(run, authorized);
	} catch (err) {
		throw withHeaders(err, rateHeaders);
	}
}

function hasKeys(o: Record<string, string>): boolean {
	for (const _ in o) return true;
	return false;
}

function withHeaders(err: unknown, headers: Record<string, string>): GatewayError {
	const ge = err instanceof GatewayError ? err : new GatewayError("internal", "Internal error", { cause: err });
	return new GatewayError(ge.kind, ge.message, { ...ge.options, headers: { ...headers, ...ge.options.headers } });
}

/** Everything after the hold: search, engine call with failover, rewrite, and settlement exactly once. */
async function runHeld(run: ChatRun, authorized: AuthorizedChat): Promise<ChatResult> {
	const { env, config, clientSignal } = run;
	const { req, prepared, promptTokens, searchPrice, rateHeaders } = authorized;
	const requestId = req.requestId;
	// Registered with waitUntil before anything else can wait: a client that leaves while the
	// search or the engine call is pending would otherwise end the request before it settles.
	let settleNow!: (p: Promise<SettleResult | null>) => void;
	const settlement = new Promise<SettleResult | null>((resolve) => {
		settleNow = resolve;
	});
	run.waitUntil(settlement);
	// A request may run longer than a hold lives (a long generation on a slow node): the hold is
	// kept alive until settlement while the request moves (hold-keep-alive.ts), so the balance it
	// covers is never handed out twice, and a request that stopped moving cannot pin it.
	let moved = 0;
	let framesSent = () => 0;
	const keepAlive = keepHoldAlive({
		everyMs: run.holdKeepAliveMs ?? HOLD_KEEPALIVE_MS,
		progress: () => moved + framesSent(),
		// A request served from an edge allowance first moves its hold into the ledger (docs/allowances.md).
		renew: () => keepReservationAlive(env, req),
		requestId,
	});
	const settle = (outcome: Outcome, extraNanos: number) => {
		keepAlive.stop();
		// The node's prefix-cache hit rate (/admin/nodes): engine-counted prompts only.
		if (outcome.node !== null && !outcome.estimated) {
			isolateFleet.usage(outcome.node, outcome.usage.prompt_tokens, outcome.usage.cached_tokens ?? 0);
		}
		run.log?.settled(req, outcome, outcomeCostNanos(req, outcome, extraNanos));
		// After the answer has gone out: the client does not wait for the ledger call's first steps.
		settleNow(afterResponse().then(() => settleSafely(env, req, outcome, extraNanos)));
		return settlement;
	};

	// Before a web search puts its grounding message first: the conversation's own prefix.
	const affinity = affinityKey(prepared.engineBody);
	// From here on the request holds money: every path below settles exactly once.
	const headers: Record<string, string> = { "x-request-id": requestId, ...rateHeaders };
	let sources: Source[] = [];
	let searchNanos = 0;
	if (prepared.webSearch.enabled) {
		const messages = prepared.engineBody.messages as Array<{ role: string; content?: unknown }>;
		const search = await runWebSearch(
			config.web_search,
			env as unknown as Record<string, unknown>,
			searchQuery(messages),
			prepared.webSearch.results,
			clientSignal,
		);
		headers["x-venym-web-search"] = search.status satisfies SearchStatus;
		if (run.log) run.log.webSearch = search.status;
		// Charged whenever the backend was called and answered, whatever the engine does next (a
		// refused or failed engine call must not make searches free); no query: nothing was called.
		if (search.status === "ok" || search.status === "empty") {
			req.searchCount = 1;
			searchNanos = searchPrice;
		}
		if (search.results.length) {
			messages.unshift(groundingMessage(search.results, new Date()));
			sources = sourcesOf(search.results);
		}
	}

	// The engine is always asked for a stream (prepare.ts), and the engine call waits for its first
	// token: a node that sends headers and then nothing is abandoned within the first-byte timeout
	// and the next one tried, for stream and non-stream clients alike.
	let events: EngineEventReader | undefined;
	let answer: EngineAnswer;
	try {
		answer = await callEngine({
			targets: engineTargets(authorized),
			path: authorized.lane === "completions" ? "/completions" : "/chat/completions",
			secrets: env as unknown as Record<string, unknown>,
			clientSignal,
			firstByteTimeoutMs: config.first_byte_timeout_ms,
			routing: engineRouting(env, config, run.waitUntil),
			affinityKey: affinity,
			payerKeyId: req.payerKeyId,
			observer: run.log,
			firstToken: async (a) => {
				const reader = new EngineEventReader(a.response.body ?? EMPTY_BODY(), {
					idleTimeoutMs: config.stream_idle_timeout_ms,
					abortEngine: (reason) => a.abort(reason),
				});
				const first = await reader.firstToken();
				if (first === "token") events = reader;
				else void reader.cancel();
				if (first === "error") {
					const cause = reader.firstError();
					logEvent("warn", "engine failed before the first token", {
						request_id: requestId,
						node: hostOf(a.node),
						error: errorText(cause ? cause.message : "upstream closed the stream early"),
					});
				}
				return first;
			},
		});
	} catch (err) {
		const gone = err instanceof GatewayError && err.kind === "client_closed";
		const outcome: Outcome = gone
			? { status: "client_disconnected", usage: promptOnly(promptTokens), estimated: true, node: null }
			: {
					status: err instanceof GatewayError && err.kind === "engine_refused" ? "engine_error" : "failed",
					usage: NO_USAGE,
					estimated: false,
					node: null,
				};
		void settle(outcome, searchNanos);
		throw err;
	}
	const engineEvents = events as EngineEventReader;
	// A fallback model may have served: its id, prices and usage bounds from here on.
	const { requestedId, bounds } = servedBy(authorized, answer.target);
	// The Messages lane always repairs: Anthropic's tool_use `input` is an object, so its
	// input_json_delta pieces must join to valid JSON (chat passes the engine's bytes unless asked).
	const repairs = req.model.tool_call_repair === true || req.lane === "messages";
	const repair = repairs && prepared.toolCallRepair !== false ? new ToolCallRepairStream() : undefined;
	moved += 1;

	if (prepared.stream) {
		const encoder =
			run.streamEncoder?.(sources) ??
			new ChatSseEncoder(
				requestedId,
				authorized.lane === "completions" ? undefined : sources,
				authorized.lane === "completions" ? "text_completion" : undefined,
				repair ? () => ({ tool_calls_repaired: repair.repaired }) : undefined,
			);
		const { stream, done, frames } = rewriteChatStream(
			engineEvents,
			{
				model: requestedId,
				promptTokensEstimate: promptTokens,
				bounds,
				encoder,
				// workerd fires the request's signal when the client goes, without cancelling the body.
				clientSignal,
				transform: repair,
				// A client that reads nothing (or left without the runtime saying so) ends the stream.
				clientIdleTimeoutMs: config.client_idle_timeout_ms,
				// Node keys never reach the client, even split over chunks (secret-filter.ts).
				secrets: answer.secrets,
			},
			(reason) => answer.abort(reason),
		);
		framesSent = frames;
		// The settlement promise is already under waitUntil, so this runs even if the client goes away.
		void done.then(async (end) => {
			if (repair) req.toolCallsRepaired = repair.repaired;
			// An engine read that broke as the client left is the client's doing, even when the
			// runtime broke it before firing the client's signal.
			const gone =
				clientSignal.aborted || (end.status === "engine_error" && !end.idleTimedOut && (await clientLeft(clientSignal)));
			logStreamEnd(requestId, answer.node, end, gone);
			return settle(streamOutcome(end, answer.node, gone), searchNanos);
		});
		return { kind: "stream", stream, headers, done };
	}

	const assembled = await assembleAnswer(
		engineEvents,
		{
			object: authorized.lane === "completions" ? "text_completion" : "chat.completion",
			promptTokensEstimate: promptTokens,
			bounds,
			idleTimeoutMs: config.stream_idle_timeout_ms,
			clientSignal,
			secrets: answer.secrets,
			onData: () => {
				moved += 1;
			},
		},
		(reason) => answer.abort(reason),
	);
	const { end } = assembled;
	// An engine read that broke as the client left is the client's doing, even when the runtime
	// broke it before firing the client's signal.
	const gone =
		end.status === "client_disconnected" ||
		clientSignal.aborted ||
		(end.status === "engine_error" && !end.idleTimedOut && !assembled.overflowed && (await clientLeft(clientSignal)));
	if (gone) {
		// Billed for what the engine generated until the client left.
		void settle(streamOutcome(end, answer.node, true), searchNanos);
		throw new GatewayError("client_closed", "The client closed the request");
	}
	if (end.status === "engine_error" || assembled.overflowed) {
		// The client gets nothing: nothing is charged, and the hold is released now.
		logStreamEnd(requestId, answer.node, end, false, assembled.overflowed);
		// An answer over the size cap was generated at the client's asking (a large n, long output):
		// what the engine processed is billed. Any other failure costs nothing.
		const billed = assembled.overflowed ? { usage: end.usage, estimated: end.estimated } : { usage: NO_USAGE, estimated: false };
		void settle({ status: "engine_error", ...billed, node: answer.node }, searchNanos);
		if (end.idleTimedOut) {
			throw new GatewayError("upstream_timeout", "The model engine stopped sending data before the response was complete.");
		}
		throw new GatewayError("upstream_unavailable", "The inference node sent an invalid response.", { status: 502 });
	}
	if (end.usageOutOfBounds)
		logEvent("warn", "engine usage out of bounds; billed the estimate", { request_id: requestId, node: hostOf(answer.node) });
	const body = assembled.body(requestedId);
	if (repair) {
		req.toolCallsRepaired = repairBodyToolCalls(body);
		body.venym = { tool_calls_repaired: req.toolCallsRepaired };
	}
	if (sources.length) attachSources(body, sources);
	const outcome: Outcome = { status: "completed", usage: end.usage, estimated: end.estimated, node: answer.node };
	// Settlement runs under waitUntil rather than before the answer: the cost is known here, and
	// the balance shown is the one this request started from, less its cost.
	void settle(outcome, searchNanos);
	const cost = outcomeCostNanos(req, outcome, searchNanos);
	headers["x-venym-cost-usd"] = String(nanosToUsd(cost));
	if (req.balanceNanos !== undefined) headers["x-venym-balance-usd"] = String(nanosToUsd(req.balanceNanos - cost));
	return { kind: "completion", body, usage: end.usage, headers };
}

const EMPTY_BODY = () => new ReadableStream<Uint8Array>({ start: (ctl) => ctl.close() });

/** Why a stream did not complete, for the operator (the client only sees a generic frame). */
function logStreamEnd(requestId: string, node: string, end: StreamEnd, clientGone: boolean, tooLarge = false): void {
	if (end.usageOutOfBounds)
		logEvent("warn", "engine usage out of bounds; billed the estimate", { request_id: requestId, node: hostOf(node) });
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

/** `venym.sources` on the response, and url_citation annotations on each message that cites [n]. */
function attachSources(body: Record<string, unknown>, sources: Source[]): void {
	// Beside whatever else the gateway reports there (tool_calls_repaired).
	body.venym = { ...(body.venym as Record<string, unknown> | undefined), sources };
	if (!Array.isArray(body.choices)) return;
	for (const choice of body.choices as Array<{ message?: Record<string, unknown> }>) {
		const msg = choice?.message;
		if (!msg || typeof msg.content !== "string") continue;
		const annotations = citationAnnotations(msg.content, sources);
		if (annotations.length) msg.annotations = [...(Array.isArray(msg.annotations) ? msg.annotations : []), ...annotations];
	}
}
