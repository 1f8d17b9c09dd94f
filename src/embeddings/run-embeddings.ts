/**
 * `POST /v1/embeddings` for models with the `embeddings` capability: validated, held, sent to
 * the model's nodes with failover (then to its fallback models, embeddings models too), billed
 * for input tokens at the serving model's input price (engine usage within bounds, else the
 * estimate) and recorded, through the same ledger as chat.
 */

import { z } from "zod";
import { endUserOf } from "../auth/scopes";
import { assertFitsContext, requestContext, resolveFor, withScopes } from "../chat/authorize-chat";
import type { ChatRun } from "../chat/chat-run";
import { type CandidatePlan, engineTargets, planFallbacks, pricedByLeftTarget, servedBy } from "../chat/fallback-plans";
import type { ModelConfig } from "../config";
import { callEngine } from "../engine/call-engine";
import { isOversized } from "../engine/read-body";
import { GatewayError } from "../errors";
import { estimateTokens, utf8Bytes } from "../estimate";
import { clientLeft } from "../http/client-gone";
import { checkFields, EMBEDDING_FIELDS, engineFields } from "../http/engine-fields";
import { parseBody } from "../http/parse-body";
import { holdNanos } from "../ledger/ledger-client";
import { MAX_BATCH_INPUTS } from "../money/hold-bound";
import { costNanos } from "../money/pricing";
import { hostOf, logEvent } from "../observability/log-event";
import { takeRequestFallbacks } from "../routing/fallback-chain";
import { engineRouting } from "../routing/shared-view";
import { engineFailedOutcome, noAnswerOutcome, oversizedOutcome, placeHold } from "../settlement/settlement";
import { boundedUsage } from "../stream/usage-bounds";
import type { Outcome } from "../types";

/** OpenAI's limit on inputs in one request (the config's hold bound counts on it). */
export const MAX_EMBEDDING_INPUTS = MAX_BATCH_INPUTS;

const TokenArray = z.array(z.number().int().nonnegative()).min(1);
export const EmbeddingsRequestSchema = z.looseObject({
	model: z.string().min(1),
	input: z.union([
		z.string().min(1),
		z.array(z.string().min(1)).min(1).max(MAX_EMBEDDING_INPUTS),
		TokenArray,
		z.array(TokenArray).min(1).max(MAX_EMBEDDING_INPUTS),
	]),
	encoding_format: z.enum(["float", "base64"]).optional(),
	dimensions: z.number().int().positive().max(65_536).optional(),
	user: z.string().optional(),
	// No gateway option applies to embeddings (web search is chat and Responses only): any is a 400.
	venym: z.strictObject({}).optional(),
});

type EmbeddingsRequest = z.infer<typeof EmbeddingsRequestSchema>;

/** Each input's token estimate: a token array is its length, text about four characters a token. */
function inputEstimates(input: EmbeddingsRequest["input"]): number[] {
	if (typeof input === "string") return [estimateTokens(input.length)];
	if (input.every((i) => typeof i === "number")) return [input.length];
	return (input as Array<string | number[]>).map((i) => (typeof i === "string" ? estimateTokens(i.length) : i.length));
}

/** The most tokens each input can be billed: a token array exactly, text at most a token a UTF-8 byte (and its markers). */
function inputBounds(input: EmbeddingsRequest["input"], contextLength: number | undefined): number[] {
	const items: Array<string | number> | Array<string | number[]> = typeof input === "string" ? [input] : input;
	if (items.every((i) => typeof i === "number")) return [items.length];
	return (items as Array<string | number[]>).map((i) => {
		const b = typeof i === "string" ? utf8Bytes(i) + 16 : i.length;
		return contextLength === undefined ? b : Math.min(contextLength, b);
	});
}

export interface EmbeddingsResult {
	body: Record<string, unknown>;
	headers: Record<string, string>;
}

