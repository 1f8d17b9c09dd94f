/**
 * The gateway's web search offered to the engine as a function tool (a prepared request's
 * `searchTool`, turned on by a lane: the Responses lane's hosted `web_search`): its offer under a
 * name no client tool has, telling a search call from the rest of an answer, taking a search call
 * out of what a client sees, and the messages a search round adds to the conversation. Pure: the
 * round itself (engine calls, the search, money) is search-round.ts.
 */

import { estimateTokens, type PromptSize, TOKENS_PER_MESSAGE } from "../estimate";
import { scrubEngineText } from "../redact";
import { groundingMessage, groundingSize, groundingTokenBound } from "../search/grounding";
import type { SearchResult } from "../search/providers";
import type { SearchStatus } from "../search/run-search";
import type { ForwardedChunk } from "../stream/chat-reducer";
import type { EngineEvent, EngineEvents } from "../stream/engine-events";
import type { ChunkTransform } from "../stream/pipe-engine-stream";
import { repairArguments } from "../stream/tool-call-repair";
import type { Source } from "../types";

type Json = Record<string, unknown>;

/** What a lane asks for: the tool offered, and whether the engine must call it (`tool_choice` naming it). */
export interface SearchToolRequest {
	required: boolean;
}

/** A search round that ran: the model's query, what the backend said, the sources the answer may cite. */
export interface SearchRound {
	query: string;
	status: SearchStatus;
	sources: Source[];
}

/** What a stream's encoder is told of a search round the stream starts before its search ran (early-round.ts). */
export interface SearchUnderWay {
	query: string;
	/** The search once it ran. */
	readonly searched: SearchRound | undefined;
	/** Why the second call gave no answer (the error the HTTP path gives), once it failed. */
	readonly failure: unknown;
}

const SEARCH_TOOL_NAME = "web_search";
/** The longest query searched for, as the chat lane's grounding takes the user's text. */
const MAX_QUERY_CHARS = 400;
const QUERY_ARG = "query";
/** The longest engine tool-call id a round keeps (vLLM's are `chatcmpl-tool-` and 32 hex digits). */
const MAX_CALL_ID_CHARS = 64;
const DESCRIPTION =
	"Search the web for current information. Call it when the answer needs facts you may not know or that may have changed; the results come back numbered, to cite as [n].";

