/**
 * The first step of a chat run: validate, resolve the model, cap, and place the ledger hold
 * (402/403/429 here). Nothing reaches an engine; a refused request costs nothing.
 */
import { assertModelAllowed, endUserOf, ledgerScopes, outputCeiling, payerKeyId } from "../auth/scopes";
import { type ModelConfig, type ResolvedModel, resolveModel } from "../config";
import { EMBEDDINGS } from "../config-schema";
import { GatewayError } from "../errors";
import { addSizes, measureChatPrompt } from "../estimate";
import { CHAT_FIELDS, checkFields } from "../http/engine-fields";
import { holdNanos, type RequestContext } from "../ledger/ledger-client";
import { costNanos, usdToNanos } from "../money/pricing";
import { takeRequestFallbacks } from "../routing/fallback-chain";
import { groundingSize, groundingTokenBound } from "../search/grounding";
import { placeHold, type Settlement } from "../settlement/settlement";
import { promptBound, type UsageBounds } from "../stream/usage-bounds";
import type { ChatRun } from "./chat-run";
import { type ChatFallback, chatFallbacks } from "./fallback-plans";
import { DEFAULT_SEARCH_RESULTS, type PreparedChat, prepareChat } from "./prepare";
import { offerSearchTool, type SearchToolRequest, searchRoundSize, searchRoundTokenBound } from "./search-tool";
import { offerToolSearch, toolSearchRoundSize, toolSearchRoundTokenBound, withholdDeferred } from "./tool-search";
import { type ChatRequest, validateChatRequest } from "./validate";

/** A chat request that passed every check and holds its worst-case cost in the ledger. */
export interface AuthorizedChat {
	req: RequestContext;
	/** The request's money from here on: every path ends it exactly once (settlement/settlement.ts). */
	settlement: Settlement;
	prepared: PreparedChat;
	/**
	 * The prompt's estimate (the hold adds the largest grounding or search round to it); once a web
	 * search adds its grounding, or a search round its call and result, the estimate of what the
	 * engine is then sent: what an engine that reports no usage is billed.
	 */
	promptTokens: number;
	searchPrice: number;
	rateHeaders: Record<string, string>;
	/** Bounds for engine-reported usage (see usage-bounds.ts). */
	bounds: UsageBounds;
	/** The legacy `/v1/completions` lane (default: chat completions). */
	lane?: "completions";
	/** Models tried, in order, when every attempt at the requested one fails before the first byte. */
	fallbacks?: ChatFallback[];
}

export interface AuthorizeOptions {
	/** How long the hold lives unsettled (default: the ledger's 15 minutes); a queued background run needs longer. */
	holdTtlMs?: number;
	/**
	 * Always the ledger, never an edge allowance (docs/allowances.md): for a run that picks up a hold
	 * already placed (a queued background response), so its replay finds that hold.
	 */
	synchronousHold?: boolean;
	/**
	 * Offer the gateway's web search to the engine as a tool, run when the engine calls it
	 * (search-round.ts); with a search backend only, and not beside an up-front search
	 * (`:online`, `venym.web_search`), which already grounds the request.
	 */
	searchTool?: SearchToolRequest;
}

/**
 * Everything before the engine: validate, resolve the model, cap, and place the hold (402/403/429
 * here). Calling it again with the same request id finds the hold already placed, so a queued
 * background response is authorized when it is queued and runs on that hold later.
 */
