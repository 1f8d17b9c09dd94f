/**
 * The chat stream's rules over typed engine events, with no streams and no I/O: which chunks
 * go to the client, the usage that is held back for the one final usage chunk, and how the
 * stream ended (`StreamEnd`: status, usage, estimated flag, error). Unit-testable with arrays.
 */

import { estimateTokens } from "../estimate";
import type { SettleStatus, Usage } from "../types";
import type { EngineEvent, StreamError } from "./engine-events";
import { boundedUsage, sumUsage, tokenCount, type UsageBounds } from "./usage-bounds";

type Json = Record<string, unknown>;

export interface StreamEnd {
	status: Extract<SettleStatus, "completed" | "engine_error" | "client_disconnected">;
	usage: Usage;
	estimated: boolean;
	/** True once a chunk with content, reasoning or tool calls was sent to the client. */
	contentForwarded: boolean;
	/** The engine reported usage outside the bounds: billed at the bound, or the estimate when not a count. */
	usageOutOfBounds?: boolean;
	/** The engine went quiet for longer than the idle timeout. */
	idleTimedOut?: boolean;
	/** The client stopped reading for longer than `client_idle_timeout_ms` (status client_disconnected). */
	clientIdleTimedOut?: boolean;
	error?: StreamError;
	/** The prefill the engine reported (llama.cpp's `timings.prompt_n` tokens in `prompt_ms`): the node's prefill rate is learned from it. */
	prefill?: { tokens: number; ms: number };
}

/** A chunk to forward. `data` is the engine's exact JSON text when the chunk was forwarded unchanged (but for its model). */
export interface ForwardedChunk {
	chunk: Json;
	data: string | null;
}

/** How the engine's side of the stream ended, before the client's fate is known. */
export type EngineOutcome = { status: "completed" } | { status: "engine_error"; error: StreamError; idle: boolean };

export interface ChatReducerOptions {
	/** Used when the engine sends no usage. */
	promptTokensEstimate: number;
	/** Engine usage is billed within these (see usage-bounds.ts). */
	bounds?: UsageBounds;
	/** Usage of earlier engine calls of the request (a search round's first call): shown in the usage chunk, not in `end`. */
	earlierUsage?: Usage;
}

/** Choice indexes counted apart; an engine's more (max_n is far lower) share one count. */
const MAX_TRACKED_CHOICES = 256;

const UNBOUNDED: UsageBounds = { maxPromptTokens: Number.MAX_SAFE_INTEGER, maxCompletionTokens: Number.MAX_SAFE_INTEGER };

