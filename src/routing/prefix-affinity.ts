/**
 * An affinity key for a request that names none (`prompt_cache_key`, `user`): a hash of its
 * stable prefix, the part every turn of a conversation repeats. Chat-shaped bodies (chat,
 * Responses translated to chat, Anthropic Messages translated to chat) hash their tools, the
 * system messages before the first user message and that first user message; a legacy
 * completion hashes the start of its prompt. Turn 1 and turn n of a conversation share that
 * prefix, so they share a node, and that node's engine has the prefix cached. When the prefix
 * changes (other instructions), the engine's cache could not help anyway, so a new node costs
 * nothing.
 *
 * Cheap on purpose: each part is cut to PART_CHARS before hashing, the walk over a part stops
 * once it has that many characters (a base64 image is never read whole), and the hash is
 * cyrb53, not a cryptographic one (bench/README.md, "Prefix affinity key").
 */
import { hash53 } from "./rendezvous";

/**
 * Characters of each part (tools, system, first user message, prompt) that count. Hashing is
 * the cost (a few ns a character); 1 KiB tells apps and conversations apart, and two prompts
 * that agree on their first KiB share that much cached prefix, so sharing a node costs nothing.
 */
export const PART_CHARS = 1024;
const MAX_DEPTH = 8;

/** `value` as text, stopping after `max` characters: strings as they are, objects as key:value lists. */
export function boundedText(value: unknown, max = PART_CHARS): string {
	const out: string[] = [];
	let left = max;
	const push = (s: string) => {
		const piece = s.length > left ? s.slice(0, left) : s;
		out.push(piece);
		left -= piece.length;
	};
	const walk = (v: unknown, depth: number): void => {
		if (left <= 0) return;
		if (typeof v === "string") push(v);
		else if (typeof v === "number" || typeof v === "boolean") push(String(v));
		else if (v === null || v === undefined || depth >= MAX_DEPTH) push("\u0000");
		else if (Array.isArray(v)) {
			push("[");
			for (const item of v) {
				if (left <= 0) return;
				walk(item, depth + 1);
				push(",");
			}
			push("]");
		} else if (typeof v === "object") {
			push("{");
			for (const k in v as Record<string, unknown>) {
				if (left <= 0) return;
				push(k);
				push(":");
				walk((v as Record<string, unknown>)[k], depth + 1);
				push(",");
			}
			push("}");
		}
	};
	walk(value, 0);
	return out.join("");
}

interface ChatMessage {
	role?: unknown;
	content?: unknown;
}

function isSystem(role: unknown): boolean {
	return role === "system" || role === "developer";
}

/**
 * The prefix key of a chat-shaped body (`messages`, `tools`) or a legacy completion (`prompt`),
 * or undefined when it has no user message and no prompt to go by. The Messages lane calls it
 * with the chat-shaped body it builds (its `system` becomes the system message).
 */
export function prefixAffinityKey(body: Record<string, unknown>): string | undefined {
	const messages = body.messages;
	if (Array.isArray(messages)) {
		let system = "";
		let user: string | undefined;
		for (const m of messages as ChatMessage[]) {
			if (m === null || typeof m !== "object") continue;
			if (m.role === "user") {
				user = boundedText(m.content);
				break;
			}
			if (isSystem(m.role) && system.length < PART_CHARS) system += boundedText(m.content, PART_CHARS - system.length);
		}
		if (user === undefined) return undefined;
		const tools = body.tools === undefined ? "" : boundedText(body.tools);
		return `prefix:${hash53(`${tools}\u0001${system}\u0001${user}`).toString(36)}`;
	}
	// A list of prompts: the first; a list of token ids: the list.
	const prompt = Array.isArray(body.prompt) && typeof body.prompt[0] !== "number" ? body.prompt[0] : body.prompt;
	if (prompt === undefined || prompt === null || prompt === "") return undefined;
	return `prefix:${hash53(`\u0002${boundedText(prompt)}`).toString(36)}`;
}
