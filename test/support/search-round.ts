// What the search-round tests (Responses' hosted web_search, Messages' server tool) read of the
// development engine: its chat calls and searches since a mark, its prompt count, the tools offered.
import { engineRequestsSince } from "./gateway";

type Json = Record<string, unknown>;

/** A chat message as the engine received it. */
export interface EngineMessage {
	role: string;
	content: unknown;
	tool_calls?: Array<{ id: string; function: { name: string; arguments: string } }>;
	tool_call_id?: string;
}

/**
 * The engine's searches and chat calls since `since` (lastEngineId); with `mark`, only those whose
 * body carries it (another file's requests to the shared engine land in the same window).
 */
export async function engineCalls(since: number, mark?: string) {
	const all = (await engineRequestsSince(since)).filter((r) => mark === undefined || JSON.stringify(r.body ?? "").includes(mark));
	return {
		searches: all.filter((r) => r.path.endsWith("/search")),
		chats: all.filter((r) => r.path.endsWith("/chat/completions")).map((r) => r.body as Json & { messages: EngineMessage[] }),
	};
}

/** The dev engine's prompt count: every message's text, a token per 4 characters. */
export function devPrompt(messages: EngineMessage[]): number {
	const text = (c: unknown) => (typeof c === "string" ? c : "");
	return Math.ceil(messages.reduce((n, m) => n + text(m.content).length, 0) / 4);
}

/** The names of the function tools a chat body offers. */
export function toolNames(body: Json): string[] {
	return ((body.tools ?? []) as Array<{ function: { name: string } }>).map((t) => t.function.name);
}