export async function authorizeChat(run: ChatRun, rawBody: unknown, opts: AuthorizeOptions = {}): Promise<AuthorizedChat> {
	const { config, principal } = run;
	const body = validateChatRequest(rawBody);
	const requestedFallbacks = takeRequestFallbacks(body);
	const choices = choiceCount(body.n, config.max_n);
	const resolved = resolveModel(config, body.model);
	// Only what chat knows, or the model lets through, is accepted: the engine's body is built from it.
	checkFields(body, CHAT_FIELDS, resolved.model.pass_through_fields);
	assertServes(resolved.model, "chat");
	assertModelAllowed(principal, resolved.model.id);
	const ceiling = outputCeiling(principal);
	const webSearch = isWebSearch(body, resolved);
	const webTool = opts.searchTool !== undefined && config.web_search !== undefined && !webSearch;
	// Deferred tools wait for the gateway's tool search, unless the request has the web search round
	// (one gateway tool round a request) or calls no tool: then every tool is offered (tool-search.ts).
	const deferred = withholdDeferred(body as Record<string, unknown>, webTool || body.tool_choice === "none");
	// Offered before anything is estimated or copied for a fallback: every candidate sees the tool.
	const toolName = webTool
		? offerSearchTool(body as Record<string, unknown>, opts.searchTool as SearchToolRequest)
		: deferred.length
			? offerToolSearch(body as Record<string, unknown>, deferred)
			: undefined;
	const { estimate: promptTokens, size } = measureChatPrompt(body);
	assertFitsContext(resolved.model, promptTokens);
	const results = searchResultCount(body);
	// The grounding message (or a search round's call and result, and the tools a tool search
	// loads) is added after the hold: its largest possible size is held now. A search round calls
	// the engine twice: each call's prompt and output are bounded alone, and the hold is both
	// calls' worth, and the search.
	const roundTokens = !toolName ? 0 : deferred.length ? toolSearchRoundTokenBound(deferred) : searchRoundTokenBound(results);
	const heldPromptTokens = promptTokens + (webSearch ? groundingTokenBound(results) : 0) + roundTokens;
	const roundSize = !toolName ? [] : [deferred.length ? toolSearchRoundSize(deferred) : searchRoundSize(results)];
	const heldSize = addSizes(size, ...(webSearch ? [groundingSize(results)] : []), ...roundSize);
	const calls = toolName ? 2 : 1;
	const searchPrice = webSearch || webTool ? usdToNanos(config.web_search?.price_usd_per_search ?? 0) : 0;
	const fallbacks = chatFallbacks({
		config,
		principal,
		body,
		primary: resolved,
		requested: requestedFallbacks,
		promptTokens,
		heldSize,
		choices,
		ceiling,
		searchPrice,
		calls,
	});
	const prepared = prepareChat(body, ceiling === null ? resolved : withCeiling(resolved, ceiling), promptTokens);
	if (toolName) prepared.searchTool = { name: toolName, results, ...(deferred.length ? { deferred } : {}) };
	const req = requestContext(run, resolved);
	const outputTokens = prepared.maxOutputTokens * choices;
	withScopes(
		run,
		req,
		calls * (heldPromptTokens + Math.max(outputTokens, ...fallbacks.map((f) => f.outputTokens))),
		endUserOf(body),
	);
	// The hold is the most settlement can charge: the prompt at its billing bound, every choice's output (each
	// engine call's), the search, on the most expensive model that may serve.
	const promptLimit = promptBound(resolved.model, heldSize);
	const hold = Math.max(
		holdNanos(resolved.model, calls * promptLimit, calls * outputTokens, searchPrice),
		...fallbacks.map((f) => f.holdNanos),
	);
	// Beyond one choice, the extra choices' worst case must be covered before admission, so an
	// n-choice request can overspend no more than a single-choice one.
	const reserve = Math.max(
		choices > 1 ? costNanos(resolved.model.pricing, 0, prepared.maxOutputTokens * (choices - 1)) : 0,
		...fallbacks.map((f) => f.reserveNanos),
	);
	const { settlement, rateHeaders } = await placeHold(run, req, hold, {
		reserveNanos: reserve,
		ttlMs: opts.holdTtlMs,
		synchronous: opts.synchronousHold,
	});
	const bounds: UsageBounds = {
		maxPromptTokens: promptLimit,
		maxCompletionTokens: outputTokens,
	};
	return {
		req,
		settlement,
		prepared,
		promptTokens,
		searchPrice,
		rateHeaders,
		bounds,
		...(fallbacks.length ? { fallbacks } : {}),
	};
}

