import type { Principal } from "../app-env";
import { assertModelAllowed, ledgerKeyId, ledgerScopes, outputCeiling } from "../auth/scopes";
import { type GatewayConfig, type ModelConfig, modelNodes, type ResolvedModel, resolveModel } from "../config";
import { callEngine, type EngineAnswer } from "../engine/call-engine";
import { readEngineBody } from "../engine/read-body";
import { GatewayError } from "../errors";
import type { SettleResult } from "../ledger/key-ledger";
import {
	authorizeRequest,
	holdNanos,
	ledgerFor,
	outcomeCostNanos,
	type RequestContext,
	settleSafely,
} from "../ledger/ledger-client";
import { costNanos, nanosToUsd, usdToNanos } from "../ledger/pricing";
import {
	citationAnnotations,
	groundingMessage,
	groundingTokenBound,
	type Source,
	searchQuery,
	sourcesOf,
} from "../search/grounding";
import { runWebSearch, type SearchStatus } from "../search/run-search";
import { rewriteChatStream, type StreamEnd } from "../stream/chat-stream";
import { estimatePromptTokens } from "../stream/estimate";
import type { StreamEncoder } from "../stream/pipe-engine-stream";
import type { Outcome, Usage } from "../types";
import { rewriteCompletion } from "./completion-response";
import { DEFAULT_SEARCH_RESULTS, type PreparedChat, prepareChat } from "./prepare";
import { promptBound, type UsageBounds } from "./usage-bounds";
import { type ChatRequest, validateChatRequest } from "./validate";

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

export interface ChatRun {
	env: Env;
	config: GatewayConfig;
	/** The calling key's id. */
	keyId: string;
	/**
	 * The authenticated caller. Its scopes apply (allowed models, output ceiling, rpm/tpm, spend
	 * caps) and a `vk-tmp-` token bills the key that minted it. Without it the key is unscoped.
	 */
	principal?: Principal;
	requestId: string;
	/** Fires when the client goes away. */
	clientSignal: AbortSignal;
	/** Keeps settlement alive after the response is returned (ctx.waitUntil). */
	waitUntil: (p: Promise<unknown>) => void;
	/**
	 * The stream's encoder when the lane is not chat SSE (Responses events); given the web-search
	 * sources, which the encoder puts where its wire format wants them.
	 */
	streamEncoder?: (sources: Source[]) => StreamEncoder;
	/** How often a running request extends its hold (default HOLD_KEEPALIVE_MS). */
	holdKeepAliveMs?: number;
}

/** A third of the ledger's 15-minute hold lifetime: two extensions may fail before a hold lapses. */
export const HOLD_KEEPALIVE_MS = 5 * 60 * 1000;

/** Extends a placed hold by another lifetime (the ledger's authorize replay); never throws. */
async function keepHoldAlive(env: Env, req: RequestContext): Promise<void> {
	try {
		await ledgerFor(env, req.keyId).authorize({ keyId: req.keyId, requestId: req.requestId, holdNanos: 0 });
	} catch (err) {
		console.warn(`keeping the hold of ${req.requestId} alive failed`, err);
	}
}

export type ChatResult =
	| {
			kind: "stream";
			stream: ReadableStream<Uint8Array>;
			headers: Record<string, string>;
			/** The stream's one end (settlement is already attached to it). */
			done: Promise<StreamEnd>;
	  }
	| { kind: "completion"; body: Record<string, unknown>; usage: Usage; headers: Record<string, string> };

/** A chat request that passed every check and holds its worst-case cost in the ledger. */
export interface AuthorizedChat {
	req: RequestContext;
	prepared: PreparedChat;
	/** The prompt estimate the hold was computed from (grounding allowance included when web search is on). */
	promptTokens: number;
	searchPrice: number;
	rateHeaders: Record<string, string>;
	/** Bounds for engine-reported usage (see usage-bounds.ts). */
	bounds: UsageBounds;
}

