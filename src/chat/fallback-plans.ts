/**
 * Fallback models on the chat pipeline (chat, Responses, legacy completions) and embeddings:
 * each candidate's engine body, caps and usage bounds, worked out at authorization so the hold
 * covers the most expensive of them, and the switch to the candidate that served once the
 * engine answered.
 */

import type { Principal } from "../app-env";
import { modelAllowed } from "../auth/scopes";
import { type GatewayConfig, type ModelConfig, modelNodes, type ResolvedModel } from "../config";
import type { EngineTarget } from "../engine/call-types";
import { GatewayError } from "../errors";
import { estimatePromptTokens, type PromptSize } from "../estimate";
import { holdNanos, type RequestContext } from "../ledger/ledger-client";
import { costNanos } from "../money/pricing";
import { fallbackChain, type RequestedFallback } from "../routing/fallback-chain";
import { prefixAffinityKey } from "../routing/prefix-affinity";
import { promptBound, type UsageBounds } from "../stream/usage-bounds";
import { BATCH_LINE_PRIORITY, type BatchLine } from "./chat-run";
import { outputCap, prepareChat } from "./prepare";
import type { ChatRequest } from "./validate";

/** A model the request may fall back to, ready to send. */
export interface ChatFallback {
	/** The catalog model: its prices bill the request if it serves. */
	model: ModelConfig;
	/** The id the client sees when it serves (`:online` kept when the request had it). */
	requestedId: string;
	engineBody: Record<string, unknown>;
	bounds: UsageBounds;
	/** The worst case on this model: the hold must cover it. */
	holdNanos: number;
	/** The extra choices' worst case (n > 1), covered before admission. */
	reserveNanos: number;
	/** Output tokens held for it (every choice), for the tpm estimate. */
	outputTokens: number;
}

export interface FallbackInput {
	config: GatewayConfig;
	principal?: Principal;
	/** The validated body (each candidate's engine body is picked from it). */
	body: ChatRequest;
	primary: ResolvedModel;
	requested: readonly RequestedFallback[];
	promptTokens: number;
	/** The prompt's size the hold bounds (money/hold-bound.ts), with the largest grounding or search round. */
	heldSize: PromptSize;
	choices: number;
	/** The key's output ceiling, or null. */
	ceiling: number | null;
	searchPrice: number;
	/** Engine calls the request may make (2 with a search round): each bounded alone, all held. */
	calls: number;
}

/** What serving a request on one candidate model takes; null when the model cannot take it (its context). */
export type CandidatePlan = Omit<ChatFallback, "model" | "requestedId">;

export interface PlanFallbacksInput {
	config: GatewayConfig;
	principal?: Principal;
	/** The requested model (of one kind: its fallbacks must be of the same, see `fallbackChain`). */
	primary: ResolvedModel;
	requested: readonly RequestedFallback[];
}

/**
 * The fallback chain (the request's list, then the model's configured `fallbacks`; 400/403 for
 * a bad listed entry), each candidate planned by its lane: `plan` returns null for a model that
 * cannot take the request, which is left out. A `:online` request keeps its suffix on every id.
 */
export function planFallbacks(input: PlanFallbacksInput, plan: (model: ModelConfig) => CandidatePlan | null): ChatFallback[] {
	const { principal, primary } = input;
	const chain = fallbackChain({
		config: input.config,
		primary: primary.model,
		requested: input.requested,
		allowed: (id) => !principal || modelAllowed(principal, id),
	});
	const out: ChatFallback[] = [];
	for (const { model } of chain) {
		const planned = plan(model);
		if (planned) out.push({ model, requestedId: primary.online ? `${model.id}:online` : model.id, ...planned });
	}
	return out;
}

/**
 * The request's fallbacks, prepared: each candidate's engine body is picked from the client's
 * body for that model (`prepareChat`; the messages are shared, so a grounding message added
 * later reaches every candidate). A model whose context cannot take the prompt is left out.
 */
export function chatFallbacks(input: FallbackInput): ChatFallback[] {
	const { primary } = input;
	return planFallbacks(input, (model) => {
		if (model.context_length !== undefined && input.promptTokens >= model.context_length) return null;
		const capped =
			input.ceiling === null || input.ceiling >= model.max_output_tokens ? model : { ...model, max_output_tokens: input.ceiling };
		const requestedId = primary.online ? `${model.id}:online` : model.id;
		const prepared = prepareChat(input.body, { model: capped, requestedId, online: primary.online }, input.promptTokens);
		const outputTokens = prepared.maxOutputTokens * input.choices;
		const promptLimit = promptBound(model, input.heldSize);
		return {
			engineBody: prepared.engineBody,
			bounds: { maxPromptTokens: promptLimit, maxCompletionTokens: outputTokens },
			holdNanos: holdNanos(model, input.calls * promptLimit, input.calls * outputTokens, input.searchPrice),
			reserveNanos: input.choices > 1 ? costNanos(model.pricing, 0, prepared.maxOutputTokens * (input.choices - 1)) : 0,
			outputTokens,
		};
	});
}

