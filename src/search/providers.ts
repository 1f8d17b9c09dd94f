import type { GatewayConfig } from "../config";

export interface SearchResult {
	title: string;
	url: string;
	snippet: string;
}

type WebSearchConfig = NonNullable<GatewayConfig["web_search"]>;

/** One search backend: builds the request and reads the answer. Fetching, timeouts and errors live in run-search. */
export interface SearchProvider {
	request(query: string, count: number, apiKey: string | undefined): Request;
	parse(body: unknown): SearchResult[];
}

function str(v: unknown): string {
	return typeof v === "string" ? v : "";
}

function list(v: unknown): Record<string, unknown>[] {
	return Array.isArray(v) ? v.filter((x): x is Record<string, unknown> => typeof x === "object" && x !== null) : [];
}

/**
 * Each result's text is cut to these lengths (and longer URLs are dropped), so the grounding
 * message has a known largest size: the hold counts it before the search runs.
 */
export const RESULT_LIMITS = { title: 200, url: 1000, snippet: 800 } as const;

function results(items: Record<string, unknown>[], snippetField: string): SearchResult[] {
	return items
		.map((r) => ({
			title: (str(r.title) || str(r.url)).slice(0, RESULT_LIMITS.title),
			url: str(r.url),
			snippet: str(r[snippetField]).slice(0, RESULT_LIMITS.snippet),
		}))
		.filter((r) => /^https?:\/\//.test(r.url) && r.url.length <= RESULT_LIMITS.url);
}

/** SearXNG's JSON API (`format=json` must be enabled on the instance). Self-hostable; the default. */
const searxng = (cfg: WebSearchConfig): SearchProvider => ({
	request(query, _count, apiKey) {
		const url = new URL(cfg.url ?? "http://127.0.0.1:8888/search");
		url.searchParams.set("q", query);
		url.searchParams.set("format", "json");
		const headers: Record<string, string> = { accept: "application/json" };
		if (apiKey) headers.authorization = `Bearer ${apiKey}`;
		return new Request(url, { headers });
	},
	parse: (body) => results(list((body as { results?: unknown })?.results), "content"),
});

/** Brave Search API: GET /res/v1/web/search with the X-Subscription-Token header. */
const brave = (cfg: WebSearchConfig): SearchProvider => ({
	request(query, count, apiKey) {
		const url = new URL(cfg.url ?? "https://api.search.brave.com/res/v1/web/search");
		url.searchParams.set("q", query);
		url.searchParams.set("count", String(count));
		return new Request(url, { headers: { accept: "application/json", "x-subscription-token": apiKey ?? "" } });
	},
	parse: (body) => results(list((body as { web?: { results?: unknown } })?.web?.results), "description"),
});

/** Tavily: POST /search with a bearer key. */
const tavily = (cfg: WebSearchConfig): SearchProvider => ({
	request(query, count, apiKey) {
		return new Request(cfg.url ?? "https://api.tavily.com/search", {
			method: "POST",
			headers: { "content-type": "application/json", authorization: `Bearer ${apiKey ?? ""}` },
			body: JSON.stringify({ query, max_results: count }),
		});
	},
	parse: (body) => results(list((body as { results?: unknown })?.results), "content"),
});

export function searchProvider(cfg: WebSearchConfig): SearchProvider {
	switch (cfg.provider) {
		case "searxng":
			return searxng(cfg);
		case "brave":
			return brave(cfg);
		case "tavily":
			return tavily(cfg);
	}
}