/** What the ledger is told about a request: the key that pays, the request, the model. */
export function requestContext(run: ChatRun, resolved: ResolvedModel): RequestContext {
	return {
		payerKeyId: payerKeyId(run.principal),
		requestId: run.requestId,
		model: resolved.model,
		requestedModel: resolved.requestedId,
		searchCount: 0,
		// The usage record says which API the request came in on, as the log line does.
		...(run.log ? { lane: run.log.lane } : {}),
		...(run.batchLine ? { batch: { batchId: run.batchLine.batchId, customId: run.batchLine.customId } } : {}),
		// Every lane built here (chat, Responses, legacy completions, embeddings) may be served from an edge allowance.
		edge: { ledger: run.config.ledger, waitUntil: run.waitUntil },
	};
}

/**
 * The caller's limits, checked with the hold, and the tokens counted against its tpm until
 * settlement; the end user the request names (auth/scopes.ts `endUserOf`), for the per-user caps
 * and the usage record.
 */
export function withScopes(run: ChatRun, req: RequestContext, tokenEstimate: number, endUser?: string): void {
	const scopes = ledgerScopes(run.principal, endUser);
	// A batch line counts against spend caps only: rpm, tpm and max_concurrent pace interactive
	// requests, which lines must not take from nor be refused by (the dispatcher paces them).
	req.scopes = run.batchLine ? scopes.map(({ rpm: _r, tpm: _t, maxConcurrent: _c, ...s }) => s) : scopes;
	req.tokenEstimate = tokenEstimate;
	if (endUser !== undefined) req.endUser = endUser;
}

/**
 * The model a non-chat endpoint (legacy completions, embeddings) serves: it exists, serves that
 * endpoint, the key may use it, and it asks no web search (chat and Responses only).
 */
export function resolveFor(run: ChatRun, id: string, endpoint: "completions" | "embeddings"): ResolvedModel {
	const resolved = resolveModel(run.config, id);
	if (resolved.online) {
		throw new GatewayError("invalid_request", "Web search is offered on chat completions and Responses only.", {
			param: "model",
		});
	}
	assertServes(resolved.model, endpoint);
	assertModelAllowed(run.principal, resolved.model.id);
	return resolved;
}

/** An embeddings model serves /v1/embeddings only, and only an embeddings model does. */
export function assertServes(model: ModelConfig, endpoint: "chat" | "completions" | "embeddings"): void {
	const embeddings = model.capabilities.includes(EMBEDDINGS);
	if (embeddings === (endpoint === "embeddings")) return;
	const message = embeddings
		? `The model '${model.id}' is an embeddings model: use /v1/embeddings.`
		: `The model '${model.id}' does not serve embeddings: use an embeddings model.`;
	throw new GatewayError("invalid_request", message, { param: "model", code: "unsupported_model" });
}

/** `n`: how many choices; more than `max_n` is refused before anything is held. */
export function choiceCount(n: number | null | undefined, max: number): number {
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
export function assertFitsContext(model: ModelConfig, promptTokens: number): void {
	if (model.context_length === undefined || promptTokens < model.context_length) return;
	throw new GatewayError(
		"invalid_request",
		`This model's maximum context length is ${model.context_length} tokens. However, your messages resulted in about ${promptTokens} tokens (estimated at about 4 characters a token). Please reduce the length of the messages.`,
		{ param: "messages", code: "context_length_exceeded" },
	);
}

/** The model with its output cap lowered to the key's ceiling. */
function withCeiling(resolved: ResolvedModel, ceiling: number): ResolvedModel {
	if (ceiling >= resolved.model.max_output_tokens) return resolved;
	return { ...resolved, model: { ...resolved.model, max_output_tokens: ceiling } };
}
