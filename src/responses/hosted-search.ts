/**
 * The hosted `web_search` tool, served by the gateway's own search backend (src/search): with a
 * backend configured, the engine is offered the search as a function tool and the gateway runs
 * it when the model calls it (the chat pipeline's search round, src/chat/search-round.ts: held,
 * billed and reported as every search is); the answer shows it as a `web_search_call` item
 * before the message. A model that does not call it searches nothing.
 */
import type { SearchRound, SearchToolRequest } from "../chat/search-tool";
import type { GatewayConfig } from "../config";
import type { WebSearchCallItemValue } from "./item-schema";
import type { ResponsesRequest } from "./request-schema";
import { chatTools, offersWebSearch, WEB_SEARCH_TYPES } from "./tools";

/** A `tool_choice` naming the hosted search (`{"type": "web_search"}`, `web_search_preview`). */
function isHostedSearchChoice(choice: ResponsesRequest["tool_choice"]): boolean {
	return typeof choice === "object" && choice !== null && WEB_SEARCH_TYPES.has(choice.type);
}

/**
 * The search round the request asks the chat pipeline for: when the gateway has a backend and the
 * request offers a hosted web_search it may serve, unless `venym.web_search` says otherwise
 * (`false`: no search; `true`: one search up front, as on chat) or `tool_choice` is `none`. The
 * engine must call it when `tool_choice` names it, or is `required` with no other tool to call.
 */
export function hostedSearchTool(req: ResponsesRequest, config: GatewayConfig): SearchToolRequest | undefined {
	if (!config.web_search || !offersWebSearch(req.tools) || req.venym?.web_search !== undefined) return undefined;
	const choice = req.tool_choice;
	if (choice === "none") return undefined;
	const required = isHostedSearchChoice(choice) || (choice === "required" && chatTools(req.tools ?? []).length === 0);
	return { required };
}

/** The query of an up-front search (`venym.web_search`): the last user message's text, as src/search/grounding.ts takes it. */
function queryOf(req: ResponsesRequest): string {
	if (typeof req.input === "string") return req.input.trim().slice(0, 400);
	for (let i = req.input.length - 1; i >= 0; i--) {
		const item = req.input[i];
		if (item?.type !== "message" || item.role !== "user") continue;
		if (typeof item.content === "string") return item.content.trim().slice(0, 400);
		const text = item.content.map((p) => (p.type === "input_text" ? p.text : "")).filter(Boolean);
		return text.join(" ").trim().slice(0, 400);
	}
	return "";
}

function urlsOf(sources: ReadonlyArray<unknown>): Array<{ type: "url"; url: string }> {
	const urls: Array<{ type: "url"; url: string }> = [];
	for (const s of sources) {
		const url = s && typeof s === "object" ? (s as { url?: unknown }).url : undefined;
		if (typeof url === "string") urls.push({ type: "url", url });
	}
	return urls;
}

/**
 * The `web_search_call` item: for the search the model called (`round`: completed when the backend
 * answered, else failed), or for an up-front search that found sources when the client offered the
 * hosted tool.
 */
export function searchItem(
	req: ResponsesRequest,
	id: () => string,
	sources: ReadonlyArray<unknown>,
	round?: SearchRound,
): WebSearchCallItemValue | undefined {
	if (round) {
		const status = round.status === "ok" || round.status === "empty" ? "completed" : "failed";
		return {
			id: id(),
			type: "web_search_call",
			status,
			action: { type: "search", query: round.query, sources: urlsOf(round.sources) },
		};
	}
	if (!offersWebSearch(req.tools)) return undefined;
	const urls = urlsOf(sources);
	if (urls.length === 0) return undefined;
	return {
		id: id(),
		type: "web_search_call",
		status: "completed",
		action: { type: "search", query: queryOf(req), sources: urls },
	};
}
