import { describe, expect, it } from "vitest";
import { parseConfig } from "../../../src/config";
import { estimateTokens } from "../../../src/estimate";
import { citationAnnotations, groundingMessage, groundingTokenBound, searchQuery } from "../../../src/search/grounding";
import { RESULT_LIMITS, searchProvider } from "../../../src/search/providers";

const base = {
	models: [
		{
			id: "m",
			engine_model: "e",
			nodes: ["http://n/v1"],
			max_output_tokens: 10,
			pricing: { input_usd_per_mtok: 1, output_usd_per_mtok: 1 },
		},
	],
};

function ws(web_search: Record<string, unknown>) {
	const cfg = parseConfig({ ...base, web_search });
	if (!cfg.web_search) throw new Error("no web_search");
	return cfg.web_search;
}

describe("search providers", () => {
	it("queries SearXNG's JSON API and reads its results", async () => {
		const p = searchProvider(ws({ provider: "searxng", url: "https://sx.example/search" }));
		const req = p.request("rust borrow checker", 6, undefined);
		const url = new URL(req.url);
		expect(url.origin + url.pathname).toBe("https://sx.example/search");
		expect(url.searchParams.get("q")).toBe("rust borrow checker");
		expect(url.searchParams.get("format")).toBe("json");
		expect(
			p.parse({
				results: [
					{ title: "T", url: "https://a.example/1", content: "S" },
					{ title: "bad", url: "javascript:1" },
				],
			}),
		).toEqual([{ title: "T", url: "https://a.example/1", snippet: "S" }]);
	});

	it("calls Brave with its subscription token and reads web.results", async () => {
		const p = searchProvider(ws({ provider: "brave", api_key_env: "BRAVE_KEY" }));
		const req = p.request("q1", 4, "brave-secret");
		expect(new URL(req.url).host).toBe("api.search.brave.com");
		expect(new URL(req.url).searchParams.get("count")).toBe("4");
		expect(req.headers.get("x-subscription-token")).toBe("brave-secret");
		expect(p.parse({ web: { results: [{ title: "B", url: "https://b.example/", description: "D" }] } })).toEqual([
			{ title: "B", url: "https://b.example/", snippet: "D" },
		]);
	});

	it("posts to Tavily with a bearer key and reads results", async () => {
		const p = searchProvider(ws({ provider: "tavily", api_key_env: "TAVILY_KEY" }));
		const req = p.request("q2", 3, "tv-secret");
		expect(req.method).toBe("POST");
		expect(req.headers.get("authorization")).toBe("Bearer tv-secret");
		expect(await req.json()).toEqual({ query: "q2", max_results: 3 });
		expect(p.parse({ results: [{ title: "C", url: "https://c.example/", content: "E" }] })).toEqual([
			{ title: "C", url: "https://c.example/", snippet: "E" },
		]);
	});

	it("requires a url for searxng and a key for brave and tavily", () => {
		expect(() => parseConfig({ ...base, web_search: { provider: "searxng" } })).toThrow(/web_search\.url/);
		expect(() => parseConfig({ ...base, web_search: { provider: "brave" } })).toThrow(/web_search\.api_key_env/);
	});
});

describe("grounding", () => {
	it("takes the query from the last user message", () => {
		expect(
			searchQuery([
				{ role: "user", content: "first" },
				{ role: "assistant", content: "x" },
				{
					role: "user",
					content: [
						{ type: "text", text: "a" },
						{ type: "text", text: "b" },
					],
				},
				{ role: "tool", content: "t" },
			]),
		).toBe("a b");
	});

	it("numbers the sources and asks for [n] citations", () => {
		const m = groundingMessage(
			[
				{ title: "One", url: "https://1.example", snippet: "s1" },
				{ title: "Two", url: "https://2.example", snippet: "s2" },
			],
			new Date("2026-01-02T00:00:00Z"),
		);
		expect(m.role).toBe("system");
		expect(m.content).toContain("[1] One\nURL: https://1.example\ns1");
		expect(m.content).toContain("[2] Two");
		expect(m.content).toContain("2026-01-02");
	});

	it("annotates each [n] that names a source with its offsets", () => {
		const text = "A [1] and B [2], not [9].";
		const a = citationAnnotations(text, [
			{ title: "One", url: "https://1" },
			{ title: "Two", url: "https://2" },
		]);
		expect(a).toEqual([
			{ type: "url_citation", url_citation: { start_index: 2, end_index: 5, title: "One", url: "https://1" } },
			{ type: "url_citation", url_citation: { start_index: 12, end_index: 15, title: "Two", url: "https://2" } },
		]);
	});
});

describe("grounding bound", () => {
	it("is never smaller than the largest grounding message the results allow", () => {
		const r = {
			title: "t".repeat(RESULT_LIMITS.title),
			url: `https://${"u".repeat(RESULT_LIMITS.url - 8)}`,
			snippet: "s".repeat(RESULT_LIMITS.snippet),
		};
		for (const n of [1, 6, 10]) {
			const msg = groundingMessage(
				Array.from({ length: n }, () => r),
				new Date(),
			);
			expect(groundingTokenBound(n)).toBeGreaterThanOrEqual(estimateTokens(msg.content.length) + 4);
		}
	});
});
