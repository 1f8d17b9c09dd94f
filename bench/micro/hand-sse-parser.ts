// The hand-written SSE parser the gateway used until session 3, kept only for bench/micro/sse-parsers.mjs.
/**
 * A pure, callback-based Server-Sent Events parser (the WHATWG "event stream" grammar).
 * It takes already-decoded text: callers own byte decoding, with one
 * `TextDecoder` in `{ stream: true }` mode so characters split across reads survive.
 */

export interface SseEvent {
	event?: string;
	data: string;
	id?: string;
}

export interface SseParser {
	/** Feed the next piece of text; pieces may split lines, CRLF pairs and fields anywhere. */
	feed(text: string): void;
	/** The input is over: flush a final line and an event that lacked its blank line. */
	end(): void;
}

const CR = "\r";
const LF = "\n";

/** The largest pending event (its unfinished line and data lines so far), like eventsource-parser's maxBufferSize. */
export const MAX_EVENT_CHARS = 1024 * 1024;

/** Thrown by `feed` when a pending event grows past the limit: an engine that never ends a line or an event. */
export class SseOverflowError extends Error {
	constructor(limit: number) {
		super(`SSE event larger than ${limit} characters`);
		this.name = "SseOverflowError";
	}
}

export function createSseParser(
	onEvent: (e: SseEvent) => void,
	onComment?: (text: string) => void,
	/** Characters, counted as UTF-16 units (at most the bytes they came from, times two). */
	maxEventSize: number = MAX_EVENT_CHARS,
): SseParser {
	// Only the unfinished last line is kept, as pieces joined once when its end arrives:
	// appending every chunk to one growing string and rescanning it is O(n²) on long lines.
	let partial: string[] = [];
	let partialSize = 0;
	let dataSize = 0;
	// A CR ended the previous piece; if the next one opens with LF, that LF is the
	// second half of the same CRLF, not an empty line (which would dispatch an event).
	let skipLeadingLf = false;

	let data: string[] = [];
	let event: string | undefined;
	let id: string | undefined;

	function dispatch(): void {
		// Per the spec an event without any data line is dropped, but its fields still reset.
		if (data.length > 0) {
			const e: SseEvent = { data: data.join(LF) };
			if (event !== undefined) e.event = event;
			if (id !== undefined) e.id = id;
			onEvent(e);
		}
		data = [];
		dataSize = 0;
		event = undefined;
		id = undefined;
	}

	function line(text: string): void {
		if (text === "") {
			dispatch();
			return;
		}
		const colon = text.indexOf(":");
		if (colon === 0) {
			onComment?.(text.startsWith(": ") ? text.slice(2) : text.slice(1));
			return;
		}
		const field = colon === -1 ? text : text.slice(0, colon);
		let value = colon === -1 ? "" : text.slice(colon + 1);
		if (value.startsWith(" ")) value = value.slice(1);
		switch (field) {
			case "data":
				data.push(value);
				dataSize += value.length + 1;
				break;
			case "event":
				event = value;
				break;
			case "id":
				// The spec ignores ids containing NUL: they cannot be echoed back in a header.
				if (!value.includes("\0")) id = value;
				break;
			// "retry" and unknown fields are ignored, as the spec says.
		}
	}

	function takeLine(text: string, start: number, end: number): void {
		const tail = text.slice(start, end);
		if (partial.length === 0) {
			line(tail);
		} else {
			partial.push(tail);
			const joined = partial.join("");
			partial = [];
			partialSize = 0;
			line(joined);
		}
	}

	return {
		feed(text: string): void {
			let pos = 0;
			if (skipLeadingLf) {
				skipLeadingLf = false;
				if (text.startsWith(LF)) pos = 1;
			}
			// Each index is searched again only once passed, so a piece is scanned linearly.
			let cr = text.indexOf(CR, pos);
			let lf = text.indexOf(LF, pos);
			while (cr !== -1 || lf !== -1) {
				if (cr !== -1 && (lf === -1 || cr < lf)) {
					takeLine(text, pos, cr);
					if (cr + 1 === text.length) {
						skipLeadingLf = true;
						pos = cr + 1;
					} else {
						pos = text[cr + 1] === LF ? cr + 2 : cr + 1;
					}
				} else {
					takeLine(text, pos, lf);
					pos = lf + 1;
				}
				if (cr !== -1 && cr < pos) cr = text.indexOf(CR, pos);
				if (lf !== -1 && lf < pos) lf = text.indexOf(LF, pos);
			}
			if (pos < text.length) {
				partial.push(text.slice(pos));
				partialSize += text.length - pos;
			}
			if (partialSize + dataSize > maxEventSize) {
				partial = [];
				partialSize = 0;
				data = [];
				dataSize = 0;
				throw new SseOverflowError(maxEventSize);
			}
		},
		end(): void {
			skipLeadingLf = false;
			if (partial.length > 0) {
				const last = partial.join("");
				partial = [];
				partialSize = 0;
				line(last);
			}
			dispatch();
		},
	};
}
