/**
 * Chat Completions stream chunks (as the gateway emits them) → Responses streaming events. One item
 * is open at a time; a delta of another kind closes it first. Each item's events run added →
 * (content part added) → deltas → done(s) → item done, each with the next `sequence_number`. The
 * final response equals what `responseFromCompletion` builds from the same content (same item builders and id order).
 */
import type { SearchRound } from "../chat/search-tool";
import type { Source } from "../types";
import { searchItem } from "./hosted-search";
import type { ItemStatusValue, OutputItem, OutputMessageItem, ReasoningItemValue } from "./item-schema";
import {
	annotationsFromSources,
	messageItem,
	outputTextPart,
	reasoningItem,
	reasoningText,
	usageFromChat,
	wantsSummary,
} from "./output-items";
import { endingOf, type ResponseMeta, type ResponseObject, responseShell } from "./response-object";
import {
	isRecord,
	isSource,
	type Json,
	nonEmpty,
	type OpenItem,
	type ResponseStreamEvent,
	type ToolCallState,
	type Unnumbered,
} from "./stream-event-types";
import { closingEvents, deltaEvents, type OpeningPart, openingEvents, type SearchPart, searchEvents } from "./stream-item-events";
import { callItem, type ToolOrigin, toolOrigins } from "./tools";

export { encodeEvent, type ResponseStreamEvent } from "./stream-event-types";

export class ResponsesEventBuilder {
	readonly #meta: ResponseMeta;
	#seq = 0;
	#started = false;
	#final: ResponseObject | undefined;
	readonly #output: OutputItem[] = [];
	#open: OpenItem | undefined;
	readonly #calls = new Map<number, ToolCallState>();
	#lastCallIndex = -1;
	#usage: unknown;
	#finishReason: unknown = null;
	#sources: Source[] = [];
	/** The request asked for `reasoning.summary`: reasoning is streamed as its summary too (summary events). */
	readonly #summarize: boolean;
	/** Engine tool names that stand for a namespace's function or a custom tool (tools.ts). */
	readonly #origins: Map<string, ToolOrigin>;

	constructor(meta: ResponseMeta) {
		this.#meta = meta;
		this.#summarize = wantsSummary(meta.request);
		this.#origins = toolOrigins(meta.request.tools);
	}

	/** Responses usage from the last chat usage seen (reasoning tokens estimated from `output` when summarizing). */
	#usageOf(output: OutputItem[]) {
		return usageFromChat(this.#usage, this.#summarize ? reasoningText(output) : undefined);
	}

