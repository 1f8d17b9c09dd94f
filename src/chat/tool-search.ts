/**
 * Deferred function tools on the chat pipeline (chat completions and Responses): a tool sent with
 * `defer_loading: true` (beside `function`, or inside it) is withheld from the engine, which is
 * offered the gateway's tool search instead (`venym_tool_search`, as OpenRouter offers
 * `openrouter:tool_search`). When the engine calls it, the gateway searches the deferred tools'
 * names and descriptions itself, and the tools found are offered in the next engine call of the
 * same request: the search round of search-round.ts, with this search in place of the web's. A
 * deferred tool the conversation already called (or `tool_choice` names) is offered from the
 * start, so a later turn can go on calling it. Pure.
 */
import { GatewayError } from "../errors";
import { estimateTokens, type PromptSize, TOKENS_PER_MESSAGE, utf8Bytes } from "../estimate";

type Json = Record<string, unknown>;

const TOOL_SEARCH_NAME = "venym_tool_search";
/** The most tools one search loads. */
const MAX_FOUND = 5;
/** The longest query read (as the web search's). */
const MAX_QUERY_CHARS = 400;
const SELECT = "select:";
const DESCRIPTION =
	"Search the tools that are available but not loaded yet, by name and description. Call it when no loaded tool fits the task; the tools found can be called right after it. Query with keywords, or `select:name1,name2` for tools you know by name.";

