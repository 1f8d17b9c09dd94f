/**
 * Node secrets out of engine text: the one scrubber for whatever an engine writes that the
 * gateway passes on, to a client (a refusal, completion text, a stream) or to a log line. An
 * engine that echoes its request puts the `Authorization` the gateway sent it into its answer;
 * it must reach neither the caller nor the logs.
 */

export const REDACTED = "[redacted]";

/** Very short secrets would redact ordinary words; nobody configures a key that short. */
const MIN_SECRET_CHARS = 8;

/**
 * The forms an echoing engine may give a secret in: as is, URL-encoded, base64 (alone, as
 * `Bearer …` or as Basic's `:secret`). Longest first, so a longer form is replaced whole.
 */
export function secretForms(secrets: readonly string[]): string[] {
	const forms = new Set<string>();
	for (const secret of secrets) {
		if (secret.length < MIN_SECRET_CHARS) continue;
		forms.add(secret);
		forms.add(encodeURIComponent(secret));
		try {
			forms.add(btoa(secret));
			forms.add(btoa(`Bearer ${secret}`));
			forms.add(btoa(`:${secret}`));
		} catch {
			// Not Latin-1: no base64 form to look for.
		}
	}
	return [...forms].sort((a, b) => b.length - a.length);
}

/** `text` with every form replaced, exactly as written (completion text keeps its case otherwise). */
export function redactForms(text: string, forms: readonly string[]): string {
	let out = text;
	for (const form of forms) if (out.includes(form)) out = out.split(form).join(REDACTED);
	return out;
}

function escapeRegExp(s: string): string {
	return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

const BEARER = /\b(Bearer\s+)[^\s"',;]+/gi;

/**
 * Engine text for an error or a log line: every form of every secret replaced in any case, and a
 * `Bearer …` token of any value too (an error message has no business carrying one; completion
 * text may, so it gets `redactForms` only).
 */
export function scrubEngineText(text: string, secrets: readonly string[]): string {
	let out = text;
	for (const form of secretForms(secrets)) out = out.replace(new RegExp(escapeRegExp(form), "gi"), REDACTED);
	return out.replace(BEARER, `$1${REDACTED}`);
}

/** The node secrets this isolate has sent (bounded: a config has a handful), for its log lines. */
const sent = new Set<string>();
const MAX_REMEMBERED = 64;

/** Remembers secrets the gateway sends to nodes, so every log line of the isolate is scrubbed of them. */
export function rememberSentSecrets(secrets: readonly string[]): void {
	for (const secret of secrets) {
		if (sent.has(secret)) continue;
		if (sent.size >= MAX_REMEMBERED) sent.clear();
		sent.add(secret);
	}
}

/** Text for a log line: `scrubEngineText` with every node secret this isolate has sent. */
export function scrubForLog(text: string): string {
	return scrubEngineText(text, [...sent]);
}
