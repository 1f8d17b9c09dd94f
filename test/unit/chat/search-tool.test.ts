/**
 * The gateway's search offered as an engine tool (src/chat/search-tool.ts): its name never a
 * client tool's, its withdrawal for the second call, telling a search call from an answer,
 * taking a late search call out of what a client sees, and the query read from the call.
 */
import { describe, expect, it } from "vitest";
import {
	chunkIntent,
	offerSearchTool,
	PrimedEvents,
	roundMessages,
	SearchCallFilter,
	searchCallOf,
	searchResultText,
	searchToolName,
	withdrawSearchTool,
} from "../../../src/chat/search-tool";
import type { ForwardedChunk } from "../../../src/stream/chat-reducer";
import type { EngineEvent } from "../../../src/stream/engine-events";

type Json = Record<string, unknown>;

const fn = (name: string) => ({ type: "function", function: { name, parameters: { type: "object" } } });
const names = (body: Json) => (body.tools as Array<{ function: { name: string } }>).map((t) => t.function.name);
const delta = (d: Json, finish: string | null = null): Json => ({ choices: [{ index: 0, delta: d, finish_reason: finish }] });
const call = (index: number, name?: string, args = "") => ({
	index,
	...(name ? { id: `c${index}` } : {}),
	function: { ...(name ? { name } : {}), arguments: args },
});

describe("the search tool's offer", () => {
	it("is web_search, or a reserved name no client tool has", () => {
		expect(searchToolName(new Set(["exec"]))).toBe("web_search");
		expect(searchToolName(new Set(["web_search"]))).toBe("venym_web_search");
		expect(searchToolName(new Set(["web_search", "venym_web_search", "venym_web_search_2"]))).toBe("venym_web_search_3");
	});

	it("is added after the client's tools with one required string argument, chosen when required", () => {
		const body: Json = { tools: [fn("web_search")], tool_choice: "auto" };
		const name = offerSearchTool(body, { required: true });
		expect(name).toBe("venym_web_search");
		expect(names(body)).toEqual(["web_search", "venym_web_search"]);
		const offered = (body.tools as Json[])[1] as { function: { description: string; parameters: Json } };
		expect(offered.function.parameters).toMatchObject({ properties: { query: { type: "string" } }, required: ["query"] });
		expect(offered.function.description).toMatch(/search the web/i);
		expect(body.tool_choice).toEqual({ type: "function", function: { name } });
		const alone: Json = {};
		expect(offerSearchTool(alone, { required: false })).toBe("web_search");
		expect(alone).not.toHaveProperty("tool_choice");
	});

	it("is withdrawn for the second call, with a choice naming it, and every tool field when it was the only tool", () => {
		const body: Json = { tools: [fn("exec")], parallel_tool_calls: true };
		const name = offerSearchTool(body, { required: true });
		withdrawSearchTool(body, name);
		expect(body).toEqual({ tools: [fn("exec")], parallel_tool_calls: true });
		const alone: Json = { parallel_tool_calls: false };
		withdrawSearchTool(alone, offerSearchTool(alone, { required: false }));
		expect(alone).toEqual({});
	});

	it("frees a `required` choice for the second call: the search was the call it asked for", () => {
		const body: Json = { tools: [fn("exec")], tool_choice: "required" };
		withdrawSearchTool(body, offerSearchTool(body, { required: false }));
		expect(body).toEqual({ tools: [fn("exec")] });
		const named: Json = { tools: [fn("exec")], tool_choice: { type: "function", function: { name: "exec" } } };
		withdrawSearchTool(named, offerSearchTool(named, { required: false }));
		expect(named.tool_choice).toEqual({ type: "function", function: { name: "exec" } });
	});
});

describe("a search call told from an answer", () => {
	it("by the first tool call named, or text", () => {
		expect(chunkIntent(delta({ role: "assistant" }), "web_search")).toBeUndefined();
		expect(chunkIntent(delta({ reasoning_content: "hmm" }), "web_search")).toBeUndefined();
		expect(chunkIntent(delta({ tool_calls: [call(0, "web_search")] }), "web_search")).toBe("search");
		expect(chunkIntent(delta({ tool_calls: [call(0, "exec")] }), "web_search")).toBe("answer");
		expect(chunkIntent(delta({ content: "Hi" }), "web_search")).toBe("answer");
		expect(chunkIntent(delta({ tool_calls: [call(0, "web_search")] }), "venym_web_search")).toBe("answer");
	});

	it("reads until it knows, and gives back every event it read", async () => {
		const batches: EngineEvent[][] = [
			[{ type: "chunk", chunk: delta({ reasoning_content: "plan" }), data: "{}" }],
			[{ type: "chunk", chunk: delta({ tool_calls: [call(0, "web_search", '{"qu')] }), data: "{}" }],
			[{ type: "chunk", chunk: delta({ tool_calls: [call(0, undefined, 'ery":"x"}')] }), data: "{}" }, { type: "done" }],
		];
		const source = { next: async () => batches.shift() ?? [], cancel: async () => {} };
		const primed = new PrimedEvents(source);
		expect(await primed.decide("web_search", 1000)).toBe("search");
		expect(batches).toHaveLength(1);
		expect((await primed.next()).length).toBe(2);
		expect((await primed.next()).map((e) => e.type)).toEqual(["chunk", "done"]);
	});

	it("counts every batch it reads while deciding as progress, so a long reasoning keeps the hold alive", async () => {
		const batches: EngineEvent[][] = [
			[{ type: "chunk", chunk: delta({ reasoning_content: "a" }), data: "{}" }],
			[{ type: "chunk", chunk: delta({ reasoning_content: "b" }), data: "{}" }],
			[{ type: "chunk", chunk: delta({ tool_calls: [call(0, "web_search", "{}")] }), data: "{}" }],
		];
		let moved = 0;
		const primed = new PrimedEvents({ next: async () => batches.shift() ?? [], cancel: async () => {} }, () => moved++);
		expect(await primed.decide("web_search", 1000)).toBe("search");
		expect(moved).toBe(3);
	});

	it("passes an answer on once it holds too much without knowing, or the answer ends", async () => {
		const long = {
			next: async (): Promise<EngineEvent[]> => [
				{ type: "chunk", chunk: delta({ reasoning_content: "x" }), data: "x".repeat(60) },
			],
			cancel: async () => {},
		};
		expect(await new PrimedEvents(long).decide("web_search", 100)).toBe("answer");
		const ended = [[{ type: "done" }]] as EngineEvent[][];
		expect(
			await new PrimedEvents({ next: async () => ended.shift() ?? [], cancel: async () => {} }).decide("web_search", 100),
		).toBe("answer");
	});
});

