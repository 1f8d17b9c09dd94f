/**
 * Anthropic's deferred tools (`defer_loading: true`), as its API has them: a deferred tool is
 * withheld from the model until a `tool_reference` block in the conversation (a tool search's
 * answer, in a `tool_result`) names it, and offered from that turn on; a tool without the flag is
 * always offered. A reference to a tool the request does not define is a 400 naming it. The
 * reference itself reaches the engine as a line of text naming the tool. With Anthropic's server
 * tool search (`tool_search_tool_regex_*`, `tool_search_tool_bm25_*`) the gateway's own tool search
 * finds the deferred tools instead (src/chat/tool-search.ts), unseen by the client. Pure.
 */
import { GatewayError } from "../errors";
import type { AnthropicMessage, MessagesRequest } from "./request-schema";

type Json = Record<string, unknown>;

/** The text a `tool_reference` block becomes in the tool's result: the model reads which tool it may now call. */
export function referenceText(toolName: string): string {
	return `Tool loaded: ${toolName}`;
}

/** Every tool a `tool_reference` names, with where the first reference to it is (for a 400). */
export function referencedTools(messages: readonly AnthropicMessage[]): Map<string, string> {
	const refs = new Map<string, string>();
	for (const [i, m] of messages.entries()) {
		if (typeof m.content === "string") continue;
		for (const [j, block] of m.content.entries()) {
			if (block.type !== "tool_result" || !Array.isArray(block.content)) continue;
			for (const [k, part] of block.content.entries()) {
				if (part.type === "tool_reference" && !refs.has(part.tool_name)) {
					refs.set(part.tool_name, `messages[${i}].content[${j}].content[${k}].tool_name`);
				}
			}
		}
	}
	return refs;
}

function nameOf(tool: Json): string | undefined {
	return typeof tool.name === "string" ? tool.name : undefined;
}

/**
 * The request's tools less the deferred ones no reference names; a `defer_loading` that is not a
 * boolean, or a reference to no tool of the request, is a 400.
 */
export function offeredTools(req: Pick<MessagesRequest, "tools" | "messages" | "tool_choice">): Json[] {
	const tools = req.tools ?? [];
	const refs = referencedTools(req.messages);
	const names = new Set<string>();
	for (const [i, t] of tools.entries()) {
		if (t.defer_loading !== undefined && typeof t.defer_loading !== "boolean") {
			throw new GatewayError("invalid_request", `Invalid 'tools[${i}].defer_loading': expected a boolean.`, {
				param: `tools[${i}].defer_loading`,
			});
		}
		const name = nameOf(t);
		if (name !== undefined) names.add(name);
	}
	for (const [name, at] of refs) {
		if (names.has(name)) continue;
		throw new GatewayError(
			"invalid_request",
			`Invalid '${at}': the tool reference '${name.slice(0, 128)}' names no tool in 'tools'; a referenced tool must be defined there (with defer_loading: true).`,
			{ param: at },
		);
	}
	const loaded = calledTools(req.messages);
	if (req.tool_choice?.type === "tool") loaded.add(req.tool_choice.name);
	return tools.filter((t) => t.defer_loading !== true || refs.has(nameOf(t) ?? "") || loaded.has(nameOf(t) ?? ""));
}

/**
 * Deferred tools offered without a reference, as on chat (src/chat/tool-search.ts): one the
 * conversation already called (a `tool_use` block names it) and one `tool_choice` names.
 */
function calledTools(messages: readonly AnthropicMessage[]): Set<string> {
	const called = new Set<string>();
	for (const m of messages) {
		if (typeof m.content === "string") continue;
		for (const block of m.content) if (block.type === "tool_use") called.add(block.name);
	}
	return called;
}

/** Anthropic's server tool search: served by the gateway's tool search on the chat pipeline. */
export function isServerToolSearch(tool: Json): boolean {
	return typeof tool.type === "string" && tool.type.startsWith("tool_search_tool_");
}
