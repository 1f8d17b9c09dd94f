import type { GatewayConfig } from "../config";
import { readCappedText } from "../http/read-capped";
import { type Secrets, secretNamed } from "../secrets";
import { type SearchResult, searchProvider } from "./providers";

/** `skipped`: nothing to search for (no text in the last user message), so no backend was called. */
export type SearchStatus = "ok" | "empty" | "failed" | "unconfigured" | "skipped";

export interface SearchOutcome {
	status: SearchStatus;
	results: SearchResult[];
}

/**
 * The most of a search backend's answer read (a SearXNG or Brave page of results is some tens of
 * kilobytes): a larger one is cancelled unread and the search failed, never parsed whole.
 */
export const MAX_SEARCH_BODY_BYTES = 2 * 1024 * 1024;

/**
 * Runs one web search. It never throws: a backend that fails or times out leaves the answer
 * ungrounded, and the status says why (the route puts it in a response header).
 */
export async function runWebSearch(
	cfg: GatewayConfig["web_search"],
	secrets: Secrets,
	query: string,
	count: number,
	signal?: AbortSignal,
): Promise<SearchOutcome> {
	if (!cfg) return { status: "unconfigured", results: [] };
	if (!query) return { status: "skipped", results: [] };
	const provider = searchProvider(cfg);
	const key = cfg.api_key_env ? secretNamed(secrets, cfg.api_key_env) : undefined;
	const timeout = AbortSignal.timeout(cfg.timeout_ms);
	try {
		const res = await fetch(provider.request(query, count, typeof key === "string" ? key : undefined), {
			signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
			redirect: "manual",
		});
		if (!res.ok) {
			await res.body?.cancel().catch(() => {});
			console.warn(`web search: ${cfg.provider} answered ${res.status}`);
			return { status: "failed", results: [] };
		}
		const text = await readCappedText(res.body, MAX_SEARCH_BODY_BYTES);
		if (text === null) {
			console.warn(`web search: ${cfg.provider} answered more than ${MAX_SEARCH_BODY_BYTES} bytes`);
			return { status: "failed", results: [] };
		}
		const results = provider.parse(JSON.parse(text)).slice(0, count);
		return { status: results.length ? "ok" : "empty", results };
	} catch (err) {
		console.warn(`web search: ${cfg.provider} failed`, err);
		return { status: "failed", results: [] };
	}
}