describe("a search call taken out of what the client sees", () => {
	const forwarded = (chunk: Json): ForwardedChunk => ({ chunk, data: JSON.stringify(chunk) });

	it("with its argument fragments; other calls pass, and finish_reason is stop when only the search was called", () => {
		const filter = new SearchCallFilter("web_search");
		const out = filter.push([
			forwarded(delta({ content: "Let me look." })),
			forwarded(delta({ tool_calls: [call(0, "web_search", '{"q')] })),
			forwarded(delta({ tool_calls: [call(0, undefined, 'uery":"x"}')] })),
			forwarded(delta({}, "tool_calls")),
		]);
		expect(out.map((f) => f.chunk)).toEqual([delta({ content: "Let me look." }), delta({}), delta({}), delta({}, "stop")]);
		expect(out.slice(1).every((f) => f.data === null)).toBe(true);
		expect(out[0]?.data).not.toBeNull();

		const mixed = new SearchCallFilter("web_search");
		const kept = mixed.push([
			forwarded(delta({ content: "Both." })),
			forwarded(delta({ tool_calls: [call(0, "exec", "{}"), call(1, "web_search", "{}")] })),
			forwarded(delta({ tool_calls: [call(1, undefined, "")] }, "tool_calls")),
		]);
		expect(kept[1]?.chunk).toEqual(delta({ tool_calls: [call(0, "exec", "{}")] }));
		expect(kept[2]?.chunk).toEqual(delta({}, "tool_calls"));
	});
});

describe("the query and the round's messages", () => {
	const body = (args: string) => ({
		choices: [
			{
				index: 0,
				message: {
					role: "assistant",
					content: null,
					tool_calls: [{ id: "c9", type: "function", function: { name: "web_search", arguments: args } }],
				},
			},
		],
	});

	it("reads the model's query, trimmed, bounded to 400 characters and scrubbed of node secrets", () => {
		expect(searchCallOf(body('{"query": "  latest news  "}'), "web_search", [])).toEqual({ id: "c9", query: "latest news" });
		expect(searchCallOf(body(JSON.stringify({ query: "q".repeat(1000) })), "web_search", [])?.query).toHaveLength(400);
		expect(searchCallOf(body('{"query": "key sk-node-secret-1234 please"}'), "web_search", ["sk-node-secret-1234"])?.query).toBe(
			"key [redacted] please",
		);
		// Broken JSON is repaired as tool calls are; no query at all searches nothing.
		expect(searchCallOf(body('{"query": "cut'), "web_search", [])?.query).toBe("cut");
		expect(searchCallOf(body("nonsense"), "web_search", [])?.query).toBe("");
		expect(searchCallOf(body("{}"), "other", [])).toBeUndefined();
	});

	it("keeps the engine's call id only when it is short: the round's call is held at a bounded size", () => {
		const withId = (id: string) => {
			const b = body('{"query": "q"}');
			(b.choices[0] as { message: { tool_calls: Array<{ id: string }> } }).message.tool_calls[0]!.id = id;
			return b;
		};
		expect(searchCallOf(withId("call_abc-123"), "web_search", [])?.id).toBe("call_abc-123");
		const long = searchCallOf(withId("x".repeat(100_000)), "web_search", [])?.id ?? "";
		expect(long).toMatch(/^call_[0-9a-f]{8}$/);
	});

	it("adds the call and the grounding text as the tool's result", () => {
		const results = [{ title: "A", url: "https://a.example", snippet: "About A." }];
		const text = searchResultText("ok", results, new Date("2026-01-02T00:00:00Z"));
		expect(text).toMatch(/^Web search results \(retrieved 2026-01-02\):\n\n\[1\] A\nURL: https:\/\/a.example\nAbout A./);
		expect(searchResultText("failed", [], new Date())).toMatch(/failed/);
		expect(roundMessages({ id: "c9", query: "q" }, "web_search", text)).toEqual([
			{
				role: "assistant",
				content: null,
				tool_calls: [{ id: "c9", type: "function", function: { name: "web_search", arguments: '{"query":"q"}' } }],
			},
			{ role: "tool", tool_call_id: "c9", content: text },
		]);
	});
});
