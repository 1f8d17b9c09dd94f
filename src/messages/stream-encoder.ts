/**
 * The Messages lane's stream encoder: the chat reducer's chunks become Anthropic's events
 * (`message_start`, `ping`, one `content_block_start` / `content_block_delta`… /
 * `content_block_stop` per block, `message_delta` with the stop reason and the billed usage,
 * `message_stop`). An engine failure ends with an `error` event built by the one Anthropic error
 * mapping, never with a clean `message_stop`.
 */
import type { SearchRound, SearchUnderWay } from "../chat/search-tool";
import { toAnthropicErrorResponse } from "../errors";
import { randomId } from "../ids";
import type { ChatStreamReducer, EngineOutcome, ForwardedChunk } from "../stream/chat-reducer";
import { streamFailure } from "../stream/chat-sse-encoder";
import type { StreamEncoder } from "../stream/pipe-engine-stream";
import type { Source } from "../types";
import { anthropicUsage, messageId, reasoningOf, stopReasonOf, THINKING_SIGNATURE } from "./from-chat";
import { searchBlocks } from "./web-search";

type Json = Record<string, unknown>;

function isRecord(v: unknown): v is Json {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** One SSE event as Anthropic frames it: the event name, and the same name as the data's `type`. */
export function sseEvent(type: string, data: Json): string {
	return `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
}

export const PING_EVENT = sseEvent("ping", {});

export interface MessagesStreamOptions {
	/** The gateway's model id (the one that serves). */
	model: string;
	/** `message_start`'s input tokens: the prompt estimate the hold was placed on. */
	inputTokens: number;
	requestId: string;
	stopSequences?: readonly string[];
	/** Web-search sources: on `message_start`'s message, as `venym.sources`. */
	sources?: Source[];
	/** The search the model ran (chat/search-round.ts): its two blocks open the stream. */
	search?: SearchRound;
	/**
	 * A search the stream starts before it ran (chat/early-round.ts): its `server_tool_use` block
	 * opens the stream, its `web_search_tool_result` block follows once it ran.
	 */
	underWay?: SearchUnderWay;
	/** A `ping` this often while the engine is quiet (default PING_EVERY_MS). */
	pingEveryMs?: number;
}

/** Anthropic pings an idle stream about every 10 to 15 seconds; clients and proxies expect the traffic. */
export const PING_EVERY_MS = 10_000;

type Open = { kind: "thinking" } | { kind: "text" } | { kind: "tool" };

/**
 * A tool call: OpenAI's format keys a call's fragments by `index`. Its `tool_use` block opens once
 * its name is known and takes each fragment as an `input_json_delta` as it comes (the lane's live
 * repair, stream/tool-call-live-repair.ts, cuts them to what may go and ends each call before the
 * next); as in the Responses encoder, a fragment for a call whose block has closed is not relayed.
 */
interface ToolCall {
	id: string;
	name: string;
	/** Fragments before the block could open (no name yet). */
	early: string[];
	state: "waiting" | "open" | "closed";
}

export class MessagesStreamEncoder implements StreamEncoder {
	readonly #opts: MessagesStreamOptions;
	readonly #id = messageId();
	/** Index of the next content block. */
	#next = 0;
	#open: Open | null = null;
	#finish: unknown = null;
	#matched: unknown = null;
	#sawToolCall = false;
	/** The `server_tool_use` id of a search under way, until its result block went out. */
	#pendingSearch: string | undefined;
	/** Tool calls by index, in the order they began. */
	readonly #callAt = new Map<number, ToolCall>();
	/** The call whose `tool_use` block is open. */
	#openCall: ToolCall | undefined;
	#callCount = 0;
	readonly keepAlive: { everyMs: number; text: string };

	constructor(opts: MessagesStreamOptions) {
		this.#opts = opts;
		this.keepAlive = { everyMs: opts.pingEveryMs ?? PING_EVERY_MS, text: PING_EVENT };
	}

	start(): string {
		const message: Json = {
			id: this.#id,
			type: "message",
			role: "assistant",
			model: this.#opts.model,
			content: [],
			stop_reason: null,
			stop_sequence: null,
			usage: {
				input_tokens: this.#opts.inputTokens,
				output_tokens: 0,
				cache_read_input_tokens: 0,
				cache_creation_input_tokens: 0,
			},
		};
		if (this.#opts.sources?.length) message.venym = { sources: this.#opts.sources };
		return sseEvent("message_start", { message }) + PING_EVENT + this.#searchEvents();
	}

	/**
	 * The search round as Anthropic streams it: the `server_tool_use` block (its input as one
	 * `input_json_delta`), then the `web_search_tool_result` block whole.
	 */
	#searchEvents(): string {
		const underWay = this.#opts.underWay;
		if (underWay) {
			this.#pendingSearch = randomId("srvtoolu_", 12);
			const [call] = searchBlocks({ query: underWay.query, status: "ok", sources: [] }, this.#pendingSearch);
			return this.#callBlock(call) + this.#close();
		}
		if (!this.#opts.search) return "";
		const [call, result] = searchBlocks(this.#opts.search);
		return this.#callBlock(call) + this.#begin({ kind: "tool" }, { ...result }) + this.#close();
	}

	#callBlock(call: ReturnType<typeof searchBlocks>[0]): string {
		const out = this.#begin({ kind: "tool" }, { ...call, input: {} });
		return out + this.#blockDelta({ type: "input_json_delta", partial_json: JSON.stringify(call.input) });
	}

	/** A search under way once it ran: its `web_search_tool_result` block, before the second answer's blocks. */
	ready(): string {
		const searched = this.#opts.underWay?.searched;
		const id = this.#pendingSearch;
		if (!searched || id === undefined) return "";
		this.#pendingSearch = undefined;
		const [, result] = searchBlocks(searched, id);
		return this.#begin({ kind: "tool" }, { ...result }) + this.#close();
	}

	/** The search the usage reports: the one that ran, whether it was known at the start or not. */
	#search(): SearchRound | undefined {
		return this.#opts.search ?? this.#opts.underWay?.searched;
	}

	chunks(chunks: ForwardedChunk[]): string {
		let out = "";
		for (const f of chunks) {
			const choice = Array.isArray(f.chunk.choices) ? f.chunk.choices.find((c) => isRecord(c) && (c.index ?? 0) === 0) : null;
			if (!isRecord(choice)) continue;
			if (isRecord(choice.delta)) out += this.#delta(choice.delta);
			if (choice.finish_reason !== undefined && choice.finish_reason !== null) this.#finish = choice.finish_reason;
			if (choice.stop_reason !== undefined && choice.stop_reason !== null) this.#matched = choice.stop_reason;
		}
		return out;
	}

	finish(outcome: EngineOutcome, reducer: ChatStreamReducer): string {
		if (outcome.status !== "completed") {
			// A search round's second call that never answered fails with what the HTTP path gives the same cause.
			const cause = this.#opts.underWay?.failure ?? streamFailure(outcome);
			// The type the same cause gets over HTTP: an engine gone quiet is `timeout_error`, which
			// Anthropic's SDKs type for an error event too (docs/messages.md says why).
			const { body } = toAnthropicErrorResponse(cause, this.#opts.requestId);
			return sseEvent("error", { error: body.error, request_id: body.request_id });
		}
		let out = this.#openWaiting() + this.#close();
		const stop = stopReasonOf(this.#finish, this.#matched, this.#opts.stopSequences ?? [], this.#sawToolCall);
		out += sseEvent("message_delta", { delta: stop, usage: anthropicUsage(reducer.usageField(), this.#search()) });
		return out + sseEvent("message_stop", {});
	}

	#delta(delta: Json): string {
		let out = "";
		const reasoning = reasoningOf(delta);
		if (reasoning || (typeof delta.content === "string" && delta.content)) out += this.#openWaiting();
		if (reasoning) {
			if (this.#open?.kind !== "thinking")
				out += this.#begin({ kind: "thinking" }, { type: "thinking", thinking: "", signature: "" });
			out += this.#blockDelta({ type: "thinking_delta", thinking: reasoning });
		}
		if (typeof delta.content === "string" && delta.content) {
			if (this.#open?.kind !== "text") out += this.#begin({ kind: "text" }, { type: "text", text: "" });
			out += this.#blockDelta({ type: "text_delta", text: delta.content });
		}
		if (Array.isArray(delta.tool_calls)) {
			for (const call of delta.tool_calls) if (isRecord(call)) out += this.#toolCall(call);
		}
		return out;
	}

	#toolCall(call: Json): string {
		this.#sawToolCall = true;
		const toolIndex = typeof call.index === "number" ? call.index : 0;
		const fn = isRecord(call.function) ? call.function : {};
		// A call's first fragment carries its id (and name); a new id at a used index is a new call.
		const given = typeof call.id === "string" && call.id ? call.id : null;
		let tool = this.#callAt.get(toolIndex);
		if (!tool || (given !== null && given !== tool.id)) {
			tool = { id: given ?? `toolu_${this.#id.slice(4)}_${this.#callCount}`, name: "", early: [], state: "waiting" };
			this.#callCount += 1;
			this.#callAt.delete(toolIndex);
			this.#callAt.set(toolIndex, tool);
		}
		if (!tool.name && typeof fn.name === "string") tool.name = fn.name;
		const args = typeof fn.arguments === "string" ? fn.arguments : "";
		if (tool.state === "waiting") {
			if (args) tool.early.push(args);
			return tool.name ? this.#openTool(tool) : "";
		}
		if (tool.state === "closed" || !args) return "";
		return this.#blockDelta({ type: "input_json_delta", partial_json: args });
	}

	/** Opens a call's `tool_use` block, with what came before its name. */
	#openTool(tool: ToolCall): string {
		let out = this.#begin({ kind: "tool" }, { type: "tool_use", id: tool.id, name: tool.name, input: {} });
		tool.state = "open";
		this.#openCall = tool;
		if (tool.early.length) out += this.#blockDelta({ type: "input_json_delta", partial_json: tool.early.join("") });
		tool.early = [];
		return out;
	}

	/** Calls still waiting for a name when text follows or the answer ends: opened as they are, in order. */
	#openWaiting(): string {
		let out = "";
		for (const tool of this.#callAt.values()) if (tool.state === "waiting") out += this.#openTool(tool);
		return out;
	}

	#begin(open: Open, block: Json): string {
		const out = this.#close();
		this.#open = open;
		return `${out}${sseEvent("content_block_start", { index: this.#next, content_block: block })}`;
	}

	#blockDelta(delta: Json): string {
		return sseEvent("content_block_delta", { index: this.#next, delta });
	}

	/** Ends the open block (a thinking block with its signature first). */
	#close(): string {
		if (!this.#open) return "";
		let out = "";
		if (this.#open.kind === "thinking") out += this.#blockDelta({ type: "signature_delta", signature: THINKING_SIGNATURE });
		out += sseEvent("content_block_stop", { index: this.#next });
		if (this.#openCall) this.#openCall.state = "closed";
		this.#openCall = undefined;
		this.#open = null;
		this.#next += 1;
		return out;
	}
}
