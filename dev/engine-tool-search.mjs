// A model that reaches a deferred tool through a tool search, for Claude Code's `ToolSearch` (its
// default in 2.1.x: most tools sent with `defer_loading`, withheld until a search names them) and
// the gateway's own `venym_tool_search` (chat and Responses): `toolName` is called with
// `toolInput` once it is offered; until then the model calls the search tool offered with
// `searchQuery` (default `select:<toolName>`); once the tool answered, the model says what it
// returned. A search that did not bring the tool ends in text. Plans have the shape of
// engine-reply.mjs's planReply, so the same writers send them.

import { fragments, planReply, promptTokens, textOf, words } from "./engine-reply.mjs";

/** The search tools this model knows: Claude Code's, then the gateway's. */
const SEARCH_TOOLS = ["ToolSearch", "venym_tool_search"];

function plan(body, toolCall, contentWords) {
	const argFragments = toolCall ? fragments(toolCall.function.arguments) : [];
	const prompt = promptTokens(body.messages);
	const completion = contentWords.length + argFragments.length;
	return {
		reasoningField: null,
		reasoningWords: [],
		contentWords,
		toolCall,
		argFragments,
		finish: toolCall ? "tool_calls" : "stop",
		usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion },
	};
}

/** The name of the tool each earlier call id called. */
function calledNames(messages) {
	const names = new Map();
	for (const m of messages) {
		for (const call of Array.isArray(m?.tool_calls) ? m.tool_calls : []) names.set(call?.id, call?.function?.name);
	}
	return names;
}

export function planDeferredTool(body, behaviour, n) {
	const name = behaviour.toolName;
	const messages = body.messages;
	const offered = new Set((Array.isArray(body.tools) ? body.tools : []).map((t) => t?.function?.name));
	const last = messages.at(-1);
	const called = calledNames(messages);
	if (last?.role === "tool") {
		const answered = called.get(last.tool_call_id);
		if (answered === name) return plan(body, null, words(`Tool said: ${textOf(last.content)}`));
		if (SEARCH_TOOLS.includes(answered) && !offered.has(name))
			return plan(body, null, words(`The tool search did not find ${name}: ${textOf(last.content)}`));
	}
	if (offered.has(name) && body.tool_choice !== "none") {
		const args = JSON.stringify(behaviour.toolInput ?? {});
		return plan(body, { id: `call_tool${n}`, type: "function", function: { name, arguments: args } }, []);
	}
	const search = SEARCH_TOOLS.find((s) => offered.has(s));
	if (!search || body.tool_choice === "none") return planReply(body, behaviour, n);
	const query = behaviour.searchQuery ?? `select:${name}`;
	const call = { id: `call_find${n}`, type: "function", function: { name: search, arguments: JSON.stringify({ query }) } };
	return plan(body, call, []);
}
