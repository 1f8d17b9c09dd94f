/**
 * Anthropic's web search server tool (`web_search_20250305`, any `web_search_*`) served by the
 * gateway's own search backend: the request turns on the chat pipeline's search round
 * (src/chat/search-round.ts: one hold, both engine calls and the search billed once), and the
 * round the model ran is shown as Anthropic shows its search: a `server_tool_use` block, then a
 * `web_search_tool_result` block, before the answer, and `usage.server_tool_use`. Pure.
 */
import type { SearchRound, SearchToolRequest } from "../chat/search-tool";
import type { GatewayConfig } from "../config";
import { randomId } from "../ids";
import type { ContentBlock, MessagesRequest } from "./request-schema";

type Json = Record<string, unknown>;

/** The name Anthropic gives its search tool (a `tool_choice` naming it asks for the search). */
const SERVER_SEARCH_NAME = "web_search";
/** An `encrypted_content` is opaque to the client: the result's url and title, base64, at most this long. */
const MAX_ENCRYPTED_CHARS = 4096;

export interface WebSearchResultOut {
	type: "web_search_result";
	url: string;
	title: string;
	encrypted_content: string;
	page_age: string | null;
}

export interface ServerToolUseOut {
	type: "server_tool_use";
	id: string;
	name: "web_search";
	input: { query: string };
}

export interface WebSearchToolResultOut {
	type: "web_search_tool_result";
	tool_use_id: string;
	content: WebSearchResultOut[] | { type: "web_search_tool_result_error"; error_code: string };
}

export type SearchBlockOut = ServerToolUseOut | WebSearchToolResultOut;

function isRecord(v: unknown): v is Json {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** An Anthropic web search server tool (`web_search_20250305` and later versions). */
export function isServerSearch(tool: Json): boolean {
	return typeof tool.type === "string" && tool.type.startsWith("web_search_");
}

function serverSearchOf(req: Pick<MessagesRequest, "tools">): Json | undefined {
	return req.tools?.find(isServerSearch);
}

/**
 * The search round the request asks for: a backend is configured and the request offers a web
 * search server tool whose `max_uses` is not 0, unless `venym.web_search` says otherwise or
 * `tool_choice` is `none`. The model must call it when `tool_choice` names it, or is `any` with
 * no other tool to call.
 */
export function serverSearchTool(
	req: Pick<MessagesRequest, "tools" | "tool_choice" | "venym">,
	config: GatewayConfig,
): SearchToolRequest | undefined {
	const tool = serverSearchOf(req);
	if (!config.web_search || !tool || tool.max_uses === 0 || req.venym?.web_search !== undefined) return undefined;
	const choice = req.tool_choice;
	if (choice?.type === "none") return undefined;
	const others = (req.tools ?? []).some((t) => !isServerSearch(t));
	const required = (choice?.type === "tool" && choice.name === searchName(tool)) || (choice?.type === "any" && !others);
	return { required };
}

/** The name the client gave its search tool (Anthropic's is always `web_search`). */
export function searchName(tool: Json): string {
	return typeof tool.name === "string" && tool.name ? tool.name : SERVER_SEARCH_NAME;
}

function encrypted(url: string, title: string): string {
	const bytes = new TextEncoder().encode(JSON.stringify({ url, title }));
	let binary = "";
	for (const b of bytes) binary += String.fromCharCode(b);
	return btoa(binary).slice(0, MAX_ENCRYPTED_CHARS);
}

/** The two blocks of a search the model ran: its call, and the results (or why there are none). */
export function searchBlocks(round: SearchRound, id = randomId("srvtoolu_", 12)): [ServerToolUseOut, WebSearchToolResultOut] {
	const answered = round.status === "ok" || round.status === "empty";
	const content = answered
		? round.sources.map((s) => ({
				type: "web_search_result" as const,
				url: s.url,
				title: s.title,
				encrypted_content: encrypted(s.url, s.title),
				page_age: null,
			}))
		: {
				type: "web_search_tool_result_error" as const,
				error_code: round.status === "skipped" ? "invalid_tool_input" : "unavailable",
			};
	return [
		{ type: "server_tool_use", id, name: "web_search", input: { query: round.query } },
		{ type: "web_search_tool_result", tool_use_id: id, content },
	];
}

/** `usage.server_tool_use`: the search counted when the backend answered (when it is billed). */
export function serverToolUsage(round: SearchRound | undefined): { web_search_requests: number } | undefined {
	if (!round) return undefined;
	return { web_search_requests: round.status === "ok" || round.status === "empty" ? 1 : 0 };
}

/**
 * A `web_search_tool_result` replayed in an assistant turn, as text the engine reads (the results'
 * titles and urls; an error or a malformed block reads as nothing).
 */
export function searchResultReplay(block: ContentBlock): string {
	if (block.type !== "web_search_tool_result") return "";
	const content = (block as Json).content;
	if (!Array.isArray(content)) return "";
	const lines = content.filter(isRecord).flatMap((r, i) => {
		const title = typeof r.title === "string" ? r.title : "";
		const url = typeof r.url === "string" ? r.url : "";
		return title || url ? [`[${i + 1}] ${title}\n${url}`] : [];
	});
	return lines.length ? `Web search results:\n${lines.join("\n")}\n\n` : "";
}
