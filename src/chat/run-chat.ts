/**
 * Everything after `authorizeChat` (or a lane's own authorize): web search, the engine call with
 * failover, then the answer as a stream or a body. The hold was placed with the request's
 * settlement (settlement/settlement.ts); every path below ends it exactly once.
 */
import { callEngine } from "../engine/call-engine";
import type { EngineAnswer } from "../engine/call-types";
import { GatewayError } from "../errors";
import { errorText, hostOf, logEvent } from "../observability/log-event";
import { engineRouting } from "../routing/shared-view";
import { noAnswerOutcome } from "../settlement/settlement";
import { EngineEventReader } from "../stream/engine-events";
import { chainTransforms } from "../stream/pipe-engine-stream";
import { LiveToolCallRepair } from "../stream/tool-call-live-repair";
import { ToolCallRepairStream } from "../stream/tool-call-repair";
import type { AuthorizedChat } from "./authorize-chat";
import { completeAnswer, type Served, settleChat, streamAnswer } from "./chat-answer";
import type { ChatResult, ChatRun } from "./chat-run";
import { groundWithSearch } from "./chat-search";
import { EarlyRound } from "./early-round";
import { affinityKey, engineTargets, pricedByLeftTarget, servedBy } from "./fallback-plans";
import { type RestOfRound, searchToolRound } from "./search-round";
import { SearchCallFilter } from "./search-tool";

export type { AuthorizedChat } from "./authorize-chat";
export { authorizeChat } from "./authorize-chat";
export type { ChatResult, ChatRun } from "./chat-run";

