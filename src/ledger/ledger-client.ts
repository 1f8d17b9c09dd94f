import type { ModelConfig } from "../config";
import { GatewayError } from "../errors";
import { costNanos, nanosToUsd } from "../money/pricing";
import { errorText, logEvent } from "../observability/log-event";
import { nodeLabel } from "../routing/node-label";
import type { Outcome } from "../types";
import type { AuthorizeResult, KeyLedger, SettleResult } from "./durable/key-ledger";
import { isLimited, type RateState, type RateWindow, type ScopeLimits } from "./durable/limits";
import { noteBalance } from "./edge-allowance-state";
import {
	type AllowanceTicket,
	adoptNow,
	afterSettle,
	afterSyncHold,
	beforeSettle,
	type EdgeContext,
	takeLocal,
} from "./edge-allowances";
import { formatDuration, limitError } from "./limit-errors";
import { settleInBatch } from "./settle-batch";

export { formatDuration };

/** The ledger of a key: for a request, the payer's (auth/scopes.ts `payerKeyId`), never a `vk-tmp-` token's own. */
export function ledgerFor(env: Env, payerKeyId: string): DurableObjectStub<KeyLedger> {
	return (env.LEDGER as DurableObjectNamespace<KeyLedger>).get(env.LEDGER.idFromName(payerKeyId));
}

export interface RequestContext {
	/** The payer key id: the key whose ledger pays (for a `vk-tmp-` token, the key that minted it), `payerKeyId(principal)`. */
	payerKeyId: string;
	requestId: string;
	model: ModelConfig;
	/** The model id as the client sent it; once a fallback model served, that model's id (the answer's `model`). */
	requestedModel: string;
	/** Set when a fallback model served: the id the client asked for (the usage record's `requested_model`). */
	fallbackFrom?: string;
	/** The API the request came in on, for the usage record (the request log's lane). */
	lane?: string;
	/** A batch line's batch and `custom_id`, for its usage record. */
	batch?: { batchId: string; customId: string };
	searchCount: number;
	/** Tool calls whose arguments the gateway repaired (`tool_call_repair`), for the usage record. */
	toolCallsRepaired?: number;
	/** Limits checked with the hold, in the same ledger call (see KeyLedger.authorize). */
	scopes?: ScopeLimits[];
	/** The end user the request names (auth/scopes.ts `endUserOf`): its per-user caps' scopes are in `scopes`, and the usage record names it. */
	endUser?: string;
	/** Tokens counted against tpm until settlement: the prompt estimate plus the output cap. */
	tokenEstimate?: number;
	/**
	 * The ledger's balance when the hold was placed, for the x-venym-balance-usd header; for a request
	 * served from an allowance, the last balance this isolate knows (approximate).
	 */
	balanceNanos?: number;
	/** Edge allowances for this request (set by `requestContext`, chat/authorize-chat.ts); absent: always the synchronous hold. */
	edge?: EdgeContext;
	/** Set when the hold was taken from this isolate's allowance rather than placed in the ledger (docs/allowances.md). */
	allowance?: AllowanceTicket;
}

/** The hold for a request: the prompt estimate plus the capped output, at the model's prices. */
export function holdNanos(model: ModelConfig, promptTokens: number, maxOutputTokens: number, extraNanos = 0): number {
	return costNanos(model.pricing, promptTokens, maxOutputTokens) + extraNanos;
}

/**
 * Places the hold, or throws: 429 when a rate limit is reached, 403 when a spend cap is, 402
 * when the balance is spent. `headers` are the x-ratelimit-* headers for the response (empty
 * when the key has no rate limits); refusals carry them too.
 */
export async function authorizeRequest(
	env: Env,
	req: RequestContext,
	hold: number,
	opts: { reserveNanos?: number; ttlMs?: number; synchronous?: boolean } = {},
): Promise<AuthorizeResult & { ok: true; headers: Record<string, string> }> {
	const edge = allowanceEdge(req, opts);
	const ledger = () => ledgerFor(env, req.payerKeyId);
	if (edge) {
		// Served from this isolate's allowance: no ledger call before the engine.
		const local = takeLocal(ledger, req.payerKeyId, req.requestId, hold, opts.reserveNanos ?? 0, edge, Date.now());
		if (local) {
			req.allowance = local.ticket;
			return { ok: true, availableNanos: local.balanceNanos, holdNanos: hold, balanceNanos: local.balanceNanos, headers: {} };
		}
	}
	const result = await ledger().authorize({
		payerKeyId: req.payerKeyId,
		requestId: req.requestId,
		holdNanos: hold,
		...(opts.reserveNanos ? { reserveNanos: opts.reserveNanos } : {}),
		...(opts.ttlMs ? { ttlMs: opts.ttlMs } : {}),
		...(req.scopes ? { scopes: req.scopes, tokens: req.tokenEstimate ?? 0 } : {}),
	});
	const headers = rateLimitHeaders(result.rate);
	if (result.ok) {
		if (edge) {
			noteBalance(req.payerKeyId, result.balanceNanos);
			afterSyncHold(ledger, req.payerKeyId, hold, result.availableNanos, edge, Date.now());
		}
		return { ...result, headers };
	}
	if (result.refused === "revoked") throw new GatewayError("invalid_api_key", "This API key has been revoked.", { headers });
	if (result.refused !== undefined) throw limitError(result, headers);
	const available = nanosToUsd(result.availableNanos);
	const required = nanosToUsd(result.requiredNanos);
	throw new GatewayError(
		"insufficient_balance",
		`Insufficient balance: available $${available.toFixed(6)}, this request may cost up to $${required.toFixed(6)}. Add credits to continue.`,
		{ extra: { available_usd: available, required_usd: required }, headers },
	);
}