function isRecord(v: unknown): v is Json {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

function toolName(tool: unknown): string | undefined {
	const fn = isRecord(tool) && isRecord(tool.function) ? tool.function : undefined;
	return typeof fn?.name === "string" ? fn.name : undefined;
}

/** `web_search`, or when a client tool has that name the first free `venym_web_search[_n]`: never a client tool's name. */
export function searchToolName(taken: ReadonlySet<string>): string {
	if (!taken.has(SEARCH_TOOL_NAME)) return SEARCH_TOOL_NAME;
	for (let i = 1; ; i++) {
		const name = i === 1 ? "venym_web_search" : `venym_web_search_${i}`;
		if (!taken.has(name)) return name;
	}
}

/**
 * Adds the search function to a chat body's `tools` (in place, before the body is copied for
 * fallbacks) and, when required, points `tool_choice` at it; returns the name it is offered under.
 */
export function offerSearchTool(body: Json, request: SearchToolRequest): string {
	const tools = Array.isArray(body.tools) ? body.tools : [];
	const name = searchToolName(new Set(tools.map(toolName).filter((n): n is string => n !== undefined)));
	const parameters = {
		type: "object",
		properties: { [QUERY_ARG]: { type: "string", description: "What to search for." } },
		required: [QUERY_ARG],
		additionalProperties: false,
	};
	body.tools = [...tools, { type: "function", function: { name, description: DESCRIPTION, parameters } }];
	if (request.required) body.tool_choice = { type: "function", function: { name } };
	return name;
}

/**
 * The body without the search function (a round's second call): a choice naming it or `required`
 * goes, and with no tool left, every tool field.
 */
export function withdrawSearchTool(body: Json, name: string): void {
	const tools = (Array.isArray(body.tools) ? body.tools : []).filter((t) => toolName(t) !== name);
	const choice = body.tool_choice;
	// The search call was the tool call a `required` choice asked for: after its result, the
	// model may answer in text, as OpenAI's hosted tools let it.
	if ((isRecord(choice) && toolName(choice) === name) || choice === "required") delete body.tool_choice;
	if (tools.length) {
		body.tools = tools;
		return;
	}
	delete body.tools;
	delete body.tool_choice;
	delete body.parallel_tool_calls;
}

/** What one engine chunk says of the answer: it calls the search, it answers (text or another tool), or not yet. */
export function chunkIntent(chunk: Json, name: string): "search" | "answer" | undefined {
	const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
	for (const choice of choices) {
		const delta = isRecord(choice) && isRecord(choice.delta) ? choice.delta : undefined;
		if (!delta) continue;
		if (Array.isArray(delta.tool_calls)) {
			for (const call of delta.tool_calls) {
				const called = isRecord(call) && isRecord(call.function) ? call.function.name : undefined;
				if (typeof called === "string" && called) return called === name ? "search" : "answer";
			}
		}
		if ((typeof delta.content === "string" && delta.content) || (typeof delta.refusal === "string" && delta.refusal))
			return "answer";
	}
	return undefined;
}

/**
 * An engine's events with the ones already read put back first: the search round reads the start
 * of an answer to decide what it is, and the stream layers then read it whole.
 */
export class PrimedEvents implements EngineEvents {
	readonly #source: EngineEvents;
	/** Called for every batch read while deciding: the request moves (its hold is kept alive) though nothing reaches the client yet. */
	readonly #onData: (() => void) | undefined;
	#held: EngineEvent[] = [];
	#chars = 0;

	constructor(source: EngineEvents, onData?: () => void) {
		this.#source = source;
		this.#onData = onData;
	}

	/**
	 * Reads until the answer calls the search (`search`), answers otherwise or ends (`answer`), or
	 * more than `maxChars` of it is held (`answer`: it is passed on, a later search call taken out).
	 */
	async decide(name: string, maxChars: number): Promise<"search" | "answer"> {
		for (;;) {
			const events = await this.#source.next();
			this.#onData?.();
			this.#held.push(...events);
			for (const e of events) {
				if (e.type !== "chunk") return "answer";
				const intent = chunkIntent(e.chunk, name);
				if (intent) return intent;
				this.#chars += e.data.length;
			}
			if (this.#chars > maxChars) return "answer";
		}
	}

	next(): Promise<EngineEvent[]> {
		if (!this.#held.length) return this.#source.next();
		const held = this.#held;
		this.#held = [];
		return Promise.resolve(held);
	}

	cancel(reason?: unknown): Promise<void> {
		this.#held = [];
		return this.#source.cancel(reason);
	}
}

/**
 * Takes a search call out of an answer that did not start with it (text first, then the call): the
 * client never sees the gateway's tool. Other calls pass; a choice whose only calls were searches
 * finishes with `stop`.
 */
export class SearchCallFilter implements ChunkTransform {
	readonly #name: string;
	/** `choice:call` indexes of search calls, whose later argument fragments go too. */
	readonly #search = new Set<string>();
	/** Choices that called another tool. */
	readonly #others = new Set<number>();
	removed = 0;

	constructor(name: string) {
		this.#name = name;
	}

	push(chunks: ForwardedChunk[]): ForwardedChunk[] {
		for (const f of chunks) if (this.#strip(f.chunk)) f.data = null;
		return chunks;
	}

	flush(): ForwardedChunk[] {
		return [];
	}

	#strip(chunk: Json): boolean {
		let changed = false;
		const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
		for (const choice of choices) {
			if (!isRecord(choice)) continue;
			const index = typeof choice.index === "number" ? choice.index : 0;
			const delta = isRecord(choice.delta) ? choice.delta : undefined;
			if (delta && Array.isArray(delta.tool_calls)) {
				const kept = delta.tool_calls.filter((call, position) => {
					const key = `${index}:${isRecord(call) && typeof call.index === "number" ? call.index : position}`;
					const called = isRecord(call) && isRecord(call.function) ? call.function.name : undefined;
					if (called === this.#name) {
						this.#search.add(key);
						this.removed += 1;
						return false;
					}
					if (typeof called === "string" && called) {
						this.#search.delete(key);
						this.#others.add(index);
					}
					return !this.#search.has(key);
				});
				if (kept.length !== delta.tool_calls.length) {
					changed = true;
					if (kept.length) delta.tool_calls = kept;
					else delete delta.tool_calls;
				}
			}
			if (choice.finish_reason === "tool_calls" && !this.#others.has(index) && this.removed > 0) {
				choice.finish_reason = "stop";
				changed = true;
			}
		}
		return changed;
	}
}

/** The search call of a whole answer (chat.completion body): its id and the query asked, trimmed, bounded and scrubbed. */
export function searchCallOf(body: Json, name: string, secrets: readonly string[]): { id: string; query: string } | undefined {
	const choices = Array.isArray(body.choices) ? body.choices : [];
	const first = choices.find((c) => isRecord(c) && (c.index ?? 0) === 0);
	const message = isRecord(first) && isRecord(first.message) ? first.message : {};
	const calls = Array.isArray(message.tool_calls) ? message.tool_calls : [];
	const call = calls.find((c) => toolName(c) === name);
	if (!isRecord(call) || !isRecord(call.function)) return undefined;
	const args = typeof call.function.arguments === "string" ? call.function.arguments : "";
	let query = "";
	try {
		const parsed: unknown = JSON.parse(repairArguments(args).text);
		if (isRecord(parsed) && typeof parsed[QUERY_ARG] === "string") query = parsed[QUERY_ARG];
	} catch {
		// No JSON at all: nothing to search for.
	}
	query = scrubEngineText(query.trim().slice(0, MAX_QUERY_CHARS), secrets).slice(0, MAX_QUERY_CHARS);
	// The engine's id goes back to it twice in the second call: only a short one, so the round stays within its held size.
	const ownId = typeof call.id === "string" && call.id && call.id.length <= MAX_CALL_ID_CHARS;
	return { id: ownId ? (call.id as string) : `call_${crypto.randomUUID().slice(0, 8)}`, query };
}

/**
 * The most tokens a search round adds to the second call's prompt: the assistant's call (its query
 * at most MAX_QUERY_CHARS, each escaped as JSON at most 6 characters, and the call's frame) and
 * the tool's result (a grounding text of `results` results).
 */
export function searchRoundTokenBound(results: number): number {
	return estimateTokens(MAX_QUERY_CHARS * 6 + 160) + TOKENS_PER_MESSAGE + groundingTokenBound(results);
}

/** The largest size (money/hold-bound.ts) a search round adds: as above, in UTF-8 bytes (an escape is 6 ASCII bytes). */
export function searchRoundSize(results: number): PromptSize {
	const grounding = groundingSize(results);
	return { bytes: MAX_QUERY_CHARS * 6 + 160 + grounding.bytes, images: 0, tokens: 2 * TOKENS_PER_MESSAGE };
}

/** The tool's result for the engine: the grounding text of src/search/grounding.ts, or why there is none. */
export function searchResultText(status: SearchStatus, results: SearchResult[], now: Date): string {
	if (results.length) return groundingMessage(results, now).content;
	if (status === "empty") return "The web search found nothing for this query.";
	if (status === "skipped") return "The web search needs a non-empty query; none was searched.";
	return "The web search failed; answer without it.";
}

/** The assistant's search call and the tool's result, as the second call's conversation ends. */
export function roundMessages(call: { id: string; query: string }, name: string, result: string): Json[] {
	return [
		{
			role: "assistant",
			content: null,
			tool_calls: [{ id: call.id, type: "function", function: { name, arguments: JSON.stringify({ [QUERY_ARG]: call.query }) } }],
		},
		{ role: "tool", tool_call_id: call.id, content: result },
	];
}