function isRecord(v: unknown): v is Json {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

function fnOf(tool: unknown): Json | undefined {
	return isRecord(tool) && isRecord(tool.function) ? tool.function : undefined;
}

function nameOf(tool: unknown): string | undefined {
	const name = fnOf(tool)?.name;
	return typeof name === "string" ? name : undefined;
}

/** The tool's `defer_loading` (either place), taken off it: engines do not know the field. */
function takeDeferFlag(tool: unknown, i: number): boolean {
	if (!isRecord(tool)) return false;
	const fn = fnOf(tool);
	let deferred = false;
	for (const [where, holder] of [
		[`tools[${i}].defer_loading`, tool],
		[`tools[${i}].function.defer_loading`, fn],
	] as const) {
		if (!holder || !("defer_loading" in holder)) continue;
		const flag = holder.defer_loading;
		if (flag !== undefined && flag !== null && typeof flag !== "boolean") {
			throw new GatewayError("invalid_request", `Invalid '${where}': expected a boolean.`, { param: where });
		}
		deferred ||= flag === true;
		delete holder.defer_loading;
	}
	return deferred;
}

/** Tools the conversation called, or `tool_choice` names: loaded already. */
function loadedNames(body: Json): Set<string> {
	const names = new Set<string>();
	const choice = nameOf(body.tool_choice);
	if (choice) names.add(choice);
	for (const m of Array.isArray(body.messages) ? body.messages : []) {
		if (!isRecord(m) || !Array.isArray(m.tool_calls)) continue;
		for (const call of m.tool_calls) {
			const name = nameOf(call);
			if (name) names.add(name);
		}
	}
	return names;
}

/**
 * Takes `defer_loading` off every tool of a chat body (in place), and the deferred tools not
 * loaded yet out of its `tools`, returned. With `offerAll` (a request whose engine calls no tool,
 * or that has another gateway tool round), every tool stays offered and none is returned.
 */
export function withholdDeferred(body: Json, offerAll: boolean): Json[] {
	if (!Array.isArray(body.tools)) return [];
	const flags = body.tools.map((t, i) => takeDeferFlag(t, i));
	if (offerAll || !flags.includes(true)) return [];
	const loaded = loadedNames(body);
	const kept: unknown[] = [];
	const deferred: Json[] = [];
	for (const [i, tool] of body.tools.entries()) {
		if (flags[i] && !loaded.has(nameOf(tool) ?? "")) deferred.push(tool as Json);
		else kept.push(tool);
	}
	body.tools = kept;
	return deferred;
}

/** Adds the tool search to a chat body's `tools` (in place), under a name no client tool has; returns that name. */
export function offerToolSearch(body: Json, deferred: readonly Json[]): string {
	const tools = Array.isArray(body.tools) ? body.tools : [];
	const taken = new Set([...tools, ...deferred].map(nameOf));
	let name = TOOL_SEARCH_NAME;
	for (let i = 2; taken.has(name); i++) name = `${TOOL_SEARCH_NAME}_${i}`;
	const parameters = {
		type: "object",
		properties: { query: { type: "string", description: "Keywords, or select:name1,name2." } },
		required: ["query"],
		additionalProperties: false,
	};
	body.tools = [...tools, { type: "function", function: { name, description: DESCRIPTION, parameters } }];
	return name;
}

function words(text: string): string[] {
	return text
		.toLowerCase()
		.split(/[^\p{L}\p{N}]+/u)
		.filter(Boolean);
}

/**
 * The deferred tools a query finds: `select:a,b` by exact name; else those whose name or
 * description holds a word of the query, the most words (a name's counting double) first, at most
 * MAX_FOUND.
 */
export function findTools(deferred: readonly Json[], query: string): Json[] {
	const q = query.trim().slice(0, MAX_QUERY_CHARS);
	if (q.toLowerCase().startsWith(SELECT)) {
		const wanted = new Set(
			q
				.slice(SELECT.length)
				.split(",")
				.map((n) => n.trim()),
		);
		return deferred.filter((t) => wanted.has(nameOf(t) ?? "")).slice(0, MAX_FOUND);
	}
	const terms = new Set(words(q));
	const scored = deferred.map((tool, order) => {
		const fn = fnOf(tool) ?? {};
		const name = new Set(words(String(fn.name ?? "").replace(/([a-z])([A-Z])/g, "$1 $2")));
		const description = new Set(words(typeof fn.description === "string" ? fn.description : ""));
		let score = 0;
		for (const term of terms) score += (name.has(term) ? 2 : 0) + (description.has(term) ? 1 : 0);
		return { tool, score, order };
	});
	return scored
		.filter((s) => s.score > 0)
		.sort((a, b) => b.score - a.score || a.order - b.order)
		.slice(0, MAX_FOUND)
		.map((s) => s.tool);
}

/** The search's result for the engine: the tools it may now call, or that none matched. */
export function toolSearchResultText(found: readonly Json[], remaining: number): string {
	if (!found.length) return `No tool matched. ${remaining} tools can be searched; try other words.`;
	return `Tools loaded, callable now: ${found.map(nameOf).join(", ")}`;
}

/**
 * Puts the tools found into a body the search tool was just withdrawn from (in place), with the
 * `tool_choice` and `parallel_tool_calls` it had (a `required` choice asks for a call of them).
 */
export function loadFound(
	body: Json,
	found: readonly Json[],
	before: { tool_choice: unknown; parallel_tool_calls: unknown },
): void {
	if (!found.length) return;
	body.tools = [...(Array.isArray(body.tools) ? body.tools : []), ...found];
	if (body.tool_choice === undefined && (before.tool_choice === "required" || before.tool_choice === "auto"))
		body.tool_choice = before.tool_choice;
	if (body.parallel_tool_calls === undefined && before.parallel_tool_calls !== undefined)
		body.parallel_tool_calls = before.parallel_tool_calls;
}

/**
 * The most tokens a tool search round adds to the second call's prompt: the call (its query at
 * most MAX_QUERY_CHARS, each escaped as JSON at most 6 characters), the result (every name), and
 * the definitions of the tools it may load (at most all of the deferred ones).
 */
export function toolSearchRoundTokenBound(deferred: readonly Json[]): number {
	const definitions = JSON.stringify(deferred).length;
	const names = deferred.reduce((n, t) => n + (nameOf(t)?.length ?? 0) + 2, 0);
	return estimateTokens(MAX_QUERY_CHARS * 6 + 160 + definitions + names + 120) + 2 * TOKENS_PER_MESSAGE;
}

/** The same round's size (money/hold-bound.ts): what it can add to the billing bound, in UTF-8 bytes. */
export function toolSearchRoundSize(deferred: readonly Json[]): PromptSize {
	const definitions = utf8Bytes(JSON.stringify(deferred));
	const names = deferred.reduce((n, t) => n + utf8Bytes(nameOf(t) ?? "") + 2, 0);
	return { bytes: MAX_QUERY_CHARS * 6 + 160 + definitions + names + 120, images: 0, tokens: 2 * TOKENS_PER_MESSAGE };
}
