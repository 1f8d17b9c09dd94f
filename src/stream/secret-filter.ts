/**
 * Node secrets out of a relayed engine stream. An engine that echoes its request can put the
 * `Authorization` the gateway sent into its text, split over chunks, so each text field of each
 * choice (content, reasoning, refusal, a tool call's arguments, legacy text, logprobs' tokens; a
 * call's id and name come whole and are scrubbed as they are) keeps back the tail that could
 * start a secret (usually nothing: only a suffix matching a secret's beginning), prepends it to
 * the field's next piece, and gives it up with the choice's finish chunk or the stream's end. An
 * encoder wrapper (`withSecretsRedacted`): every encoder gets it; with no node secret it is absent.
 */
import { decodeEscapes, escapesMatter, MAX_ESCAPE_CHARS, redactForms, secretForms } from "../redact";
import type { ChatStreamReducer, EngineOutcome, ForwardedChunk } from "./chat-reducer";
import type { StreamEncoder } from "./pipe-engine-stream";

type Json = Record<string, unknown>;

/** Delta fields whose text is relayed (and so scrubbed), and chat logprobs' lists of chosen tokens. */
const DELTA_FIELDS = ["content", "reasoning_content", "reasoning", "refusal"] as const;
const CHAT_LOGPROBS = ["content", "refusal"] as const;

/** One held-back tail: where it goes back (choice, field or tool call) and the text. */
interface Held {
	choice: number;
	/** `text` (legacy), a delta field, or `tool` (a tool call's arguments). */
	field: string;
	tool: number;
	text: string;
}

