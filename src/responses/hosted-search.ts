/**
 * The hosted `web_search` tool, served by the gateway's own search backend (src/search): with a
 * backend configured, a turn that starts from a new user message is grounded by one search (the
 * chat lane's `venym.web_search`: held, billed and reported as every search is), and the answer
 * shows it as a `web_search_call` item before the message. A turn that continues a tool loop
 * searches nothing: its question was searched when it was asked.
 */
import type { GatewayConfig } from "../config";
import type { WebSearchCallItemValue } from "./item-schema";
import type { ResponsesRequest } from "./request-schema";
import { offersWebSearch } from "./tools";

/** The request with the gateway's search turned on when its hosted web_search tool is to be served now. */
export function withHostedSearch(req: ResponsesRequest, config: GatewayConfig): ResponsesRequest {
	if (!config.web_search || !offersWebSearch(req.tools) || req.venym?.web_search === false) return req;
	if (Array.isArray(req.input)) {
		const last = req.input.at(-1);
		if (last?.type !== "message" || last.role !== "user") return req;
	}
	return { ...req, venym: { ...req.venym, web_search: true } };
}

/** The query the gateway searched for: the last user message's text, as src/search/grounding.ts takes it. */
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

/** The `web_search_call` item for a search that found sources, when the client offered the hosted tool. */
export function searchItem(
	req: ResponsesRequest,
	id: () => string,
	sources: ReadonlyArray<unknown>,
): WebSearchCallItemValue | undefined {
	if (!offersWebSearch(req.tools)) return undefined;
	const urls: Array<{ type: "url"; url: string }> = [];
	for (const s of sources) {
		const url = s && typeof s === "object" ? (s as { url?: unknown }).url : undefined;
		if (typeof url === "string") urls.push({ type: "url", url });
	}
	if (urls.length === 0) return undefined;
	return {
		id: id(),
		type: "web_search_call",
		status: "completed",
		action: { type: "search", query: queryOf(req), sources: urls },
	};
}
