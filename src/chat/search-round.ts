/**
 * The search round of a request whose engine is offered the gateway's web search as a tool
 * (`prepared.searchTool`, search-tool.ts). The engine's first answer is read until it shows what
 * it does: an answer (text, another tool) goes to the client as any answer does, a later search
 * call in it taken out; a search call is not relayed: the answer is read whole (within the
 * non-stream size cap), its query searched on the gateway's backend and charged as a search
 * (when the backend answered), and the engine asked again, on the same targets, without the
 * tool, with the call and its result added to the conversation. One round per request: the
 * hold placed at authorization covers both calls and the search (authorize-chat.ts). The first
 * call's usage goes to the settlement, which bills it once with however the request then ends. A
 * stream does not wait for the search: its response starts once the search call is known, and the
 * search and second call run as it is read (early-round.ts). The same round runs the gateway's tool
 * search (tool-search.ts): the deferred tools it finds are offered in the second call; it costs no
 * search, is shown to no client, and a stream waits for the second call.
 */
import type { EngineAnswer } from "../engine/call-types";
import { GatewayError } from "../errors";
import { estimatePromptTokens } from "../estimate";
import { sourcesOf } from "../search/grounding";
import { runWebSearch } from "../search/run-search";
import { releasedOutcome } from "../settlement/settlement";
import { MAX_ASSEMBLED_CHARS } from "../stream/completion-assembler";
import type { EngineEvents } from "../stream/engine-events";
import type { AuthorizedChat } from "./authorize-chat";
import { readAnswer, settleChat } from "./chat-answer";
import type { ChatRun } from "./chat-run";
import { fitOutputCaps, targetBodies, targetBounds, targetModel } from "./fallback-plans";
import {
	PrimedEvents,
	roundMessages,
	SearchCallFilter,
	type SearchRound,
	searchCallOf,
	searchResultText,
	withdrawSearchTool,
} from "./search-tool";
import { findTools, loadFound, toolSearchResultText } from "./tool-search";

export interface EngineCall {
	answer: EngineAnswer;
	events: EngineEvents;
}

export interface AfterRound extends EngineCall {
	/** The search that ran, when the engine called it: the answer is the second call's. */
	search?: SearchRound;
	/** Takes a search call out of an answer: one that called it after it began answering, or the second call's. */
	filter?: SearchCallFilter;
}

/** The rest of a round whose engine called the search: the search, then the second call (`signal` stops both). */
export type RestOfRound = (signal: AbortSignal, onSearched?: (search: SearchRound) => void) => Promise<AfterRound>;

/**
 * The answer the client gets: the first call's, or after a search the second call's (`again`). A
 * stream's round returns once the first answer called the search (`underWay`): the response
 * starts then, and the rest runs as it is read (early-round.ts).
 */
export async function searchToolRound(
	run: ChatRun,
	authorized: AuthorizedChat,
	first: EngineCall,
	headers: Record<string, string>,
	again: (signal: AbortSignal) => Promise<EngineCall>,
): Promise<AfterRound | { underWay: { query: string; rest: RestOfRound } }> {
	const tool = authorized.prepared.searchTool;
	if (!tool) return first;
	const { settlement } = authorized;
	// A model reasoning before it shows its intent moves the request: its hold is kept alive.
	const primed = new PrimedEvents(first.events, () => settlement.progressed());
	// What is held before the model shows its intent (reasoning) is bounded as a non-stream answer is.
	if ((await primed.decide(tool.name, MAX_ASSEMBLED_CHARS)) === "answer") {
		return { ...first, events: primed, filter: new SearchCallFilter(tool.name) };
	}
	const bounds = targetBounds(authorized, first.answer.target);
	const { assembled, outcome } = await readAnswer(run, authorized, { answer: first.answer, events: primed, bounds });
	settlement.addUsage(outcome.usage, outcome.estimated, targetModel(authorized, first.answer.target).pricing);
	const call = searchCallOf(assembled.body(""), tool.name, first.answer.secrets) ?? { id: "call_search", query: "" };
	const rest: RestOfRound = (signal, onSearched) => searchAndAgain(run, authorized, call, headers, again, signal, onSearched);
	// A tool search runs here at once and is not shown: the client's answer is the second call's.
	return authorized.prepared.stream && !tool.deferred ? { underWay: { query: call.query, rest } } : rest(run.clientSignal);
}

/** The round's search: the web's on the gateway's backend (charged when it answered), or the deferred tools'. */
async function runRoundSearch(
	run: ChatRun,
	authorized: AuthorizedChat,
	query: string,
	headers: Record<string, string>,
	signal: AbortSignal,
): Promise<{ result: string; found: Record<string, unknown>[]; searched?: SearchRound }> {
	const tool = authorized.prepared.searchTool as NonNullable<AuthorizedChat["prepared"]["searchTool"]>;
	if (tool.deferred) {
		const found = findTools(tool.deferred, query);
		return { result: toolSearchResultText(found, tool.deferred.length), found };
	}
	const { settlement } = authorized;
	const searching = runWebSearch(run.config.web_search, run.env, query, tool.results, signal);
	const search = await (run.log ? run.log.clock.during(searching) : searching);
	headers["x-venym-web-search"] = search.status;
	if (run.log) run.log.webSearch = search.status;
	// As the chat lane's up-front search: charged when the backend answered, whatever follows.
	if (search.status === "ok" || search.status === "empty") settlement.chargeSearch(authorized.searchPrice);
	const result = searchResultText(search.status, search.results, new Date());
	return { result, found: [], searched: { query, status: search.status, sources: sourcesOf(search.results) } };
}

async function searchAndAgain(
	run: ChatRun,
	authorized: AuthorizedChat,
	call: { id: string; query: string },
	headers: Record<string, string>,
	again: (signal: AbortSignal) => Promise<EngineCall>,
	signal: AbortSignal,
	onSearched?: (search: SearchRound) => void,
): Promise<AfterRound> {
	const { settlement } = authorized;
	const tool = authorized.prepared.searchTool as { name: string };
	const { result, found, searched } = await runRoundSearch(run, authorized, call.query, headers, signal);
	if (signal.aborted) {
		// The first call's tokens and the search: nothing else ran.
		void settleChat(settlement, releasedOutcome());
		throw new GatewayError("client_closed", "The client closed the request");
	}
	const added = roundMessages(call, tool.name, result);
	const seen = new Set<unknown>();
	for (const body of targetBodies(authorized)) {
		const before = { tool_choice: body.tool_choice, parallel_tool_calls: body.parallel_tool_calls };
		withdrawSearchTool(body, tool.name);
		// The tools a tool search found are offered from the second call on.
		loadFound(body, found, before);
		// Candidates share their messages, unless one dropped earlier reasoning (prepare.ts).
		if (Array.isArray(body.messages) && !seen.has(body.messages)) {
			seen.add(body.messages);
			body.messages.push(...added);
		}
	}
	// An engine that reports no usage is billed its prompt's estimate: the second call's own prompt.
	authorized.promptTokens = estimatePromptTokens(authorized.prepared.engineBody);
	fitOutputCaps(authorized);
	settlement.progressed();
	if (searched) onSearched?.(searched);
	const second = await again(signal);
	// A model may call the search again though it is no longer offered: the client never sees the gateway's tool.
	return { ...second, ...(searched ? { search: searched } : {}), filter: new SearchCallFilter(tool.name) };
}