/** Runs an authorized request to its answer; once it counted against the key's limits, every answer carries them. */
export async function runAuthorized(run: ChatRun, authorized: AuthorizedChat): Promise<ChatResult> {
	const { rateHeaders, settlement } = authorized;
	try {
		return await serve(run, authorized);
	} catch (err) {
		// Every path below settles before it throws; one that did not (a bug) gives the hold back
		// now instead of leaving it to lapse.
		if (!settlement.settled) void settleChat(settlement, noAnswerOutcome(err));
		throw hasKeys(rateHeaders) ? withHeaders(err, rateHeaders) : err;
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

async function serve(run: ChatRun, authorized: AuthorizedChat): Promise<ChatResult> {
	const { req, prepared, settlement } = authorized;
	// The request's overall deadline: its search, every attempt and fallback, and its answer's stream.
	const deadlineAt = Date.now() + run.config.request_timeout_ms;
	// Before a web search puts its grounding message first: the conversation's own prefix.
	const affinity = affinityKey(prepared.engineBody);
	const headers: Record<string, string> = { "x-request-id": req.requestId, ...authorized.rateHeaders };
	let sources = await groundWithSearch(run, authorized, headers);
	const call = (signal = run.clientSignal) => callChatEngine({ ...run, clientSignal: signal }, authorized, affinity, deadlineAt);
	const first = await call();
	// With the search offered as a tool: the answer after the search the engine asked for, if it did.
	const round = await searchToolRound(run, authorized, first, headers, call);
	// The Messages lane always repairs: Anthropic's tool_use `input` is an object, so its
	// input_json_delta pieces must join to valid JSON (chat passes the engine's bytes unless asked).
	// It repairs live, so Claude Code sees a tool's input as the engine writes it, and takes calls one
	// after another whether it repairs or not (Anthropic has no interleaved blocks); the other lanes hold.
	// The Gemini lane's `args` is an object too: it repairs, held (its calls go out whole).
	const objectArgs = req.lane === "messages" || req.lane === "gemini";
	const repairs = (req.model.tool_call_repair === true || objectArgs) && prepared.toolCallRepair !== false;
	const live = req.lane === "messages" ? new LiveToolCallRepair(repairs) : undefined;
	const repair = repairs ? (live ?? new ToolCallRepairStream()) : undefined;
	settlement.progressed();
	if ("underWay" in round) return streamUnderWay(run, authorized, round.underWay, first.answer, { repair, headers }, live);
	const { answer, events, filter, search } = round;
	if (search) sources = search.sources;
	// A fallback model may have served: its id, prices and usage bounds from here on.
	const { requestedId, bounds } = servedBy(authorized, answer.target);
	// A stream's tool calls are repaired as they pass; a body's once it is whole (chat-answer.ts).
	const transform = prepared.stream ? chainTransforms(filter, live ?? repair) : filter;
	const served = { answer, events, requestedId, bounds, repair, transform, sources, search, headers };
	return prepared.stream ? streamAnswer(run, authorized, served) : completeAnswer(run, authorized, served);
}

/** A stream whose search round started before its search ran (early-round.ts): the second call's model bounds it once it answered. */
function streamUnderWay(
	run: ChatRun,
	authorized: AuthorizedChat,
	underWay: { query: string; rest: RestOfRound },
	first: EngineAnswer,
	served: Pick<Served, "repair" | "headers">,
	live: LiveToolCallRepair | undefined,
): ChatResult {
	let bounds = authorized.bounds;
	const early = new EarlyRound(underWay, first, run.clientSignal, (second) => {
		bounds = servedBy(authorized, second.answer.target).bounds;
	});
	const filter = new SearchCallFilter((authorized.prepared.searchTool as { name: string }).name);
	return streamAnswer(run, authorized, {
		...served,
		answer: early,
		events: early,
		underWay: early,
		requestedId: authorized.req.requestedModel,
		get bounds() {
			return bounds;
		},
		transform: chainTransforms(filter, live ?? served.repair),
		sources: [],
	});
}

/**
 * The engine is always asked for a stream (prepare.ts), and the engine call waits for its first
 * token: a node that sends headers and then nothing is abandoned within the first-byte timeout
 * (plus the prompt's prefill time) and the next one tried, for stream and non-stream clients
 * alike; past the request's deadline the answer's stream ends as a timeout. No answer settles here.
 */
async function callChatEngine(
	run: ChatRun,
	authorized: AuthorizedChat,
	affinity: string | undefined,
	deadlineAt: number,
): Promise<{ answer: EngineAnswer; events: EngineEventReader }> {
	const { env, config, clientSignal } = run;
	const { req } = authorized;
	let events: EngineEventReader | undefined;
	try {
		const answer = await callEngine({
			targets: engineTargets(authorized, run.batchLine),
			path: authorized.lane === "completions" ? "/completions" : "/chat/completions",
			secrets: env,
			clientSignal,
			firstByteTimeoutMs: config.first_byte_timeout_ms,
			promptTokens: authorized.promptTokens,
			deadlineAt,
			routing: engineRouting(env, config, run.waitUntil),
			affinityKey: affinity,
			payerKeyId: req.payerKeyId,
			observer: run.log,
			firstToken: async (a) => {
				const { body, done } = a.takeBody();
				const reader = new EngineEventReader(body ?? EMPTY_BODY(), {
					idleTimeoutMs: config.stream_idle_timeout_ms,
					abortEngine: (reason) => a.abort(reason),
					onEnd: done,
					deadlineAt,
				});
				const first = await reader.firstToken();
				if (first === "token") events = reader;
				else void reader.cancel();
				if (first === "error") {
					const cause = reader.firstError();
					logEvent("warn", "engine failed before the first token", {
						request_id: req.requestId,
						node: hostOf(a.node),
						error: errorText(cause ? cause.message : "upstream closed the stream early"),
					});
				}
				return first;
			},
		});
		return { answer, events: events as EngineEventReader };
	} catch (err) {
		pricedByLeftTarget(authorized, err);
		void settleChat(authorized.settlement, noAnswerOutcome(err, authorized.promptTokens));
		throw err;
	}
}

const EMPTY_BODY = () => new ReadableStream<Uint8Array>({ start: (ctl) => ctl.close() });
