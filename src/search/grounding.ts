import { estimateTokens, type PromptSize, TOKENS_PER_MESSAGE } from "../estimate";
import type { Source } from "../types";
import { RESULT_LIMITS, type SearchResult } from "./providers";

function textOf(content: unknown): string {
	if (typeof content === "string") return content;
	if (!Array.isArray(content)) return "";
	return content
		.map((p) =>
			p && typeof p === "object" && (p as { type?: unknown }).type === "text" ? String((p as { text?: unknown }).text ?? "") : "",
		)
		.filter(Boolean)
		.join(" ");
}

/** The search query: the text of the last user message (text parts of multi-part content too). */
export function searchQuery(messages: ReadonlyArray<{ role: string; content?: unknown }>): string {
	for (let i = messages.length - 1; i >= 0; i--) {
		const m = messages[i];
		if (m?.role === "user") return textOf(m.content).trim().slice(0, 400);
	}
	return "";
}

const GROUNDING_HEAD = "Web search results (retrieved YYYY-MM-DD):\n\n";
const GROUNDING_TAIL =
	"\n\nUse these sources where they help answer the user. Cite a source as [n] right after the statement it supports, using the numbers above. Do not invent sources.";

/** The system message placed before the conversation: numbered sources the engine cites as [n]. */
export function groundingMessage(results: SearchResult[], now: Date): { role: "system"; content: string } {
	const lines = results.map((r, i) => `[${i + 1}] ${r.title}\nURL: ${r.url}\n${r.snippet}`.trim());
	const head = GROUNDING_HEAD.replace("YYYY-MM-DD", now.toISOString().slice(0, 10));
	return { role: "system", content: `${head}${lines.join("\n\n")}${GROUNDING_TAIL}` };
}

/** The most characters a grounding message of `count` results can have (results are cut to RESULT_LIMITS). */
function groundingChars(count: number): number {
	// "[nn] " + "\nURL: " + "\n" + the "\n\n" between results.
	const perResult = RESULT_LIMITS.title + RESULT_LIMITS.url + RESULT_LIMITS.snippet + 16;
	return GROUNDING_HEAD.length + GROUNDING_TAIL.length + count * perResult;
}

/** The most estimated tokens a grounding message of `count` results can add. */
export function groundingTokenBound(count: number): number {
	return estimateTokens(groundingChars(count)) + TOKENS_PER_MESSAGE;
}

/** The most UTF-8 bytes one UTF-16 code unit encodes to (a surrogate pair's two units take 4). */
export const MAX_UTF8_BYTES_PER_CHAR = 3;

/** The largest size (money/hold-bound.ts) a grounding message of `count` results can add. */
export function groundingSize(count: number): PromptSize {
	return { bytes: groundingChars(count) * MAX_UTF8_BYTES_PER_CHAR, images: 0, tokens: TOKENS_PER_MESSAGE };
}

export function sourcesOf(results: SearchResult[]): Source[] {
	return results.map((r) => ({ title: r.title, url: r.url }));
}

export interface UrlCitation {
	type: "url_citation";
	url_citation: { start_index: number; end_index: number; title: string; url: string };
}

/** OpenAI-style url_citation annotations for each [n] in the text that names a source. */
export function citationAnnotations(text: string, sources: Source[]): UrlCitation[] {
	const out: UrlCitation[] = [];
	for (const m of text.matchAll(/\[(\d{1,2})\]/g)) {
		const source = sources[Number(m[1]) - 1];
		if (!source || m.index === undefined) continue;
		out.push({
			type: "url_citation",
			url_citation: { start_index: m.index, end_index: m.index + m[0].length, title: source.title, url: source.url },
		});
	}
	return out;
}