	/** response.created and response.in_progress. */
	start(): ResponseStreamEvent[] {
		if (this.#started) return [];
		this.#started = true;
		const out: ResponseStreamEvent[] = [];
		this.#emit(out, { type: "response.created", response: responseShell(this.#meta, "in_progress") });
		this.#emit(out, { type: "response.in_progress", response: responseShell(this.#meta, "in_progress") });
		return out;
	}

	/** One parsed chat chunk (or the gateway's `venym.sources` object). Error frames are for `fail`. */
	chunk(chunk: Record<string, unknown>): ResponseStreamEvent[] {
		if (this.#final) return [];
		const out = this.start();
		if (chunk.object === "venym.sources") {
			if (Array.isArray(chunk.sources)) this.#sources = chunk.sources.filter(isSource);
			return this.#searched(out);
		}
		// Engines may repeat cumulative usage on every chunk: the last one wins.
		if (isRecord(chunk.usage)) this.#usage = chunk.usage;
		const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
		for (const choice of choices) {
			if (!isRecord(choice) || (choice.index ?? 0) !== 0) continue;
			if (choice.finish_reason != null) this.#finishReason = choice.finish_reason;
			if (!isRecord(choice.delta)) continue;
			const delta = choice.delta;
			const reasoning = nonEmpty(delta.reasoning_content) ?? nonEmpty(delta.reasoning);
			if (reasoning) this.#text(out, "reasoning", reasoning);
			const content = nonEmpty(delta.content);
			if (content) this.#text(out, "message", content);
			if (Array.isArray(delta.tool_calls)) {
				for (const call of delta.tool_calls) if (isRecord(call)) this.#toolCall(out, call);
			}
		}
		return out;
	}

	/** The search the model called (chat/search-round.ts), first; `part` "start" while it runs (chat/early-round.ts), "end" once it ran. */
	searched(round: SearchRound, part: SearchPart = "all"): ResponseStreamEvent[] {
		if (this.#final) return [];
		this.#sources = round.sources;
		return this.#searched(this.start(), round, part);
	}

	#searched(out: ResponseStreamEvent[], round?: SearchRound, part: SearchPart = "all"): ResponseStreamEvent[] {
		const started = part === "end" ? this.#output[0] : undefined;
		const search = searchItem(this.#meta.request, () => started?.id ?? `ws_${this.#meta.ids()}`, this.#sources, round);
		if (search && (part === "end" ? started?.type === "web_search_call" : this.#output.length === 0)) {
			for (const event of searchEvents(search, 0, part)) this.#emit(out, event);
			this.#output[0] = part === "start" ? { ...search, status: "in_progress" } : search;
		}
		return out;
	}

	/** Closes what is open, then response.completed or response.incomplete with the full response. */
	finish(): ResponseStreamEvent[] {
		if (this.#final) return [];
		const out = this.start();
		// A call whose name never came still has to be reported with its arguments.
		for (const state of this.#calls.values()) if (!state.item) this.#openCall(out, state);
		const ending = endingOf(this.#finishReason);
		// An answer with nothing in it still gets its (empty) message, as a completion does.
		if (this.#output.length === 0) this.#openMessage(out);
		// What is still open is the last item: the one a length or content-filter stop cut short.
		this.#close(out, ending.status === "incomplete" ? "incomplete" : "completed");
		this.#final = {
			...responseShell(this.#meta, ending.status),
			incomplete_details: ending.incomplete_details,
			output: this.#output,
			usage: this.#usageOf(this.#output),
		};
		const type = ending.status === "completed" ? "response.completed" : "response.incomplete";
		this.#emit(out, { type, response: this.#final });
		return out;
	}

	/**
	 * The stream broke: an `error` event, then response.failed with the output so far
	 * (an unfinished item marked incomplete). `usage` (chat-shaped) overrides the last
	 * usage seen, e.g. with the gateway's estimate.
	 */
	fail(error: { code: string; message: string }, usage?: unknown): ResponseStreamEvent[] {
		if (this.#final) return [];
		const out = this.start();
		if (usage !== undefined) this.#usage = usage;
		const output = this.#snapshot("incomplete");
		this.#final = {
			...responseShell(this.#meta, "failed"),
			error: { code: error.code, message: error.message },
			output,
			usage: this.#usageOf(output),
		};
		this.#emit(out, { type: "error", code: error.code, message: error.message, param: null });
		this.#emit(out, { type: "response.failed", response: this.#final });
		return out;
	}

	/** The final response once finished or failed; before that, the response so far (in_progress). */
	response(): ResponseObject {
		if (this.#final) return this.#final;
		const output = this.#snapshot("in_progress");
		return { ...responseShell(this.#meta, "in_progress"), output, usage: this.#usageOf(output) };
	}

	#emit(out: ResponseStreamEvent[], event: Unnumbered): void {
		out.push({ ...event, sequence_number: this.#seq++ } as ResponseStreamEvent);
	}

	/** Output items so far, with the open one as it stands. */
	#snapshot(openStatus: ItemStatusValue): OutputItem[] {
		const output = [...this.#output];
		const open = this.#open;
		if (open) output[open.outputIndex] = this.#itemOf(open, open.pieces.join(""), openStatus);
		return output;
	}

	#itemOf(open: OpenItem, text: string, status: ItemStatusValue): OutputItem {
		switch (open.kind) {
			case "reasoning":
				return reasoningItem(open.id, text, this.#summarize);
			case "message":
				return messageItem(open.id, text, annotationsFromSources(text, this.#sources), status);
			case "function_call":
				return callItem(this.#origins, open.id, open.callId, open.name, text, status);
		}
	}

	#begin(kind: OpenItem["kind"], id: string, callId = "", name = ""): OpenItem {
		const open: OpenItem = { kind, outputIndex: this.#output.length, id, pieces: [], callId, name };
		this.#open = open;
		// A placeholder keeps the index taken; #close puts the finished item in its place.
		this.#output.push(this.#itemOf(open, "", "in_progress"));
		return open;
	}

	#openMessage(out: ResponseStreamEvent[]): OpenItem {
		const open = this.#begin("message", `msg_${this.#meta.ids()}`);
		const item: OutputMessageItem = { id: open.id, type: "message", status: "in_progress", content: [], role: "assistant" };
		this.#announce(out, open, item, outputTextPart("", []));
		return open;
	}

	#openReasoning(out: ResponseStreamEvent[]): OpenItem {
		const open = this.#begin("reasoning", `rs_${this.#meta.ids()}`);
		const item: ReasoningItemValue = { id: open.id, type: "reasoning", summary: [], content: [] };
		// The SDK accumulates reasoning_text deltas into a content part, which has to exist first.
		this.#announce(out, open, item, { type: "reasoning_text", text: "" });
		const at = { item_id: open.id, output_index: open.outputIndex };
		const part = { type: "summary_text" as const, text: "" };
		if (this.#summarize) this.#emit(out, { type: "response.reasoning_summary_part.added", ...at, summary_index: 0, part });
		return open;
	}

	/** output_item.added, then content_part.added for the item's one content part. */
	#announce(out: ResponseStreamEvent[], open: OpenItem, item: OutputItem, part: OpeningPart): void {
		for (const event of openingEvents(item, { item_id: open.id, output_index: open.outputIndex }, part)) this.#emit(out, event);
	}

	#openCall(out: ResponseStreamEvent[], state: ToolCallState): void {
		this.#close(out, "completed");
		const id = `fc_${this.#meta.ids()}`;
		const callId = state.callId ?? `call_${this.#meta.ids()}`;
		const open = this.#begin("function_call", id, callId, state.name ?? "");
		state.item = open;
		this.#emit(out, {
			type: "response.output_item.added",
			output_index: open.outputIndex,
			item: callItem(this.#origins, id, callId, open.name, "", "in_progress"),
		});
		if (state.early.length) this.#delta(out, open, state.early.join(""));
		state.early = [];
	}

	#text(out: ResponseStreamEvent[], kind: "reasoning" | "message", text: string): void {
		let open = this.#open;
		if (open?.kind !== kind) {
			this.#close(out, "completed");
			open = kind === "message" ? this.#openMessage(out) : this.#openReasoning(out);
		}
		this.#delta(out, open, text);
	}

	#delta(out: ResponseStreamEvent[], open: OpenItem, delta: string): void {
		open.pieces.push(delta);
		const at = { item_id: open.id, output_index: open.outputIndex };
		// A custom tool's input is read from the whole arguments: it goes out when the call closes.
		const custom = open.kind === "function_call" && this.#origins.get(open.name)?.kind === "custom";
		for (const event of deltaEvents(open.kind, at, delta, this.#summarize, custom)) this.#emit(out, event);
	}

	#toolCall(out: ResponseStreamEvent[], call: Json): void {
		// Engines that send whole calls may leave out `index`: a new id then means a new call.
		const index =
			typeof call.index === "number"
				? call.index
				: nonEmpty(call.id)
					? this.#lastCallIndex + 1
					: Math.max(this.#lastCallIndex, 0);
		this.#lastCallIndex = Math.max(this.#lastCallIndex, index);
		let state = this.#calls.get(index);
		if (!state) {
			state = { early: [] };
			this.#calls.set(index, state);
		}
		const fn = isRecord(call.function) ? call.function : {};
		state.callId ??= nonEmpty(call.id);
		state.name ??= nonEmpty(fn.name);
		const args = typeof fn.arguments === "string" ? fn.arguments : "";

		if (!state.item) {
			if (args) state.early.push(args);
			if (state.name) this.#openCall(out, state);
			return;
		}
		if (!args) return;
		if (this.#open === state.item) {
			this.#delta(out, state.item, args);
			return;
		}
		// A fragment for a call already closed (an engine interleaving calls): its done
		// events are out, so it can only be kept in the stored item.
		const item = this.#output[state.item.outputIndex];
		if (item?.type === "function_call") item.arguments += args;
	}

	#close(out: ResponseStreamEvent[], status: ItemStatusValue): void {
		const open = this.#open;
		if (!open) return;
		this.#open = undefined;
		const text = open.pieces.join("");
		const item = this.#itemOf(open, text, status);
		this.#output[open.outputIndex] = item;
		for (const event of closingEvents(item, { item_id: open.id, output_index: open.outputIndex }, text, this.#summarize))
			this.#emit(out, event);
		this.#emit(out, { type: "response.output_item.done", output_index: open.outputIndex, item });
	}
}