export async function runEmbeddings(run: ChatRun, rawBody: unknown): Promise<EmbeddingsResult> {
	const { env, config } = run;
	parseBody(EmbeddingsRequestSchema, rawBody);
	const body = rawBody as EmbeddingsRequest;
	const requestedFallbacks = takeRequestFallbacks(body);
	// The request's overall deadline: every attempt and fallback, and reading the answer.
	const deadlineAt = Date.now() + config.request_timeout_ms;
	const resolved = resolveFor(run, body.model, "embeddings");
	checkFields(body, EMBEDDING_FIELDS, resolved.model.pass_through_fields);
	const estimates = inputEstimates(body.input);
	for (const e of estimates) assertFitsContext(resolved.model, e);
	const promptTokens = estimates.reduce((a, b) => a + b, 0);
	const longest = Math.max(...estimates);
	const primary = embeddingsPlan(resolved.model, body);
	// Fallbacks are embeddings models too (the config and `fallbackChain` refuse a chat one); one
	// whose context cannot take the longest input is left out.
	const fallbacks = planFallbacks(
		{ config, principal: run.principal, primary: resolved, requested: requestedFallbacks },
		(model) => (model.context_length !== undefined && longest >= model.context_length ? null : embeddingsPlan(model, body)),
	);

	const req = requestContext(run, resolved);
	withScopes(run, req, promptTokens, endUserOf(body));
	// The most the request can cost on whichever candidate serves.
	const hold = Math.max(primary.holdNanos, ...fallbacks.map((f) => f.holdNanos));
	const reserve = Math.max(primary.reserveNanos, ...fallbacks.map((f) => f.reserveNanos));
	// From here on the request holds money: every path settles it exactly once.
	const { settlement, rateHeaders } = await placeHold(run, req, hold, { reserveNanos: reserve });
	const headers: Record<string, string> = { "x-request-id": run.requestId, ...rateHeaders };

	const authorized = { req, prepared: primary, bounds: primary.bounds, fallbacks };
	let text: string;
	let node: string | undefined;
	let bound: number;
	try {
		const answer = await callEngine({
			targets: engineTargets(authorized, run.batchLine),
			path: "/embeddings",
			secrets: env,
			clientSignal: run.clientSignal,
			firstByteTimeoutMs: config.first_byte_timeout_ms,
			promptTokens,
			deadlineAt,
			routing: engineRouting(env, config, run.waitUntil),
			affinityKey: body.user || undefined,
			payerKeyId: req.payerKeyId,
			observer: run.log,
		});
		node = answer.node;
		settlement.progressed();
		// A fallback model may have served: its id, price and input bound from here on.
		bound = servedBy(authorized, answer.target).bounds.maxPromptTokens;
		text = await answer.readBody({
			idleTimeoutMs: config.stream_idle_timeout_ms,
			abort: (reason) => answer.abort(reason),
			deadlineAt,
		});
	} catch (err) {
		// A client that left pays its input's estimate, as on chat: the engine may have embedded it
		// (leaving just before the answer must not make a batch free). A read that broke as the
		// client left is the client's doing, even when the runtime broke it before the signal fired.
		const gone = isClientClosed(err) || (!(err instanceof GatewayError) && (await clientLeft(run.clientSignal)));
		const failure = gone ? clientClosed(err) : err;
		if (node === undefined) pricedByLeftTarget(authorized, failure);
		const outcome =
			node !== undefined && isOversized(err) ? oversizedOutcome(node, promptTokens) : noAnswerOutcome(failure, promptTokens);
		void settlement.settle(outcome);
		throw withHeaders(failure, rateHeaders);
	}
	let json: Record<string, unknown> | null = null;
	try {
		const v = JSON.parse(text) as unknown;
		if (v && typeof v === "object" && Array.isArray((v as { data?: unknown }).data)) json = v as Record<string, unknown>;
	} catch {
		// Not JSON: an invalid answer, below.
	}
	if (!json) {
		void settlement.settle(engineFailedOutcome(node));
		logEvent("warn", "engine sent an invalid embeddings answer", { request_id: run.requestId, node: hostOf(node) });
		throw withHeaders(
			new GatewayError("upstream_unavailable", "The inference node sent an invalid response.", { status: 502 }),
			rateHeaders,
		);
	}
	// Only input tokens: the engine's up to the bound, else the estimate (and so for 0 beside vectors).
	const reported = json.usage as Record<string, unknown> | undefined;
	const { usage, estimated } = boundedUsage(
		{ prompt_tokens: reported?.prompt_tokens, completion_tokens: 0 },
		{ maxPromptTokens: bound, maxCompletionTokens: 0 },
		{ promptTokens, completionTokens: 0, minPromptTokens: (json.data as unknown[]).length > 0 ? 1 : 0 },
	);
	const outcome: Outcome = { status: "completed", usage, estimated, node };
	void settlement.settle(outcome);
	json.model = req.requestedModel;
	json.usage = { prompt_tokens: usage.prompt_tokens, total_tokens: usage.prompt_tokens };
	return { body: json, headers: { ...headers, ...settlement.costHeaders(outcome) } };
}

/**
 * The request on one model: its engine body (the fields the lane sends and the model lets through,
 * picked: the inputs are shared), input bound,
 * hold and reserve. As for legacy completions' prompts, every input beyond the largest is reserved:
 * the balance and each spend cap must cover them before admission, so a batch overspends by no
 * more than one input's worth.
 */
function embeddingsPlan(model: ModelConfig, body: EmbeddingsRequest): CandidatePlan {
	const bounds = inputBounds(body.input, model.context_length);
	let bound = 0;
	for (const b of bounds) bound += b;
	const largest = Math.max(...bounds);
	return {
		engineBody: { ...engineFields(body, EMBEDDING_FIELDS, model.pass_through_fields), model: model.engine_model },
		bounds: { maxPromptTokens: bound, maxCompletionTokens: 0 },
		holdNanos: holdNanos(model, bound, 0),
		reserveNanos: bound > largest ? costNanos(model.pricing, bound - largest, 0) : 0,
		outputTokens: 0,
	};
}

function isClientClosed(err: unknown): boolean {
	return err instanceof GatewayError && err.kind === "client_closed";
}

function clientClosed(cause: unknown): GatewayError {
	return isClientClosed(cause)
		? (cause as GatewayError)
		: new GatewayError("client_closed", "The client closed the request", { cause });
}

function withHeaders(err: unknown, headers: Record<string, string>): unknown {
	if (!(err instanceof GatewayError) || Object.keys(headers).length === 0) return err;
	return new GatewayError(err.kind, err.message, { ...err.options, headers: { ...headers, ...err.options.headers } });
}
