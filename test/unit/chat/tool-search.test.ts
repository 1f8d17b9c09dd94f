import { describe, expect, it } from "vitest";
import { findTools, loadFound, offerToolSearch, toolSearchResultText, withholdDeferred } from "../../../src/chat/tool-search";
import { GatewayError } from "../../../src/errors";

type Json = Record<string, unknown>;
const fn = (name: string, description = "", extra: Json = {}): Json => ({
	type: "function",
	function: { name, description, parameters: { type: "object" } },
	...extra,
});

describe("withholdDeferred", () => {
	it("takes deferred tools out, in either place, and defer_loading off every tool", () => {
		const body: Json = {
			messages: [{ role: "user", content: "hi" }],
			tools: [
				fn("Read", "", { defer_loading: false }),
				fn("CronList", "", { defer_loading: true }),
				{ type: "function", function: { name: "Inner", defer_loading: true } },
			],
		};
		const deferred = withholdDeferred(body, false);
		expect(deferred.map((t) => (t.function as Json).name)).toEqual(["CronList", "Inner"]);
		expect((body.tools as Json[]).map((t) => (t.function as Json).name)).toEqual(["Read"]);
		expect(JSON.stringify([body, deferred])).not.toContain("defer_loading");
	});

	it("keeps a deferred tool the conversation called or tool_choice names", () => {
		const body: Json = {
			messages: [
				{
					role: "assistant",
					content: null,
					tool_calls: [{ id: "1", type: "function", function: { name: "A", arguments: "{}" } }],
				},
			],
			tools: [fn("A", "", { defer_loading: true }), fn("B", "", { defer_loading: true }), fn("C", "", { defer_loading: true })],
			tool_choice: { type: "function", function: { name: "B" } },
		};
		expect(withholdDeferred(body, false).map((t) => (t.function as Json).name)).toEqual(["C"]);
	});

	it("offers every tool with offerAll, and refuses a defer_loading that is not a boolean", () => {
		const body: Json = { messages: [], tools: [fn("A", "", { defer_loading: true })] };
		expect(withholdDeferred(body, true)).toEqual([]);
		expect(body.tools).toEqual([fn("A")]);
		const bad: Json = { messages: [], tools: [fn("A"), { type: "function", function: { name: "B", defer_loading: 1 } }] };
		expect(() => withholdDeferred(bad, false)).toThrow(GatewayError);
		expect(() => withholdDeferred(bad, false)).toThrow("tools[1].function.defer_loading");
	});
});

describe("the tool search", () => {
	const deferred = [
		fn("CronList", "List the scheduled jobs"),
		fn("CronCreate", "Schedule a job"),
		fn("WebFetch", "Fetch a web page and read it"),
		fn("NotebookEdit", "Edit a Jupyter notebook cell"),
	];
	const names = (found: Json[]) => found.map((t) => (t.function as Json).name);

	it("finds by words of the name (split at capitals, counted double) and description, best first", () => {
		expect(names(findTools(deferred, "cron list"))).toEqual(["CronList", "CronCreate"]);
		expect(names(findTools(deferred, "jupyter"))).toEqual(["NotebookEdit"]);
		expect(names(findTools(deferred, "fetch page"))).toEqual(["WebFetch"]);
		expect(findTools(deferred, "nothing here")).toEqual([]);
	});

	it("selects by exact name with select:", () => {
		expect(names(findTools(deferred, "select:WebFetch, CronList"))).toEqual(["CronList", "WebFetch"]);
	});

	it("says what it loaded, or that nothing matched", () => {
		expect(toolSearchResultText(deferred.slice(0, 2), 4)).toBe("Tools loaded, callable now: CronList, CronCreate");
		expect(toolSearchResultText([], 4)).toMatch(/^No tool matched/);
	});

	it("is offered under a name no client tool has, deferred ones included", () => {
		const body: Json = { tools: [fn("venym_tool_search")] };
		expect(offerToolSearch(body, [fn("venym_tool_search_2")])).toBe("venym_tool_search_3");
		expect((body.tools as Json[]).length).toBe(2);
	});

	it("loads what it found with the choice the body had", () => {
		const body: Json = {};
		loadFound(body, deferred.slice(0, 1), { tool_choice: "required", parallel_tool_calls: false });
		expect(body).toEqual({ tools: deferred.slice(0, 1), tool_choice: "required", parallel_tool_calls: false });
		const untouched: Json = {};
		loadFound(untouched, [], { tool_choice: "required", parallel_tool_calls: undefined });
		expect(untouched).toEqual({});
	});
});
