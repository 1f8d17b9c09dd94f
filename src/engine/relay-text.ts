/**
 * Engine text that reaches a client (a refusal's message, param, code) is bounded and scrubbed
 * of the node secrets the gateway sent: an engine that echoes its request must not leak the
 * node's Authorization to the caller.
 */

/** Longest engine message relayed to a client. */
export const MAX_RELAYED_CHARS = 1000;
/** Most of an engine's error body that is read at all. */
export const MAX_ERROR_BODY_BYTES = 64 * 1024;

const REDACTED = "[redacted]";

function escapeRegExp(s: string): string {
	return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** The forms an echoing engine may give a secret in: as is (any case), URL-encoded, base64 (alone or as `Bearer …`). */
function secretForms(secret: string): string[] {
	const forms = [secret, encodeURIComponent(secret)];
	try {
		forms.push(btoa(secret), btoa(`Bearer ${secret}`), btoa(`:${secret}`));
	} catch {
		// Not Latin-1: no base64 form to look for.
	}
	return forms;
}

/** `text` with every secret (and a Bearer token of any value) replaced, cut to `max` characters. */
export function relayText(text: string, secrets: readonly string[], max = MAX_RELAYED_CHARS): string {
	let out = text;
	for (const secret of secrets) {
		// Very short secrets would redact ordinary words; nobody configures a key that short.
		if (secret.length < 8) continue;
		for (const form of secretForms(secret)) {
			out = out.replace(new RegExp(escapeRegExp(form), "gi"), REDACTED);
		}
	}
	out = out.replace(/\b(Bearer\s+)[^\s"',;]+/gi, `$1${REDACTED}`);
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
