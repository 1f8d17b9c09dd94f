/**
 * Tool-call repair (model option `tool_call_repair`): weak models end a tool call's arguments with
 * broken JSON (an unterminated string, object or array, a trailing comma, prose around the
 * object), which breaks agent frameworks when they parse or replay the call. The arguments are
 * repaired with `jsonrepair` when a call ends; arguments that are valid, or that cannot be made a
 * JSON object, pass unchanged. In a stream the arguments of a call are held back and sent in one
 * delta just before the chunk that ends the call (content and reasoning are never held).
 */
import { jsonrepair } from "jsonrepair";
import type { ForwardedChunk } from "./chat-reducer";

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

/**
 * Valid arguments as they are; broken ones repaired into a JSON object (`{}` for empty ones);
 * `repaired` says whether anything changed. Text that cannot be made an object passes unchanged.
 */
export function repairArguments(args: string): { text: string; repaired: boolean } {
	if (isObjectJson(args)) return { text: args, repaired: false };
	if (args.trim() === "") return { text: "{}", repaired: true };
	// The object itself, then the object with the prose around it cut away.
	const start = args.indexOf("{");
	const end = args.lastIndexOf("}");
	const candidates = [args];
	if (start > 0) candidates.push(args.slice(start));
	if (start !== -1 && end > start) candidates.push(args.slice(start, end + 1));
	for (const candidate of candidates) {
		try {
			const text = jsonrepair(candidate);
			if (isObjectJson(text)) return { text, repaired: true };
		} catch {
			// Not repairable this way: try the next cut.
		}
	}
	return { text: args, repaired: false };
}

/** Repairs the tool calls of a whole (non-stream) chat body in place; returns how many changed. */
export function repairBodyToolCalls(body: Json): number {
	let count = 0;
	if (!Array.isArray(body.choices)) return 0;
	for (const choice of body.choices) {
		const calls = isRecord(choice) && isRecord(choice.message) ? choice.message.tool_calls : undefined;
		if (!Array.isArray(calls)) continue;
		for (const call of calls) {
			const fn = isRecord(call) && isRecord(call.function) ? call.function : undefined;
			if (!fn || typeof fn.arguments !== "string") continue;
			const { text, repaired } = repairArguments(fn.arguments);
			if (!repaired) continue;
			fn.arguments = text;
			count += 1;
		}
	}
	return count;
}

/**
 * The stream side: tool-call argument deltas are taken out of the chunks as they pass and sent,
 * repaired, in one delta per call just before the chunk that finishes the call's choice (or at
 * the end of the stream). Everything else passes in order and unchanged.
 */
export class ToolCallRepairStream {
	/** Held arguments by choice index, then by tool-call index. */
	readonly #held = new Map<number, Map<number, string[]>>();
	#last: Json | undefined;
	/** Tool calls whose arguments were changed. */
	repaired = 0;

	push(chunks: readonly ForwardedChunk[]): ForwardedChunk[] {
		const out: ForwardedChunk[] = [];
		for (const f of chunks) {
			this.#last = f.chunk;
			const choices = Array.isArray(f.chunk.choices) ? f.chunk.choices : [];
			let changed = false;
			for (const choice of choices) {
				if (!isRecord(choice)) continue;
				if (isRecord(choice.delta) && Array.isArray(choice.delta.tool_calls)) changed = this.#take(choice) || changed;
				if (choice.finish_reason !== undefined && choice.finish_reason !== null) {
					const index = typeof choice.index === "number" ? choice.index : 0;
					const release = this.#release(index, f.chunk);
					if (release) out.push(release);
				}
			}
			if (!changed) {
				out.push(f);
				continue;
			}
			// Choices left with nothing to say (a delta that only carried arguments) are dropped.
			f.chunk.choices = choices.filter((c) => !isRecord(c) || !isEmptyChoice(c));
			if ((f.chunk.choices as unknown[]).length || f.chunk.usage !== undefined) out.push({ chunk: f.chunk, data: null });
		}
		return out;
	}

	/** Whatever is still held when the engine's side ends (a stream cut before its finish). */
	flush(): ForwardedChunk[] {
		const out: ForwardedChunk[] = [];
		for (const index of [...this.#held.keys()]) {
			const release = this.#release(index, this.#last ?? {});
			if (release) out.push(release);
		}
		return out;
	}

	/** Moves the choice's argument deltas into the held text; true when the chunk changed. */
	#take(choice: Json): boolean {
		const index = typeof choice.index === "number" ? choice.index : 0;
		const delta = choice.delta as Json;
		let calls = this.#held.get(index);
		let changed = false;
		const kept: unknown[] = [];
		for (const call of delta.tool_calls as unknown[]) {
			const fn = isRecord(call) && isRecord(call.function) ? call.function : undefined;
			if (!fn || typeof fn.arguments !== "string") {
				kept.push(call);
				continue;
			}
			const at = typeof (call as Json).index === "number" ? ((call as Json).index as number) : 0;
			if (!calls) {
				calls = new Map();
				this.#held.set(index, calls);
			}
			const parts = calls.get(at) ?? [];
			parts.push(fn.arguments);
			calls.set(at, parts);
			delete fn.arguments;
			changed = true;
			// A delta that carried only arguments has nothing left to send.
			if (Object.keys(fn).length || Object.keys(call as Json).some((k) => k !== "index" && k !== "function")) kept.push(call);
		}
		if (!changed) return false;
		if (kept.length) delta.tool_calls = kept;
		else delete delta.tool_calls;
		return true;
	}

	/** One chunk with every held call of the choice, repaired; nothing when none is held. */
	#release(index: number, like: Json): ForwardedChunk | null {
		const calls = this.#held.get(index);
		this.#held.delete(index);
		if (!calls?.size) return null;
		const toolCalls: Json[] = [];
		for (const [at, parts] of [...calls].sort((a, b) => a[0] - b[0])) {
			const { text, repaired } = repairArguments(parts.join(""));
			if (repaired) this.repaired += 1;
			toolCalls.push({ index: at, function: { arguments: text } });
		}
		const chunk: Json = {
			choices: [{ index, delta: { tool_calls: toolCalls }, logprobs: null, finish_reason: null }],
		};
		for (const k of ["id", "object", "created", "model", "system_fingerprint"]) {
			if (like[k] !== undefined) chunk[k] = like[k];
		}
		// Keep the engine's key order (id first): the encoders swap the id and model in place.
		const ordered: Json = {};
		for (const k of ["id", "object", "created", "model", "system_fingerprint", "choices"]) {
			if (chunk[k] !== undefined) ordered[k] = chunk[k];
		}
		return { chunk: ordered, data: null };
	}
}

/** A choice with nothing left to say (a delta that only carried held arguments). */
export function isEmptyChoice(c: Json): boolean {
	if (c.finish_reason !== undefined && c.finish_reason !== null) return false;
	if (c.logprobs !== undefined && c.logprobs !== null) return false;
	const delta = c.delta;
	if (!isRecord(delta)) return false;
	for (const k in delta) {
		if (k === "role") return false;
		const v = delta[k];
		if (v !== undefined && v !== null && v !== "") return false;
	}
	return true;
}
