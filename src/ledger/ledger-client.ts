import type { ModelConfig } from "../config";
import { GatewayError } from "../errors";
import type { Outcome } from "../types";
import type { AuthorizeResult, KeyLedger, SettleResult } from "./key-ledger";
import { costNanos, nanosToUsd, usageCostNanos } from "./pricing";

export function ledgerFor(env: Env, keyId: string): DurableObjectStub<KeyLedger> {
	return (env.LEDGER as DurableObjectNamespace<KeyLedger>).get(env.LEDGER.idFromName(keyId));
}

export interface RequestContext {
	keyId: string;
	requestId: string;
	model: ModelConfig;
	/** The model id as the client sent it. */
	requestedModel: string;
	searchCount: number;
}

/** The hold for a request: the prompt estimate plus the capped output, at the model's prices. */
export function holdNanos(model: ModelConfig, promptTokens: number, maxOutputTokens: number, extraNanos = 0): number {
	return costNanos(model.pricing, promptTokens, maxOutputTokens) + extraNanos;
}

/** Places the hold or throws 402 with the available and required amounts. */
export async function authorizeRequest(env: Env, req: RequestContext, hold: number): Promise<AuthorizeResult & { ok: true }> {
	const result = await ledgerFor(env, req.keyId).authorize({ keyId: req.keyId, requestId: req.requestId, holdNanos: hold });
	if (!result.ok) {
		const available = nanosToUsd(result.availableNanos);
		const required = nanosToUsd(result.requiredNanos);
		throw new GatewayError(
			"insufficient_balance",
			`Insufficient balance: available $${available.toFixed(6)}, this request may cost up to $${required.toFixed(6)}. Add credits to continue.`,
			{ extra: { available_usd: available, required_usd: required } },
		);
	}
	return result;
}

/** Debits the real cost and writes the usage record, once per request id. */
export async function settleRequest(env: Env, req: RequestContext, outcome: Outcome, extraNanos = 0): Promise<SettleResult> {
	const cost = usageCostNanos(req.model.pricing, outcome.usage) + extraNanos;
	// A fresh stub per call: after an exception a stub may be broken.
	return ledgerFor(env, req.keyId).settle({
		requestId: req.requestId,
		costNanos: cost,
		record: {
			key_id: req.keyId,
			model: req.requestedModel,
			node: outcome.node,
			prompt_tokens: outcome.usage.prompt_tokens,
			completion_tokens: outcome.usage.completion_tokens,
			status: outcome.status,
			estimated: outcome.estimated,
			search_count: req.searchCount,
		},
	});
}

/** Settlement that never throws: retried a few times, then logged (the hold expires through the alarm). */
export async function settleSafely(
	env: Env,
	req: RequestContext,
	outcome: Outcome,
	extraNanos = 0,
): Promise<SettleResult | null> {
	for (let attempt = 0; attempt < 3; attempt++) {
		try {
			return await settleRequest(env, req, outcome, extraNanos);
		} catch (err) {
			if ((err as { overloaded?: boolean }).overloaded) break;
			console.error(`settle ${req.requestId} failed (attempt ${attempt + 1})`, err);
		}
	}
	return null;
}