export interface AuthorizeOptions {
	/** How long the hold lives unsettled (default: the ledger's 15 minutes); a queued background run needs longer. */
	holdTtlMs?: number;
}

/**
 * Everything before the engine: validate, resolve the model, cap, and place the hold (402/403/429
 * here). Calling it again with the same request id finds the hold already placed, so a queued
 * background response is authorized when it is queued and runs on that hold later.
 */
export async function authorizeChat(run: ChatRun, rawBody: unknown, opts: AuthorizeOptions = {}): Promise<AuthorizedChat> {
	const { config, principal } = run;
	const body = validateChatRequest(rawBody);
	const choices = choiceCount(body.n, config.max_n);
	const resolved = resolveModel(config, body.model);
	if (principal) assertModelAllowed(principal, resolved.model.id);
	const ceiling = principal ? outputCeiling(principal) : null;
	const webSearch = isWebSearch(body, resolved);
	const promptTokens = estimatePromptTokens(body);
	assertFitsContext(resolved.model, promptTokens);
	// The grounding message is added after the hold: its largest possible size is held now.
	const heldPromptTokens = promptTokens + (webSearch ? groundingTokenBound(searchResultCount(body)) : 0);
	const prepared = prepareChat(body, ceiling === null ? resolved : withCeiling(resolved, ceiling), promptTokens);
	const req: RequestContext = {
		keyId: principal ? ledgerKeyId(principal) : run.keyId,
		requestId: run.requestId,
		model: resolved.model,
		requestedModel: resolved.requestedId,
		searchCount: 0,
	};
	const outputTokens = prepared.maxOutputTokens * choices;
	if (principal) {
		req.scopes = ledgerScopes(principal);
		req.tokenEstimate = heldPromptTokens + outputTokens;
	}
	const searchPrice = prepared.webSearch.enabled ? usdToNanos(config.web_search?.price_usd_per_search ?? 0) : 0;
	// The hold is the most settlement can charge: the prompt at its billing bound, every choice's output, the search.
	const promptLimit = promptBound(resolved.model, heldPromptTokens);
	const hold = holdNanos(resolved.model, promptLimit, outputTokens, searchPrice);
	// Beyond one choice, the extra choices' worst case must be covered before admission, so an
	// n-choice request can overspend no more than a single-choice one.
	const reserve = choices > 1 ? costNanos(resolved.model.pricing, 0, prepared.maxOutputTokens * (choices - 1)) : 0;
	const { headers: rateHeaders, balanceNanos } = await authorizeRequest(run.env, req, hold, {
		reserveNanos: reserve,
		ttlMs: opts.holdTtlMs,
	});
	req.balanceNanos = balanceNanos;
	const bounds: UsageBounds = {
		maxPromptTokens: promptLimit,
		maxCompletionTokens: outputTokens,
	};
	return { req, prepared, promptTokens, searchPrice, rateHeaders, bounds };
}

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

/** `n`: how many choices; more than `max_n` is refused before anything is held. */
function choiceCount(n: number | null | undefined, max: number): number {
	if (n === undefined || n === null) return 1;
	if (!Number.isInteger(n) || n < 1) {
		throw new GatewayError("invalid_request", `Invalid 'n': expected a positive integer, got ${n}.`, { param: "n" });
	}
	if (n > max) {
		throw new GatewayError("invalid_request", `Invalid 'n': ${n} is greater than the maximum of ${max}.`, {
			param: "n",
			code: "integer_above_max_value",
		});
	}
	return n;
}

function isWebSearch(body: ChatRequest, resolved: ResolvedModel): boolean {
	return resolved.online || body.venym?.web_search === true;
}

function searchResultCount(body: ChatRequest): number {
	return body.venym?.search_results ?? DEFAULT_SEARCH_RESULTS;
}

