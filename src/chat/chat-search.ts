/** The chat pipeline's web search step: grounding before the engine call, sources on the answer. */
import { estimatePromptTokens } from "../estimate";
import { citationAnnotations, groundingMessage, searchQuery, sourcesOf } from "../search/grounding";
import { runWebSearch, type SearchStatus } from "../search/run-search";
import type { Source } from "../types";
import type { AuthorizedChat } from "./authorize-chat";
import type { ChatRun } from "./chat-run";
import { fitOutputCaps } from "./fallback-plans";

/**
 * Runs the web search a request asked for and puts its grounding message first; returns the
 * sources the answer cites. The search is charged to the request's settlement whenever the
 * backend was called and answered, whatever the engine does next.
 */
export async function groundWithSearch(
	run: ChatRun,
	authorized: AuthorizedChat,
	headers: Record<string, string>,
): Promise<Source[]> {
	const { prepared, settlement } = authorized;
	if (!prepared.webSearch.enabled) return [];
	const messages = prepared.engineBody.messages as Array<{ role: string; content?: unknown }>;
	const searching = runWebSearch(
		run.config.web_search,
		run.env,
		searchQuery(messages),
		prepared.webSearch.results,
		run.clientSignal,
	);
	// The backend's time is not the gateway's own (x-venym-overhead-ms).
	const search = await (run.log ? run.log.clock.during(searching) : searching);
	headers["x-venym-web-search"] = search.status satisfies SearchStatus;
	if (run.log) run.log.webSearch = search.status;
	// A refused or failed engine call must not make searches free; no query: nothing was called.
	if (search.status === "ok" || search.status === "empty") settlement.chargeSearch(authorized.searchPrice);
	if (!search.results.length) return [];
	messages.unshift(groundingMessage(search.results, new Date()));
	// An engine that reports no usage is billed its prompt's estimate: the prompt it is now sent.
	authorized.promptTokens = estimatePromptTokens(prepared.engineBody);
	fitOutputCaps(authorized);
	return sourcesOf(search.results);
}

/** `venym.sources` on the response, and url_citation annotations on each message that cites [n]. */
export function attachSources(body: Record<string, unknown>, sources: Source[]): void {
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