function isRecord(v: unknown): v is Json {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

export class StreamSecretFilter {
	readonly #forms: string[];
	/** The forms by their first character: a chunk's tail is compared only where one starts. */
	readonly #byFirst = new Map<number, string[]>();
	/** Whether a UTF-16 unit starts some form: one array read per tail character. */
	readonly #starts = new Uint8Array(65536);
	readonly #longest: number;
	readonly #held = new Map<string, Held>();

	constructor(forms: string[]) {
		this.#forms = forms;
		let longest = 0;
		for (const form of forms) {
			const first = form.charCodeAt(0);
			this.#starts[first] = 1;
			const list = this.#byFirst.get(first);
			if (list) list.push(form);
			else this.#byFirst.set(first, [form]);
			longest = Math.max(longest, form.length);
		}
		this.#longest = longest;
	}

	/** The chunk to forward: its text fields scrubbed, minus what is held back (re-serialised only when changed). */
	chunk(f: ForwardedChunk): ForwardedChunk {
		const choices = f.chunk.choices;
		if (!Array.isArray(choices)) return f;
		let changed = false;
		for (const choice of choices) {
			if (!isRecord(choice)) continue;
			const index = typeof choice.index === "number" ? choice.index : 0;
			if (typeof choice.text === "string") {
				const text = this.#pass(index, "text", 0, choice.text);
				if (text !== choice.text) {
					choice.text = text;
					changed = true;
				}
			}
			const delta = choice.delta;
			if (isRecord(delta)) {
				for (const field of DELTA_FIELDS) {
					const value = delta[field];
					if (typeof value !== "string") continue;
					const text = this.#pass(index, field, 0, value);
					if (text !== value) {
						delta[field] = text;
						changed = true;
					}
				}
				if (Array.isArray(delta.tool_calls)) {
					delta.tool_calls.forEach((call, position) => {
						// A call's id and name come whole in one chunk: scrubbed as they are.
						if (isRecord(call)) changed = this.#scrubWhole(call, "id") || changed;
						if (isRecord(call) && isRecord(call.function)) changed = this.#scrubWhole(call.function, "name") || changed;
						if (!isRecord(call) || !isRecord(call.function) || typeof call.function.arguments !== "string") return;
						const tool = typeof call.index === "number" ? call.index : position;
						const text = this.#pass(index, "tool", tool, call.function.arguments);
						if (text !== call.function.arguments) {
							call.function.arguments = text;
							changed = true;
						}
					});
				}
			}
			if (isRecord(choice.logprobs)) changed = this.#logprobs(index, choice.logprobs) || changed;
			// The choice is finished: what it held goes out with its last chunk.
			if (choice.finish_reason !== undefined && choice.finish_reason !== null && this.#held.size) {
				changed = this.#giveBack(choice, (h) => h.choice === index) || changed;
			}
		}
		return changed ? { chunk: f.chunk, data: null } : f;
	}

	/** A chunk carrying whatever is still held (the stream ended without finish chunks), or null. */
	rest(reducer: ChatStreamReducer): ForwardedChunk | null {
		if (this.#held.size === 0) return null;
		const byChoice = new Map<number, Json>();
		let legacy = false;
		for (const h of this.#held.values()) {
			if (!byChoice.has(h.choice)) byChoice.set(h.choice, { index: h.choice, finish_reason: null });
			legacy ||= h.field === "text" || h.field === "logprob.tokens";
		}
		for (const choice of byChoice.values()) this.#giveBack(choice, (h) => h.choice === choice.index);
		const chunk: Json = {
			id: reducer.id,
			object: legacy ? "text_completion" : "chat.completion.chunk",
			created: reducer.created,
			model: "",
			choices: [...byChoice.values()],
		};
		return { chunk, data: null };
	}

	/**
	 * Logprobs spell the same text token by token: the chosen tokens (chat's `content` and
	 * `refusal` entries, legacy `tokens`) are scrubbed as one more text field each (a token may
	 * come out shortened while the tail of a possible key is held, and then loses its `bytes`);
	 * each alternative (`top_logprobs`: chat's entries, legacy's keys) is scrubbed whole. A `bytes`
	 * array is dropped (null) whenever its token changed or its own bytes decode to a key.
	 */
	#logprobs(index: number, logprobs: Json): boolean {
		let changed = false;
		const entry = (e: Json, field: string | null): void => {
			if (typeof e.token !== "string") return;
			const text = field ? this.#pass(index, field, 0, e.token) : redactForms(e.token, this.#forms);
			if (text !== e.token || (Array.isArray(e.bytes) && this.#spells(e.bytes))) {
				e.token = text;
				e.bytes = null;
				changed = true;
			}
		};
		for (const field of CHAT_LOGPROBS) {
			const list = logprobs[field];
			if (!Array.isArray(list)) continue;
			for (const e of list) {
				if (!isRecord(e)) continue;
				entry(e, `logprob.${field}`);
				if (Array.isArray(e.top_logprobs)) for (const alt of e.top_logprobs) if (isRecord(alt)) entry(alt, null);
			}
		}
		const { tokens, top_logprobs: tops } = logprobs;
		if (Array.isArray(tokens)) {
			tokens.forEach((token, i) => {
				if (typeof token !== "string") return;
				const text = this.#pass(index, "logprob.tokens", 0, token);
				if (text !== token) [tokens[i], changed] = [text, true];
			});
		}
		(Array.isArray(tops) ? tops : []).forEach((top: unknown, i: number, list: unknown[]) => {
			if (!isRecord(top) || Object.keys(top).every((k) => redactForms(k, this.#forms) === k)) return;
			list[i] = Object.fromEntries(Object.entries(top).map(([k, v]) => [redactForms(k, this.#forms), v]));
			changed = true;
		});
		return changed;
	}

	/** Whether a token's `bytes` decode to text holding a key (an engine's bytes need not match its token). */
	#spells(bytes: unknown[]): boolean {
		if (!bytes.every((b) => typeof b === "number")) return true;
		const text = new TextDecoder().decode(new Uint8Array(bytes as number[]));
		return redactForms(text, this.#forms) !== text;
	}

	/** `obj[field]` with every secret form replaced, when it is a string; true when it changed. */
	#scrubWhole(obj: Json, field: string): boolean {
		const value = obj[field];
		if (typeof value !== "string") return false;
		const text = redactForms(value, this.#forms);
		if (text === value) return false;
		obj[field] = text;
		return true;
	}

	/** `text` scrubbed with the field's held tail before it, less the new tail it keeps back. */
	#pass(choice: number, field: string, tool: number, text: string): string {
		const key = `${choice}\n${field}\n${tool}`;
		const held = this.#held.get(key);
		const whole = redactForms(held ? held.text + text : text, this.#forms);
		const cut = this.#holdFrom(whole);
		if (cut < whole.length) this.#held.set(key, { choice, field, tool, text: whole.slice(cut) });
		else if (held) this.#held.delete(key);
		return cut < whole.length ? whole.slice(0, cut) : whole;
	}

	/**
	 * Where the tail that could begin a secret starts (`text.length`: nothing to hold), as written
	 * and as the client reads it after decoding JSON escapes: the earliest of an unfinished escape
	 * (`\u00`, whose `73` may come next) and a form's proper prefix ending the text, either view.
	 * Without a backslash, or with escapes that decode to nothing a form has, both views agree
	 * and only the last (longest form − 1) characters are looked at; otherwise only the last
	 * (longest − 1) decoded units, at most six characters each, are decoded. The cut falls where
	 * a unit starts, never inside an escape.
	 */
	#holdFrom(text: string): number {
		const cut = this.#prefixFrom(text);
		if (!text.includes("\\") || !escapesMatter(text, this.#forms)) return cut;
		const window = text.length - MAX_ESCAPE_CHARS * this.#longest;
		const d = decodeEscapes(text, Math.max(0, window));
		const unit = this.#prefixFrom(d.text);
		let at = Math.min(cut, d.end, unit < d.text.length ? (d.starts[unit] as number) : text.length);
		if (at < d.end) {
			// A cut inside an escape moves back to its backslash: the held text starts a unit.
			let j = d.starts.length - 1;
			while (j > 0 && (d.starts[j] as number) > at) j--;
			at = Math.min(at, d.starts[j] ?? at);
		}
		return at;
	}

	/** The earliest of the last (longest form − 1) positions where a form's proper prefix ends `text`. */
	#prefixFrom(text: string): number {
		for (let i = Math.max(0, text.length - this.#longest + 1); i < text.length; i++) {
			const first = text.charCodeAt(i);
			if (this.#starts[first] === 0) continue;
			const forms = this.#byFirst.get(first) as string[];
			const tail = text.slice(i);
			for (const form of forms) if (form.length > tail.length && form.startsWith(tail)) return i;
		}
		return text.length;
	}

	/** Appends the held tails that `belongs` picks to their fields of `choice`; true when any did. */
	#giveBack(choice: Json, belongs: (h: Held) => boolean): boolean {
		let any = false;
		for (const [key, h] of this.#held) {
			if (!belongs(h)) continue;
			this.#held.delete(key);
			any = true;
			if (h.field === "text") {
				choice.text = (typeof choice.text === "string" ? choice.text : "") + h.text;
				continue;
			}
			if (h.field.startsWith("logprob.")) {
				// The held end of the last token goes out as a token of its own.
				const logprobs: Json = isRecord(choice.logprobs) ? choice.logprobs : {};
				choice.logprobs = logprobs;
				const list = h.field.slice("logprob.".length);
				const push = (name: string, v: unknown) => {
					if (!Array.isArray(logprobs[name])) logprobs[name] = [];
					(logprobs[name] as unknown[]).push(v);
				};
				if (list !== "tokens") push(list, { token: h.text, logprob: 0, bytes: null, top_logprobs: [] });
				else
					for (const [name, v] of [
						["tokens", h.text],
						["token_logprobs", 0],
						["top_logprobs", null],
						["text_offset", null],
					] as const)
						push(name, v);
				continue;
			}
			const delta: Json = isRecord(choice.delta) ? choice.delta : {};
			choice.delta = delta;
			if (h.field !== "tool") {
				delta[h.field] = (typeof delta[h.field] === "string" ? delta[h.field] : "") + h.text;
				continue;
			}
			const calls: unknown[] = Array.isArray(delta.tool_calls) ? delta.tool_calls : [];
			delta.tool_calls = calls;
			const call = calls.find((c) => isRecord(c) && c.index === h.tool && isRecord(c.function)) as { function: Json } | undefined;
			if (call) call.function.arguments = (typeof call.function.arguments === "string" ? call.function.arguments : "") + h.text;
			else calls.push({ index: h.tool, function: { arguments: h.text } });
		}
		return any;
	}
}

/**
 * `encoder` relaying engine text without the node secrets: every chunk through the filter, and
 * what is still held before the closing frames. `encoder` itself when there is no secret.
 */
export function withSecretsRedacted(encoder: StreamEncoder, secrets: readonly string[] | undefined): StreamEncoder {
	const forms = secrets?.length ? secretForms(secrets) : [];
	if (forms.length === 0) return encoder;
	const filter = new StreamSecretFilter(forms);
	return {
		start: () => encoder.start(),
		// The gateway's own frames (search results), not engine text.
		...(encoder.ready ? { ready: encoder.ready.bind(encoder) } : {}),
		// What goes out is scrubbed whole too: a field the filter does not read (relayed as written) cannot carry a key.
		chunks: (chunks) => redactForms(encoder.chunks(chunks.map((c) => filter.chunk(c))), forms),
		finish(outcome: EngineOutcome, reducer: ChatStreamReducer) {
			const rest = filter.rest(reducer);
			return redactForms((rest ? encoder.chunks([rest]) : "") + encoder.finish(outcome, reducer), forms);
		},
	};
}
