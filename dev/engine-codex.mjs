// The codex scenario of the development engine, for Codex CLI (scripts/check-codex.mjs): when
// Codex's `exec_command` is offered, every answer starts with reasoning (so the gateway has
// something to seal), and
//   - a user message asking to "run" something, with `exec_command` offered, gets a call to it
//     with a harmless `echo hi`;
//   - a user message asking to "search", with the gateway's web search offered, gets a call to it,
//     and its result "According to [1], …";
//   - a tool's output gets "Tool said: <output>";
//   - anything else gets "Echo: <the user's text>";
// each answer followed by "Reasoning received: <…>" when earlier assistant messages carried
// `reasoning_content` (the gateway's reasoning round trip), so a check can see what came back.

import { isGrounding, planReply, promptTokens, searchToolCall, textOf, words } from "./engine-reply.mjs";

const TOOL = "exec_command";
const REASONING = "I plan the next step.";

function received(messages) {
	const seen = messages.filter((m) => m?.role === "assistant" && typeof m.reasoning_content === "string");
	return seen.length ? ` Reasoning received: ${seen.map((m) => m.reasoning_content).join(" | ")}` : "";
}

function plan(body, toolCall, text) {
	const contentWords = words(text);
	const reasoningWords = words(REASONING);
	const prompt = promptTokens(body.messages);
	const completion = reasoningWords.length + contentWords.length + (toolCall ? 1 : 0);
	return {
		reasoningField: "reasoning_content",
		reasoningWords,
		contentWords,
		toolCall,
		argFragments: toolCall ? [toolCall.function.arguments] : [],
		finish: toolCall ? "tool_calls" : "stop",
		usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion },
	};
}

/** Codex's turns, as above; a request without Codex's `exec_command` (or asking for JSON) gets the usual echo. */
export function planCodex(body, behaviour, n) {
	const messages = Array.isArray(body.messages) ? body.messages : [];
	const last = messages.at(-1) ?? { role: "user", content: "" };
	const offered = (Array.isArray(body.tools) ? body.tools : []).some((t) => t?.function?.name === TOOL);
	if (!offered || body.response_format) return planReply(body, behaviour, n);
	if (isGrounding(last)) return plan(body, null, `According to [1], the results cover it.${received(messages)}`);
	if (last.role === "tool") return plan(body, null, `Tool said: ${textOf(last.content).trim()}.${received(messages)}`);
	const userText = textOf(last.content);
	const search = searchToolCall(body, userText, n);
	if (search) return plan(body, search, "");
	if (/\brun\b/i.test(userText) && body.tool_choice !== "none") {
		const args = JSON.stringify({ cmd: "echo hi", yield_time_ms: 1000 });
		return plan(body, { id: `call_codex${n}`, type: "function", function: { name: TOOL, arguments: args } }, "");
	}
	return plan(body, null, `Echo: ${userText}${received(messages)}`);
}