/** What `engineTargets` and `servedBy` need of an authorized chat. */
interface Authorized {
	req: RequestContext;
	prepared: { engineBody: Record<string, unknown> };
	bounds: UsageBounds;
	fallbacks?: ChatFallback[];
}

/** The requested model, then its fallbacks, as the engine call tries them. */
export function engineTargets(a: Authorized, line?: BatchLine): EngineTarget[] {
	if (line) return [batchLineTarget(a, line)];
	const primary: EngineTarget = {
		model: a.req.model.id,
		nodes: modelNodes(a.req.model),
		body: () => JSON.stringify(a.prepared.engineBody),
	};
	if (!a.fallbacks?.length) return [primary];
	return [
		primary,
		...a.fallbacks.map((f) => ({ model: f.model.id, nodes: modelNodes(f.model), body: () => JSON.stringify(f.engineBody) })),
	];
}

/** A batch line's one target: its model on the node the dispatcher chose, with a lower `priority` there when the node schedules by it. */
function batchLineTarget(a: Authorized, line: BatchLine): EngineTarget {
	const nodes = modelNodes(a.req.model).filter((n) => n.url === line.node);
	const body = nodes[0]?.priority ? { ...a.prepared.engineBody, priority: BATCH_LINE_PRIORITY } : a.prepared.engineBody;
	return { model: a.req.model.id, nodes, body: () => JSON.stringify(body) };
}

/**
 * Switches the request to the model that served (`target` from the engine answer): its
 * prices, its id in the answer and the usage record (which keeps the requested id as
 * `requested_model`), its usage bounds.
 */
export function servedBy(a: Authorized, target: number): { requestedId: string; bounds: UsageBounds } {
	const f = fallbackAt(a, target);
	if (!f) return { requestedId: a.req.requestedModel, bounds: a.bounds };
	a.req.fallbackFrom = a.req.requestedModel;
	a.req.requestedModel = f.requestedId;
	a.req.model = f.model;
	return { requestedId: f.requestedId, bounds: f.bounds };
}

function fallbackAt(a: Authorized, target: number): ChatFallback | undefined {
	return target > 0 ? a.fallbacks?.[target - 1] : undefined;
}

/** The usage bounds of one engine call on `target` (the request stays on the requested model). */
export function targetBounds(a: Authorized, target: number): UsageBounds {
	return fallbackAt(a, target)?.bounds ?? a.bounds;
}

/** The catalog model of one engine call on `target`, whose prices bill that call. */
export function targetModel(a: Authorized, target: number): ModelConfig {
	return fallbackAt(a, target)?.model ?? a.req.model;
}

/**
 * Lowers every target's output cap to what its model's context leaves of the prompt it is now
 * sent (a search's grounding, or a search round's call and result, added after authorization):
 * an engine refuses a prompt and max tokens over its context. Only ever lowered: the hold stands.
 */
export function fitOutputCaps(a: Authorized): void {
	const targets = [
		{ model: a.req.model, body: a.prepared.engineBody },
		...(a.fallbacks ?? []).map((f) => ({ model: f.model, body: f.engineBody })),
	];
	for (const { model, body } of targets) {
		const cap = outputCap(model, estimatePromptTokens(body));
		for (const field of ["max_tokens", "max_completion_tokens"]) {
			const v = body[field];
			if (typeof v === "number") body[field] = Math.min(v, cap);
		}
	}
}

/** Every target's engine body, the requested model's first (a search round rewrites them all). */
export function targetBodies(a: Authorized): Array<Record<string, unknown>> {
	return [a.prepared.engineBody, ...(a.fallbacks ?? []).map((f) => f.engineBody)];
}

/**
 * A client that left while a fallback model's engine had the request: its prompt estimate is
 * priced at that model's rate (the one that read it), as an answer from it would be.
 */
export function pricedByLeftTarget(a: Authorized, err: unknown): void {
	const target = err instanceof GatewayError && err.kind === "client_closed" ? err.options.target : undefined;
	if (target !== undefined && target > 0) servedBy(a, target);
}

/**
 * The request's affinity key: OpenAI's `prompt_cache_key`, else `user`, else a hash of its stable
 * prefix (routing/prefix-affinity.ts), so a conversation that names neither still keeps its node.
 * Read before a web search adds its grounding message, which changes every turn.
 */
export function affinityKey(body: Record<string, unknown>): string | undefined {
	const key = body.prompt_cache_key;
	if (typeof key === "string" && key) return key;
	const user = body.user;
	if (typeof user === "string" && user) return user;
	return prefixAffinityKey(body);
}
