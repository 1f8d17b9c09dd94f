/**
 * One object owns a request's money from the hold to its settlement, for every lane (chat,
 * legacy completions, embeddings, Responses, Messages). It is opened when the hold is placed
 * (`placeHold`) and then:
 *
 * - registers the request's `waitUntil` before the hold is asked for, so a client that leaves
 *   while anything is pending cannot end the request before it settles;
 * - keeps the hold alive while the request moves (hold-keep-alive.ts), never when it stalls;
 * - settles exactly once: the first outcome stands, a later one (a race between the stream's
 *   end and the client leaving, a second error path) changes nothing; a hold never used is
 *   released at no cost; a hold handed to a queued background job is left to that job;
 * - notes the outcome and its cost on the request's log line and sends the usage record with
 *   the settlement (ledger-client.ts `settleSafely`, which also gives an allowance's share back).
 *
 * The outcome functions below are the money rule: what each way a request can end is billed.
 */
import { GatewayError } from "../errors";
import { afterResponse } from "../http/after-response";
import { authorizeRequest, keepReservationAlive, type RequestContext, settleSafely } from "../ledger/ledger-client";
import { callsCostNanos, nanosToUsd, type PricedUsage, type Pricing } from "../money/pricing";
import type { RequestLog } from "../observability/request-log";
import type { StreamEnd } from "../stream/chat-reducer";
import { sumUsage } from "../stream/usage-bounds";
import type { Outcome, Usage } from "../types";
import { type HoldKeepAlive, keepAliveEvery, keepAliveStallMs, keepHoldAlive } from "./hold-keep-alive";

/** What a settlement resolves with: the ledger's answer, or null when nothing was settled here (or it failed). */
export type Settled = Awaited<ReturnType<typeof settleSafely>>;

/** Where a request's settlement runs: its bindings, its `waitUntil`, its log line (none for a stored hold). */
export interface SettlementScope {
	env: Env;
	waitUntil: (p: Promise<unknown>) => void;
	log?: RequestLog;
}

/** A hold stored by a queued background response: enough to settle it if it never runs. */
export type StoredHold = Pick<RequestContext, "payerKeyId" | "requestId" | "model" | "requestedModel">;

const NO_USAGE: Usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };

/** A prompt's estimate as the usage billed, nothing generated. */
function promptEstimate(promptTokens: number): Usage {
	return { prompt_tokens: promptTokens, completion_tokens: 0, total_tokens: promptTokens };
}

/**
 * Places the request's hold (ledger-client.ts `authorizeRequest`: 402/403/429 here) and opens its
 * settlement. A refused hold settles nothing and leaves nothing under `waitUntil`.
 */
export async function placeHold(
	scope: SettlementScope,
	req: RequestContext,
	holdNanos: number,
	opts: Parameters<typeof authorizeRequest>[3] = {},
): Promise<{ settlement: Settlement; rateHeaders: Record<string, string> }> {
	const settlement = new Settlement(scope, req, { keepAlive: true });
	try {
		const { headers, balanceNanos } = await authorizeRequest(scope.env, req, holdNanos, opts);
		req.balanceNanos = balanceNanos;
		return { settlement, rateHeaders: headers };
	} catch (err) {
		settlement.handOff();
		throw err;
	}
}

/** Releases a queued background response's stored hold (cancelled, deleted, orphaned, or refused when it ran); never throws. */
export function releaseStoredHold(env: Env, hold: StoredHold): Promise<Settled> {
	return new Settlement({ env, waitUntil: () => {} }, { ...hold, searchCount: 0 }, { keepAlive: false }).release();
}

export class Settlement {
	readonly #env: Env;
	readonly #req: RequestContext;
	readonly #log: RequestLog | undefined;
	#extraNanos = 0;
	/** What earlier engine calls of this request used (the first call of a search round), at their model's prices: billed with the outcome. */
	readonly #earlier: PricedUsage[] = [];
	#earlierEstimated = false;
	#moved = 0;
	readonly #progress: Array<() => number> = [];
	readonly #keepAlive: HoldKeepAlive | undefined;
	#settled: Promise<Settled> | undefined;
	#finish!: (settled: Promise<Settled>) => void;

