/**
 * Warnings and errors as one JSON line each (`{"level","message","request_id",…}`), so Workers
 * Logs, `wrangler tail` and `wrangler dev` all show them parseable. Never a stack trace: an
 * error's message only, bounded, with every URL cut to its host (a node or search URL may carry
 * credentials or a secret in its query).
 */

import { memoize } from "../memo";
import { scrubForLog } from "../redact";

export type LogLevel = "warn" | "error";

/** Most characters an error's text keeps in a log line. */
const MAX_ERROR_CHARS = 500;

const URL_PATTERN = /\b[a-z][a-z0-9+.-]*:\/\/[^\s"'<>`()[\]{}]+/gi;

/**
 * A URL's host (`node-b.example:8000`): no credentials, path or query. Remembered per URL: a
 * request asks for its node's host up to three times (attempt, answer, settlement), and the nodes
 * are the catalog's few URLs.
 */
export const hostOf = memoize((url: string): string => {
	try {
		return new URL(url).host || "[url]";
	} catch {
		return "[url]";
	}
});

/** Text with every URL in it cut to `scheme://host`. */
export function scrubUrls(text: string): string {
	return text.replace(URL_PATTERN, (u) => {
		try {
			const parsed = new URL(u);
			return `${parsed.protocol}//${parsed.host}`;
		} catch {
			return "[url]";
		}
	});
}

/** What a log line keeps of a thrown value: its message (and its cause's), URLs cut to hosts, bounded. */
export function errorText(err: unknown): string {
	const text = messageOf(err);
	const cause = err instanceof Error && err.cause !== undefined ? messageOf(err.cause) : "";
	return scrubUrls(cause && cause !== text ? `${text} (cause: ${cause})` : text).slice(0, MAX_ERROR_CHARS);
}

function messageOf(v: unknown): string {
	if (v instanceof Error) return `${v.name}: ${v.message}`.slice(0, MAX_ERROR_CHARS * 2);
	return String(v).slice(0, MAX_ERROR_CHARS * 2);
}

/**
 * One warning or error line. `fields` are values, not free text from a client: pass a request id
 * (`request_id`), a node as `hostOf(url)`, an error as `errorText(err)`; never a key, a header,
 * or prompt or completion text. Every string in it goes through the one scrubber of engine text
 * (src/redact.ts): an engine's error message may echo the node secret it was sent.
 */
export function logEvent(level: LogLevel, message: string, fields: Record<string, unknown> = {}): void {
	const scrubbed: Record<string, unknown> = {};
	for (const name in fields) {
		const value = fields[name];
		scrubbed[name] = typeof value === "string" ? scrubForLog(value) : value;
	}
	const line = JSON.stringify({ level, message: scrubForLog(message), ...scrubbed });
	if (level === "error") console.error(line);
	else console.warn(line);
}
