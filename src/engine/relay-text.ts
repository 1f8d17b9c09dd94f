/**
 * Engine text that reaches a client (a refusal's message, param, code) is bounded and scrubbed
 * of the node secrets the gateway sent: an engine that echoes its request must not leak the
 * node's Authorization to the caller. The scrubbing itself is src/redact.ts, shared with logs
 * and relayed completion text.
 */
import { scrubEngineText } from "../redact";

/** Longest engine message relayed to a client. */
export const MAX_RELAYED_CHARS = 1000;
/** Most of an engine's error body that is read at all. */
export const MAX_ERROR_BODY_BYTES = 64 * 1024;

/** `text` with every secret (and a Bearer token of any value) replaced, cut to `max` characters. */
export function relayText(text: string, secrets: readonly string[], max = MAX_RELAYED_CHARS): string {
	const out = scrubEngineText(text, secrets);
	return out.length > max ? `${out.slice(0, max)}…` : out;
}

/** At most `maxBytes` of a body as text; the rest is cancelled unread. */
export async function readCapped(response: Response, maxBytes = MAX_ERROR_BODY_BYTES): Promise<string> {
	if (!response.body) return "";
	const reader = response.body.getReader();
	const decoder = new TextDecoder();
	let text = "";
	let size = 0;
	try {
		for (;;) {
			const { done, value } = await reader.read();
			if (done) break;
			const room = maxBytes - size;
			text += decoder.decode(value.byteLength > room ? value.subarray(0, room) : value, { stream: true });
			size += value.byteLength;
			if (size >= maxBytes) {
				await reader.cancel().catch(() => {});
				break;
			}
		}
	} catch {
		// A body that breaks mid-way still gives what arrived.
	}
	return text + decoder.decode();
}