/**
 * Allowances serve a request only when nothing about it needs the ledger's exact answer: allowances
 * are on, the hold has the default lifetime (a queued background response's hold is placed in the
 * ledger), and neither the key nor the token that called has rpm, tpm or a spend cap (counted
 * exactly with each hold). Everything else takes the synchronous hold.
 */
function allowanceEdge(req: RequestContext, opts: { ttlMs?: number; synchronous?: boolean }): EdgeContext | undefined {
	const edge = req.edge;
	if (!edge?.ledger || !(edge.ledger.allowance_ttl_ms > 0) || opts.ttlMs || opts.synchronous) return undefined;
	if (req.scopes?.some(isLimited)) return undefined;
	return edge;
}

/**
 * A request that places no hold (count_tokens) counted against its keys' requests per minute:
 * no ledger call when none of them has an rpm; a 429 in the same shape as a held request's.
 */
export async function countRequest(
	env: Env,
	req: Pick<RequestContext, "payerKeyId" | "requestId" | "scopes">,
): Promise<Record<string, string>> {
	const scopes = req.scopes?.filter((s) => s.rpm) ?? [];
	if (scopes.length === 0) return {};
	const result = await ledgerFor(env, req.payerKeyId).countRequest({ requestId: req.requestId, scopes });
	const headers = rateLimitHeaders(result.rate);
	if (!result.ok) throw limitError(result, headers);
	return headers;
}

/** The x-ratelimit-* response headers for the tightest windows. */
export function rateLimitHeaders(rate: RateState | undefined): Record<string, string> {
	const headers: Record<string, string> = {};
	const put = (kind: "requests" | "tokens", w: RateWindow | undefined) => {
		if (!w) return;
		headers[`x-ratelimit-limit-${kind}`] = String(w.limit);
		headers[`x-ratelimit-remaining-${kind}`] = String(Math.max(0, w.remaining));
		headers[`x-ratelimit-reset-${kind}`] = formatDuration(w.resetMs);
	};
	put("requests", rate?.requests);
	put("tokens", rate?.tokens);
	return headers;
}

/**
 * Debits `cost` (the settlement's sum: settlement.ts `costOf`) and writes the usage record of
 * `outcome`, once per request id.
 */
export async function settleRequest(env: Env, req: RequestContext, outcome: Outcome, cost: number): Promise<SettleResult> {
	// An adoption under way lands first: the ledger then knows whether the request holds.
	if (req.allowance) await beforeSettle(req.allowance);
	// In a batch with this isolate's other settlements of the key (settle-batch.ts); a fresh stub per call.
	return settleInBatch(() => ledgerFor(env, req.payerKeyId), req.payerKeyId, {
		requestId: req.requestId,
		costNanos: cost,
		...(req.allowance ? { allowanceId: req.allowance.allowanceId } : {}),
		record: {
			key_id: req.payerKeyId,
			// The catalog model that served and was priced (no `:online`: search is its own field).
			model: req.model.id,
			requested_model: req.fallbackFrom ?? req.requestedModel,
			node: outcome.node === null ? null : nodeLabel(outcome.node),
			prompt_tokens: outcome.usage.prompt_tokens,
			completion_tokens: outcome.usage.completion_tokens,
			status: outcome.status,
			estimated: outcome.estimated,
			search_count: req.searchCount,
			...(outcome.usage.cached_tokens ? { cached_tokens: outcome.usage.cached_tokens } : {}),
			...(req.toolCallsRepaired ? { tool_calls_repaired: req.toolCallsRepaired } : {}),
			...(req.lane ? { lane: req.lane } : {}),
			...(req.endUser !== undefined ? { end_user: req.endUser } : {}),
			...(req.batch ? { batch_id: req.batch.batchId, custom_id: req.batch.customId } : {}),
		},
	});
}

/** Settlement of `cost` that never throws: retried a few times, then logged (the hold expires through the alarm). */
export async function settleSafely(env: Env, req: RequestContext, outcome: Outcome, cost = 0): Promise<SettleResult | null> {
	let result: SettleResult | null = null;
	for (let attempt = 0; attempt < 3; attempt++) {
		try {
			result = await settleRequest(env, req, outcome, cost);
			break;
		} catch (err) {
			if ((err as { overloaded?: boolean }).overloaded) break;
			logEvent("error", "settlement failed", { request_id: req.requestId, attempt: attempt + 1, error: errorText(err) });
		}
	}
	if (req.allowance) {
		afterSettle(() => ledgerFor(env, req.payerKeyId), req.allowance, result, cost, req.edge);
	}
	return result;
}

/**
 * Keeps a running request's reservation alive: a hold is extended by another lifetime (the
 * ledger's authorize replay); a take from an allowance is first moved into a hold of its own.
 */
export async function keepReservationAlive(env: Env, req: RequestContext): Promise<void> {
	const ticket = req.allowance;
	if (ticket && !ticket.adopted) {
		await adoptNow(() => ledgerFor(env, req.payerKeyId), ticket);
		if (!ticket.adopted) return;
	}
	await ledgerFor(env, req.payerKeyId).authorize({ payerKeyId: req.payerKeyId, requestId: req.requestId, holdNanos: 0 });
}
