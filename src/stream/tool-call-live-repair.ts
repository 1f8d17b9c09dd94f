/**
 * The Messages lane's tool calls as Anthropic streams them: one `tool_use` block after another,
 * each call's input as the engine writes it (Claude Code shows it `input_json_delta` by
 * `input_json_delta`), repaired without holding the call back.
 *
 * A call's argument pieces pass as they come while the text so far can still become a JSON object
 * (json-prefix.ts), each cut at its last safe point; what follows a break is held. When the call
 * ends (the choice finishes, text or reasoning follows, the next call begins once this one's object
 * is whole, or the stream ends) its tail goes out: the rest of the engine's text when that is
 * valid, else the rest of its repair (tool-call-repair.ts) when the repair keeps what was sent, else
 * what closes the part already sent. What the client joins is a JSON object whenever a repair can
 * make one, as with the holding repair. Without repair (`tool_call_repair: false`) the tail is the
 * engine's own text.
 *
 * OpenAI's format keys fragments by `index`, and an engine may interleave calls (every header
 * first, then the arguments): a call that begins while another streams is held, header and all,
 * and goes out whole when the streaming one ends.
 */
import type { ForwardedChunk } from "./chat-reducer";
import { JsonObjectPrefix } from "./json-prefix";
import { isEmptyChoice, repairArguments } from "./tool-call-repair";

type Json = Record<string, unknown>;

