// The tool-loop scenario and the tokenizer of the development engine, for agent clients such as
// Claude Code: `/s/tool-loop` calls one named tool (default `Bash`, with a harmless `echo hi`)
// when the request offers it and no tool has answered yet, then answers with the tool's result.
// `POST /tokenize` counts a chat request's prompt the way vLLM's does (`{count, max_model_len, tokens}`).
// Plans have the shape of engine-reply.mjs's planReply, so the same writers send them.

import { fragments, planReply, promptTokens, textOf, words } from "./engine-reply.mjs";
import { sendJson } from "./engine-wire.mjs";

const DEFAULT_TOOL = "Bash";
const DEFAULT_INPUT = { command: "echo hi", description: "Print hi" };
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

/** The tool loop: call the tool once, then say what it returned; a request without the tool gets the usual echo. */
export function planToolLoop(body, behaviour, n) {
	const name = behaviour.toolName ?? DEFAULT_TOOL;
	const messages = body.messages;
	const offered = (Array.isArray(body.tools) ? body.tools : []).some((t) => t?.function?.name === name);
	const toolAnswer = messages.findLast((m) => m?.role === "tool");
	if (toolAnswer) return plan(body, null, words(`Tool said: ${textOf(toolAnswer.content)}`));
	if (!offered || body.tool_choice === "none") return planReply(body, behaviour, n);
	const args = JSON.stringify(behaviour.toolInput ?? DEFAULT_INPUT);
	return plan(body, { id: `call_loop${n}`, type: "function", function: { name, arguments: args } }, []);
}

/**
 * A model that calls `web_search` again once the search round gave it its result (the tool is no
 * longer offered): `sayBeforeTool` first, then the call; the first call is planReply's.
 */
export function planSearchAgain(body, behaviour, n) {
	if (body.messages.at(-1)?.role !== "tool") return planReply(body, behaviour, n);
	const call = { id: `call_again${n}`, type: "function", function: { name: "web_search", arguments: '{"query":"once more"}' } };
	return plan(body, call, words(behaviour.sayBeforeTool ?? ""));
}

/** vLLM's `POST /tokenize` for a chat request: the prompt's tokens as this engine counts them. */
export function tokenize(ctx) {
	const messages = Array.isArray(ctx.body?.messages) ? ctx.body.messages : null;
	if (!messages)
		return sendJson(ctx.res, 400, { object: "error", message: "messages required", type: "BadRequestError", code: 400 });
	const count = promptTokens(messages) + 3 * messages.length;
	sendJson(ctx.res, 200, { count, max_model_len: 32768, tokens: Array.from({ length: count }, (_, i) => i) });
}