function isRecord(v: unknown): v is Json {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

function stringLength(v: unknown): number {
	return typeof v === "string" ? v.length : 0;
}

/** Generated characters in a delta: the basis of the completion estimate. */
function deltaChars(delta: Json): number {
	let chars =
		stringLength(delta.content) +
		stringLength(delta.reasoning_content) +
		stringLength(delta.reasoning) +
		stringLength(delta.refusal);
	if (Array.isArray(delta.tool_calls)) {
		for (const call of delta.tool_calls) {
			if (isRecord(call) && isRecord(call.function)) {
				chars += stringLength(call.function.name) + stringLength(call.function.arguments);
			}
		}
	}
	return chars;
}

export class ChatStreamReducer {
	readonly #opts: ChatReducerOptions;
	#outcome: EngineOutcome | undefined;
	#lastUsage: Json | undefined;
	/** llama.cpp's speed figures beside usage: its `cache_n` counts the cached prompt tokens. */
	#timings: Json | undefined;
	#sawFinish = false;
	#forwardedChars = 0;
	/** The deltas that carried each choice's text, per choice index (bounded: see #countChoice). */
	readonly #choicePieces = new Map<number, number>();
	/** The choice that finished last, and llama.cpp's usage reports per finished choice (see #reported). */
	#lastFinished: number | undefined;
	readonly #choiceUsage = new Map<number, Json>();
	#contentForwarded = false;
	/** The stream's id and created time as the engine last gave them, for the usage chunk. */
	id: string | undefined;
	created: number | undefined;

	constructor(opts: ChatReducerOptions) {
		this.#opts = opts;
	}

	/** Set once the engine's side has ended (done, error, or closed). */
	get outcome(): EngineOutcome | undefined {
		return this.#outcome;
	}

	/** The chunks this event forwards (none after the engine's side has ended). */
	push(e: EngineEvent): ForwardedChunk | null {
		if (this.#outcome) return null;
		switch (e.type) {
			case "chunk":
				return this.#chunk(e.chunk, e.data);
			case "done":
				this.#outcome = { status: "completed" };
				return null;
			case "error":
				this.#outcome = { status: "engine_error", error: e.error, idle: e.idle === true };
				return null;
			case "closed":
				// A finish_reason means the answer is whole even when [DONE] never came.
				this.#outcome = this.#sawFinish
					? { status: "completed" }
					: {
							status: "engine_error",
							error: { message: "upstream closed the stream early", type: "server_error", code: null },
							idle: false,
						};
				return null;
		}
	}

	/** The engine's last usage within bounds, with whatever it lacked (or got wrong) estimated. */
	usage(): { usage: Usage; estimated: boolean; outOfBounds: boolean } {
		const delivered = this.#contentForwarded ? 1 : 0;
		return boundedUsage(
			this.#reported(),
			this.#opts.bounds ?? UNBOUNDED,
			{
				promptTokens: this.#opts.promptTokensEstimate,
				completionTokens: estimateTokens(this.#forwardedChars),
				minPromptTokens: delivered,
				minCompletionTokens: Math.max(delivered, this.#choicesFloor()),
			},
			this.#timings,
		);
	}

	/**
	 * The engine's usage. llama.cpp streams `n` choices (or a legacy prompt array) as separate tasks,
	 * each ending with its own usage chunk (with `timings`) for that choice alone: those are added
	 * up, completions always, prompts when they differ (a prompt array; one prompt counts once).
	 */
	#reported(): Json | undefined {
		if (this.#choiceUsage.size < 2) return this.#lastUsage;
		let prompt = 0;
		let completion = 0;
		let cached = 0;
		const prompts = new Set<unknown>();
		for (const u of this.#choiceUsage.values()) {
			const p = tokenCount(u.prompt_tokens);
			const c = tokenCount(u.completion_tokens);
			if (p === undefined || c === undefined) return this.#lastUsage;
			prompts.add(p);
			prompt += p;
			completion += c;
			const details = u.prompt_tokens_details;
			cached += isRecord(details) ? (tokenCount(details.cached_tokens) ?? 0) : 0;
		}
		if (prompts.size === 1) {
			const first = this.#choiceUsage.values().next().value as Json;
			prompt = first.prompt_tokens as number;
			const details = first.prompt_tokens_details;
			cached = isRecord(details) ? (tokenCount(details.cached_tokens) ?? 0) : 0;
		}
		return {
			prompt_tokens: prompt,
			completion_tokens: completion,
			total_tokens: prompt + completion,
			prompt_tokens_details: { cached_tokens: cached },
		};
	}

	/**
	 * The least an honest engine can have generated across the choices it relayed, when there were
	 * several: the deltas that carried each choice's text, summed (an engine streams at most a token
	 * a delta; llama.cpp one each, so its CJK text counts a token a character). An engine that counts
	 * one choice of several (llama.cpp with `n`, a legacy prompt array) is short of it; an honest one
	 * never is (characters / 4 could be: one long word is one token). One choice: 0, its count stands.
	 */
	#choicesFloor(): number {
		if (this.#choicePieces.size < 2) return 0;
		let tokens = 0;
		for (const pieces of this.#choicePieces.values()) tokens += pieces;
		return tokens;
	}

	/** An engine names the indexes: past MAX_TRACKED_CHOICES they share the last one's count. */
	#countChoice(index: unknown, chars: number): void {
		if (chars === 0) return;
		let i = typeof index === "number" && Number.isSafeInteger(index) ? index : 0;
		if (!this.#choicePieces.has(i) && this.#choicePieces.size >= MAX_TRACKED_CHOICES) i = -1;
		this.#choicePieces.set(i, (this.#choicePieces.get(i) ?? 0) + 1);
	}

	/**
	 * The usage chunk's `usage`: the engine's extra fields (…_details) kept, the billed counts on
	 * top, and the billed cached tokens in `prompt_tokens_details.cached_tokens` (OpenAI's place,
	 * which the Responses and Messages encoders read too).
	 */
	usageField(): Json {
		const own = this.usage().usage;
		const { cached_tokens: cached = 0, ...counts } = this.#opts.earlierUsage ? sumUsage(this.#opts.earlierUsage, own) : own;
		const out: Json = { ...this.#lastUsage, ...counts };
		const details = this.#lastUsage?.prompt_tokens_details;
		if (isRecord(details) || cached > 0)
			out.prompt_tokens_details = { ...(isRecord(details) ? details : {}), cached_tokens: cached };
		return out;
	}

	/** The end to settle: the engine's outcome, or the client's departure when it left first. */
	end(status: StreamEnd["status"], error?: StreamError, idle = false): StreamEnd {
		const { usage, estimated, outOfBounds } = this.usage();
		const end: StreamEnd = { status, usage, estimated, contentForwarded: this.#contentForwarded };
		if (outOfBounds) end.usageOutOfBounds = true;
		if (idle) end.idleTimedOut = true;
		if (error) end.error = error;
		const t = this.#timings;
		if (t && typeof t.prompt_n === "number" && typeof t.prompt_ms === "number") {
			end.prefill = { tokens: t.prompt_n, ms: t.prompt_ms };
		}
		return end;
	}

	#chunk(chunk: Json, data: string): ForwardedChunk | null {
		if (typeof chunk.id === "string") this.id = chunk.id;
		if (typeof chunk.created === "number") this.created = chunk.created;
		const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
		for (const choice of choices) {
			if (!isRecord(choice)) continue;
			if (choice.finish_reason !== undefined && choice.finish_reason !== null) {
				this.#sawFinish = true;
				if (typeof choice.index === "number") this.#lastFinished = choice.index;
			}
			// Legacy completions stream `text`, chat streams `delta`.
			if (typeof choice.text === "string" && choice.text.length > 0) {
				this.#forwardedChars += choice.text.length;
				this.#countChoice(choice.index, choice.text.length);
				this.#contentForwarded = true;
			}
			if (!isRecord(choice.delta)) continue;
			const chars = deltaChars(choice.delta);
			this.#forwardedChars += chars;
			this.#countChoice(choice.index, chars);
			const tools = choice.delta.tool_calls;
			if (chars > 0 || (Array.isArray(tools) && tools.length > 0)) this.#contentForwarded = true;
		}
		if (isRecord(chunk.timings)) this.#timings = chunk.timings;
		if (!isRecord(chunk.usage)) return { chunk, data };
		// Engines may repeat cumulative usage on every chunk: the last one wins, never a sum.
		this.#lastUsage = chunk.usage;
		const finished = this.#lastFinished;
		if (choices.length === 0 && isRecord(chunk.timings) && finished !== undefined) {
			if (this.#choiceUsage.has(finished) || this.#choiceUsage.size < MAX_TRACKED_CHOICES)
				this.#choiceUsage.set(finished, chunk.usage);
		}
		// The usage-only chunk is held: exactly one goes out, just before [DONE].
		if (choices.length === 0) return null;
		delete chunk.usage;
		return { chunk, data: null };
	}
}