function isRecord(v: unknown): v is Json {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

function isObjectJson(text: string): boolean {
	try {
		return isRecord(JSON.parse(text));
	} catch {
		return false;
	}
}

interface LiveCall {
	at: number;
	prefix: JsonObjectPrefix;
	/** Every piece received, joined only when the call ends. */
	parts: string[];
	/** Characters sent. */
	sent: number;
	/** The received text after `sent`, while the prefix is valid (then only `parts` grows). */
	unsent: string;
}

/** A call held whole: its header fields (id, type, name) and its argument pieces. */
interface HeldCall {
	at: number;
	head: Json;
	name: unknown;
	parts: string[];
}

interface ChoiceState {
	live: LiveCall | undefined;
	held: HeldCall[];
	ended: Set<number>;
}

export class LiveToolCallRepair {
	readonly #repairs: boolean;
	readonly #choices = new Map<number, ChoiceState>();
	#last: Json | undefined;
	/** Tool calls whose arguments were changed. */
	repaired = 0;

	/** `repairs` false: the calls only go out one after another, their text as the engine wrote it. */
	constructor(repairs = true) {
		this.#repairs = repairs;
	}

	push(chunks: readonly ForwardedChunk[]): ForwardedChunk[] {
		const out: ForwardedChunk[] = [];
		for (const f of chunks) {
			this.#last = f.chunk;
			const choices = Array.isArray(f.chunk.choices) ? f.chunk.choices : [];
			let changed = false;
			for (const choice of choices) {
				if (!isRecord(choice)) continue;
				const index = typeof choice.index === "number" ? choice.index : 0;
				const state = this.#choices.get(index);
				const open = state !== undefined && (state.live !== undefined || state.held.length > 0);
				const finished = choice.finish_reason !== undefined && choice.finish_reason !== null;
				if (!isRecord(choice.delta)) {
					if (!(open && finished)) continue;
					choice.delta = {};
				}
				const delta = choice.delta as Json;
				// Text or reasoning after the calls: they have ended, and their tails go before it.
				if (open && (hasText(delta.content) || hasText(delta.reasoning_content) || hasText(delta.reasoning))) {
					const tails = this.#endAll(state);
					if (tails.length) out.push(tailChunk(index, tails, f.chunk));
				}
				if (!Array.isArray(delta.tool_calls) && !(finished && open)) continue;
				changed = this.#rewrite(index, delta, finished) || changed;
			}
			if (!changed) {
				out.push(f);
				continue;
			}
			f.chunk.choices = choices.filter((c) => !isRecord(c) || !isEmptyChoice(c));
			if ((f.chunk.choices as unknown[]).length || f.chunk.usage !== undefined) out.push({ chunk: f.chunk, data: null });
		}
		return out;
	}

	/** What is still open when the engine's side ends (a stream cut before its finish). */
	flush(): ForwardedChunk[] {
		const out: ForwardedChunk[] = [];
		for (const [index, state] of this.#choices) {
			const tails = this.#endAll(state);
			if (tails.length) out.push(tailChunk(index, tails, this.#last ?? {}));
		}
		return out;
	}

	/** The delta's calls cut to what may go now; true (the chunk changed). */
	#rewrite(index: number, delta: Json, finished: boolean): boolean {
		let state = this.#choices.get(index);
		if (!state) {
			state = { live: undefined, held: [], ended: new Set() };
			this.#choices.set(index, state);
		}
		const calls: unknown[] = [];
		for (const call of Array.isArray(delta.tool_calls) ? delta.tool_calls : []) {
			if (!isRecord(call)) {
				calls.push(call);
				continue;
			}
			const at = typeof call.index === "number" ? call.index : 0;
			const fn = isRecord(call.function) ? call.function : {};
			const args = typeof fn.arguments === "string" ? fn.arguments : "";
			if (state.ended.has(at)) continue;
			const held = state.held.find((h) => h.at === at);
			if (held) {
				held.name ??= fn.name;
				if (args) held.parts.push(args);
				continue;
			}
			if (state.live && state.live.at !== at) {
				if (!state.live.prefix.complete || state.held.length > 0) {
					const { function: _, ...head } = call;
					state.held.push({ at, head, name: fn.name, parts: args ? [args] : [] });
					continue;
				}
				calls.push(...this.#endAll(state));
			}
			state.live ??= { at, prefix: new JsonObjectPrefix(), parts: [], sent: 0, unsent: "" };
			if (typeof fn.arguments === "string") {
				const piece = this.#take(state.live, fn.arguments);
				if (piece) fn.arguments = piece;
				else delete fn.arguments;
			}
			// A piece that only carried arguments, all held, has nothing left to send.
			if (Object.keys(fn).length || Object.keys(call).some((k) => k !== "index" && k !== "function")) calls.push(call);
		}
		if (finished) calls.push(...this.#endAll(state));
		if (calls.length) delta.tool_calls = calls;
		else delete delta.tool_calls;
		return true;
	}

	/** What of `piece` may go now. */
	#take(call: LiveCall, piece: string): string {
		call.parts.push(piece);
		if (!call.prefix.valid) return "";
		call.unsent += piece;
		const safe = call.prefix.feed(piece);
		let out = "";
		if (safe > call.sent) {
			out = call.unsent.slice(0, safe - call.sent);
			call.unsent = call.unsent.slice(safe - call.sent);
			call.sent = safe;
		}
		if (!call.prefix.valid) call.unsent = "";
		return out;
	}

	/** Ends the streaming call and the held ones: the tool_calls entries that finish them, in order. */
	#endAll(state: ChoiceState): Json[] {
		const out: Json[] = [];
		const call = state.live;
		if (call) {
			state.live = undefined;
			state.ended.add(call.at);
			const tail = this.#tail(call);
			if (tail) out.push({ index: call.at, function: { arguments: tail } });
		}
		for (const held of state.held) {
			state.ended.add(held.at);
			const text = this.#final(held.parts.join(""));
			out.push({
				...held.head,
				index: held.at,
				function: { ...(held.name !== undefined ? { name: held.name } : {}), arguments: text },
			});
		}
		state.held = [];
		return out;
	}

	/** What completes a streamed call. */
	#tail(call: LiveCall): string {
		const whole = call.parts.join("");
		const sent = whole.slice(0, call.sent);
		if (!this.#repairs || isObjectJson(whole)) return whole.slice(call.sent);
		const { text } = repairArguments(whole);
		const tail = text.startsWith(sent) ? text.slice(call.sent) : closeSent(sent);
		if (sent + tail !== whole) this.repaired += 1;
		return tail;
	}

	/** A held call's arguments, repaired when the lane repairs. */
	#final(whole: string): string {
		if (!this.#repairs) return whole;
		const { text, repaired } = repairArguments(whole);
		if (repaired) this.repaired += 1;
		return text;
	}
}

/** What closes a text that is a valid prefix of an object. */
function closeSent(sent: string): string {
	const prefix = new JsonObjectPrefix();
	prefix.feed(sent);
	return prefix.closers();
}

const hasText = (v: unknown) => typeof v === "string" && v !== "";

function tailChunk(index: number, calls: Json[], like: Json): ForwardedChunk {
	const chunk: Json = {};
	for (const k of ["id", "object", "created", "model", "system_fingerprint"]) {
		if (like[k] !== undefined) chunk[k] = like[k];
	}
	chunk.choices = [{ index, delta: { tool_calls: calls }, logprobs: null, finish_reason: null }];
	return { chunk, data: null };
}