/** Our own 400 for a prompt the model cannot take, before anything is held or sent. */
function assertFitsContext(model: ModelConfig, promptTokens: number): void {
	if (model.context_length === undefined || promptTokens < model.context_length) return;
	throw new GatewayError(
		"invalid_request",
		`This model's maximum context length is ${model.context_length} tokens. However, your messages resulted in about ${promptTokens} tokens (estimated at about 4 characters a token). Please reduce the length of the messages.`,
		{ param: "messages", code: "context_length_exceeded" },
	);
}

function hasKeys(o: Record<string, string>): boolean {
	for (const _ in o) return true;
	return false;
}

/** The model with its output cap lowered to the key's ceiling. */
function withCeiling(resolved: ResolvedModel, ceiling: number): ResolvedModel {
	if (ceiling >= resolved.model.max_output_tokens) return resolved;
	return { ...resolved, model: { ...resolved.model, max_output_tokens: ceiling } };
}

function withHeaders(err: unknown, headers: Record<string, string>): GatewayError {
	const ge = err instanceof GatewayError ? err : new GatewayError("internal", "Internal error", { cause: err });
	return new GatewayError(ge.kind, ge.message, { ...ge.options, headers: { ...headers, ...ge.options.headers } });
}

/** Everything after the hold: search, engine call with failover, rewrite, and settlement exactly once. */
async function runHeld(run: ChatRun, authorized: AuthorizedChat): Promise<ChatResult> {
	const { env, config, clientSignal } = run;
	const { req, prepared, promptTokens, searchPrice, rateHeaders, bounds } = authorized;
	const requestId = req.requestId;
	const resolved = { model: req.model, requestedId: req.requestedModel };
	// Registered with waitUntil before anything else can wait: a client that leaves while the
	// search or the engine call is pending would otherwise end the request before it settles.
	let settleNow!: (p: Promise<SettleResult | null>) => void;
	const settlement = new Promise<SettleResult | null>((resolve) => {
		settleNow = resolve;
	});
	run.waitUntil(settlement);
	// A request may run longer than a hold lives (a long generation on a slow node): the hold is
	// kept alive until settlement, so the balance it covers is never handed out twice.
	const keepAlive = setInterval(() => void keepHoldAlive(env, req), run.holdKeepAliveMs ?? HOLD_KEEPALIVE_MS);
	const settle = (outcome: Outcome, extraNanos: number) => {
		clearInterval(keepAlive);
		settleNow(settleSafely(env, req, outcome, extraNanos));
		return settlement;
	};

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

	let answer: EngineAnswer;
	try {
		answer = await callEngine({
			nodes: modelNodes(resolved.model),
			path: "/chat/completions",
			body: JSON.stringify(prepared.engineBody),
			secrets: env as unknown as Record<string, unknown>,
			clientSignal,
			firstByteTimeoutMs: config.first_byte_timeout_ms,
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

	if (prepared.stream) {
		const upstream = answer.response.body ?? new ReadableStream<Uint8Array>({ start: (ctl) => ctl.close() });
		const prelude = sources.length ? [JSON.stringify({ object: "venym.sources", sources })] : undefined;
		const encoder = run.streamEncoder?.(sources);
		const { stream, done } = rewriteChatStream(
			upstream,
			{
				model: resolved.requestedId,
				promptTokensEstimate: promptTokens,
				prelude,
				encoder,
				bounds,
				idleTimeoutMs: config.stream_idle_timeout_ms,
			},
			(reason) => answer.abort(reason),
		);
		// The settlement promise is already under waitUntil, so this runs even if the client goes away.
		void done.then((end) => {
			logStreamEnd(requestId, answer.node, end);
			const outcome = streamOutcome(end, answer.node, clientSignal.aborted);
			return settle(outcome, searchNanos);
		});
		return { kind: "stream", stream, headers, done };
	}

	let engineJson: unknown;
	try {
		const text = await readEngineBody(answer.response, {
			idleTimeoutMs: config.stream_idle_timeout_ms,
			abort: (reason) => answer.abort(reason),
		});
		engineJson = JSON.parse(text);
	} catch (err) {
		const gone = clientSignal.aborted;
		if (!gone && err instanceof GatewayError) {
			// Idle or oversized: nothing is charged, the hold is released now.
			console.warn(`engine ${answer.node} failed request ${requestId}: ${err.message}`);
			void settle({ status: "engine_error", usage: NO_USAGE, estimated: false, node: answer.node }, searchNanos);
			throw err;
		}
		const outcome: Outcome = gone
			? { status: "client_disconnected", usage: promptOnly(promptTokens), estimated: true, node: answer.node }
			: { status: "engine_error", usage: NO_USAGE, estimated: false, node: answer.node };
		void settle(outcome, searchNanos);
		if (gone) throw new GatewayError("client_closed", "The client closed the request", { cause: err });
		throw new GatewayError("upstream_unavailable", "The inference node sent an invalid response.", { status: 502, cause: err });
	}
	// Some servers answer 200 with an error body instead of an error status.
	if (!isCompletion(engineJson)) {
		void settle({ status: "engine_error", usage: NO_USAGE, estimated: false, node: answer.node }, searchNanos);
		const info = engineErrorOf(engineJson);
		console.warn(`engine ${answer.node} answered 200 without a completion: ${info}`);
		throw new GatewayError("upstream_unavailable", "The inference node sent an invalid response.", { status: 502 });
	}
	const completion = rewriteCompletion(engineJson, resolved.requestedId, promptTokens, bounds);
	if (completion.outOfBounds) console.warn(`engine ${answer.node} reported usage out of bounds; billed the estimate`);
	if (sources.length) attachSources(completion.body, sources);
	const outcome: Outcome = { status: "completed", usage: completion.usage, estimated: completion.estimated, node: answer.node };
	// Settlement runs under waitUntil rather than before the answer: the cost is known here, and
	// the balance shown is the one this request started from, less its cost.
	void settle(outcome, searchNanos);
	const cost = outcomeCostNanos(req, outcome, searchNanos);
	headers["x-venym-cost-usd"] = String(nanosToUsd(cost));
	if (req.balanceNanos !== undefined) headers["x-venym-balance-usd"] = String(nanosToUsd(req.balanceNanos - cost));
	return { kind: "completion", body: completion.body, usage: completion.usage, headers };
}

/** Why a stream did not complete, for the operator (the client only sees a generic frame). */
function logStreamEnd(requestId: string, node: string, end: StreamEnd): void {
	if (end.usageOutOfBounds) console.warn(`engine ${node} reported usage out of bounds for ${requestId}; billed the estimate`);
	if (end.status !== "engine_error") return;
	const cause = end.error ? `${end.error.message}${end.error.code ? ` (code ${end.error.code})` : ""}` : "unknown";
	console.warn(`engine ${node} failed mid-stream for ${requestId}${end.idleTimedOut ? " (idle timeout)" : ""}: ${cause}`);
}

function isCompletion(v: unknown): v is Record<string, unknown> {
	return typeof v === "object" && v !== null && Array.isArray((v as { choices?: unknown }).choices);
}

function engineErrorOf(v: unknown): string {
	return JSON.stringify(v).slice(0, 300);
}

/** `venym.sources` on the response, and url_citation annotations on each message that cites [n]. */
function attachSources(body: Record<string, unknown>, sources: Source[]): void {
	body.venym = { sources };
	if (!Array.isArray(body.choices)) return;
	for (const choice of body.choices as Array<{ message?: Record<string, unknown> }>) {
		const msg = choice?.message;
		if (!msg || typeof msg.content !== "string") continue;
		const annotations = citationAnnotations(msg.content, sources);
		if (annotations.length) msg.annotations = [...(Array.isArray(msg.annotations) ? msg.annotations : []), ...annotations];
	}
}