	/**
	 * Registers the request's `waitUntil` at once. With `keepAlive`, the hold is renewed while the
	 * request moves (its first renewal is a period away: the hold is placed long before).
	 */
	constructor(scope: SettlementScope, req: RequestContext, opts: { keepAlive: boolean }) {
		this.#env = scope.env;
		this.#req = req;
		this.#log = scope.log;
		scope.waitUntil(
			new Promise<Settled>((resolve) => {
				this.#finish = resolve;
			}),
		);
		if (!opts.keepAlive) return;
		this.#keepAlive = keepHoldAlive({
			everyMs: keepAliveEvery(req.scopes),
			stallMs: keepAliveStallMs(req.scopes),
			progress: () => this.#progressNow(),
			// A request served from an edge allowance first moves its hold into the ledger (docs/allowances.md).
			renew: () => keepReservationAlive(this.#env, this.#req),
			requestId: req.requestId,
		});
	}

	/** What a queued background response stores of its hold, to release it if the job never runs. */
	storedHold(): StoredHold {
		const { payerKeyId, requestId, model, requestedModel } = this.#req;
		return { payerKeyId, requestId, model, requestedModel };
	}

	/** True once an outcome, a release or a hand-off has been decided. */
	get settled(): boolean {
		return this.#settled !== undefined;
	}

	/** A web search answered: billed with whatever else the request costs, however the engine call ends. */
	chargeSearch(nanos: number): void {
		this.#req.searchCount = 1;
		this.#extraNanos = nanos;
	}

	/**
	 * An earlier engine call of this request answered (the first call of a search round, before the
	 * call that answers the client) on a model with these prices: its usage is added to whatever
	 * outcome settles the request, billed exactly once at those prices however the rest ends (the
	 * rest may be served by another model). Nothing changes once settled.
	 */
	addUsage(usage: Usage, estimated: boolean, pricing: Pricing): void {
		if (this.#settled) return;
		this.#earlier.push({ usage, pricing });
		this.#earlierEstimated ||= estimated;
	}

	/** The usage of the request's earlier engine calls, if any: the client is shown it added to the answer's. */
	get earlierUsage(): Usage | undefined {
		return this.#earlier.length ? this.#earlier.map((c) => c.usage).reduce(sumUsage) : undefined;
	}

	/** `outcome` with the earlier calls' usage added: what is recorded. */
	total(outcome: Outcome): Outcome {
		const earlier = this.earlierUsage;
		if (!earlier) return outcome;
		return { ...outcome, usage: sumUsage(earlier, outcome.usage), estimated: outcome.estimated || this.#earlierEstimated };
	}

	/** The request moved (the engine answered, data was read): the hold is renewed at the next tick. */
	progressed(): void {
		this.#moved += 1;
	}

	/** Another measure of progress that only grows (frames taken by a stream's client). */
	countProgress(count: () => number): void {
		this.#progress.push(count);
	}

	/** What settling this outcome debits: each engine call at its model's prices (the outcome's at the served model's), and the search. */
	costOf(outcome: Outcome): number {
		return callsCostNanos([...this.#earlier, { pricing: this.#req.model.pricing, usage: outcome.usage }]) + this.#extraNanos;
	}

	/** The cost and balance headers of an answer that completed with `outcome`. */
	costHeaders(outcome: Outcome): Record<string, string> {
		const cost = this.costOf(outcome);
		const headers: Record<string, string> = { "x-venym-cost-usd": String(nanosToUsd(cost)) };
		if (this.#req.balanceNanos !== undefined) headers["x-venym-balance-usd"] = String(nanosToUsd(this.#req.balanceNanos - cost));
		return headers;
	}

	/**
	 * Settles the request with `outcome`, once: a later call returns the first settlement and
	 * changes nothing. Runs after the answer has gone out (the client does not wait for the ledger
	 * call's first steps), under the `waitUntil` registered when the hold was placed.
	 */
	settle(outcome: Outcome): Promise<Settled> {
		if (this.#settled) return this.#settled;
		const total = this.total(outcome);
		this.#log?.settled(this.#req, total, this.costOf(outcome));
		return this.#conclude(afterResponse().then(() => settleSafely(this.#env, this.#req, total, this.costOf(outcome))));
	}

	/**
	 * Gives back a hold that was never used (the request was refused after its hold, or a queued
	 * job never ran): settled at no cost, like a client that left before anything ran, with the
	 * share of an edge allowance given back. The log line keeps the refusal as its outcome.
	 */
	release(): Promise<Settled> {
		if (this.#settled) return this.#settled;
		return this.#conclude(settleSafely(this.#env, this.#req, releasedOutcome()));
	}

	/** The hold is someone else's to settle (a queued background job's), or was never placed: nothing settles here. */
	handOff(): void {
		if (!this.#settled) this.#conclude(Promise.resolve(null));
	}

	#progressNow(): number {
		let n = this.#moved;
		for (const count of this.#progress) n += count();
		return n;
	}

	#conclude(settled: Promise<Settled>): Promise<Settled> {
		this.#keepAlive?.stop();
		this.#settled = settled;
		this.#finish(settled);
		return settled;
	}
}

/** A hold given back unused: no tokens, no cost. */
export function releasedOutcome(): Outcome {
	return { status: "client_disconnected", usage: NO_USAGE, estimated: false, node: null };
}

/**
 * An engine call that ended without an answer (every node refused or failed, the client left):
 * nothing is billed, except a client that left once an engine had been asked, which pays its
 * prompt's estimate (the engine may have read it). One that left before any engine was asked
 * pays nothing for tokens (a web search that ran is still charged).
 */
export function noAnswerOutcome(err: unknown, promptTokens?: number): Outcome {
	if (err instanceof GatewayError && err.kind === "client_closed") {
		if (promptTokens === undefined || err.options.beforeEngine)
			return { status: "client_disconnected", usage: NO_USAGE, estimated: false, node: null };
		return { status: "client_disconnected", usage: promptEstimate(promptTokens), estimated: true, node: null };
	}
	const status = err instanceof GatewayError && err.kind === "engine_refused" ? "engine_error" : "failed";
	return { status, usage: NO_USAGE, estimated: false, node: null };
}

/**
 * A non-stream answer over the size cap whose usage cannot be read (embeddings): it was generated
 * at the client's asking (a large batch, many dimensions), so the input's estimate is billed.
 */
export function oversizedOutcome(node: string, promptTokens: number): Outcome {
	return { status: "engine_error", usage: promptEstimate(promptTokens), estimated: true, node };
}

/** The engine answered and then failed (or sent something unusable) before the client got anything: free. */
export function engineFailedOutcome(node: string): Outcome {
	return { status: "engine_error", usage: NO_USAGE, estimated: false, node };
}

/** What a stream's end bills: what was generated, but nothing when the engine failed before any content. */
export function streamOutcome(end: StreamEnd, node: string, clientGone: boolean): Outcome {
	if (clientGone || end.status === "client_disconnected") {
		return { status: "client_disconnected", usage: end.usage, estimated: end.estimated, node };
	}
	if (end.status === "engine_error" && !end.contentForwarded) return engineFailedOutcome(node);
	return { status: end.status, usage: end.usage, estimated: end.estimated, node };
}

/**
 * What a non-stream answer's end bills. A client that left pays what was generated until it
 * left; an answer over the size cap was generated at the client's asking (a large n, a long
 * output) and what the engine processed is billed; any other engine failure costs nothing, as
 * the client gets nothing.
 */
export function answerOutcome(end: StreamEnd, node: string, how: { clientGone: boolean; overflowed: boolean }): Outcome {
	if (how.clientGone) return streamOutcome(end, node, true);
	if (how.overflowed) return { status: "engine_error", usage: end.usage, estimated: end.estimated, node };
	if (end.status === "engine_error") return engineFailedOutcome(node);
	return { status: "completed", usage: end.usage, estimated: end.estimated, node };
}
