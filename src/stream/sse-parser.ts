/**
 * Server-Sent Events parsing: eventsource-parser (what the AI SDK and much of the ecosystem
 * use), behind the small callback interface the engine-events layer needs. It takes
 * already-decoded text: callers own byte decoding, with one `TextDecoder` in `{ stream: true }`
 * mode so characters split across reads survive. We measured it against our own hand parser
 * (bench/micro/sse-parsers.mjs, numbers in bench/HISTORY.md): it is faster on what sockets
 * deliver (frames split across reads, CRLF), and it bounds the pending event the same way.
 */
import { createParser, type ParseError } from "eventsource-parser";

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

/**
 * The largest pending event (its unfinished line and data lines so far), eventsource-parser's
 * maxBufferSize: counted in characters (UTF-16 units) of decoded text, not bytes.
 */
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
	/** Characters (UTF-16 units) of one pending event. */
	maxEventSize: number = MAX_EVENT_CHARS,
): SseParser {
	let overflow = false;
	const parser = createParser({
		onEvent: (e) => {
			const out: SseEvent = { data: e.data };
			if (e.event !== undefined) out.event = e.event;
			if (e.id !== undefined) out.id = e.id;
			onEvent(out);
		},
		onComment: onComment ? (c) => onComment(c.startsWith(" ") ? c.slice(1) : c) : undefined,
		onError: (err: ParseError) => {
			if (err.type === "max-buffer-size-exceeded") overflow = true;
		},
		maxBufferSize: maxEventSize,
	});
	return {
		feed(text: string): void {
			if (overflow) throw new SseOverflowError(maxEventSize);
			parser.feed(text);
			if (overflow) throw new SseOverflowError(maxEventSize);
		},
		end(): void {
			if (overflow) return;
			// The spec drops an event without its blank line at the end of the stream; an engine
			// that ends on `data: [DONE]` without one still meant it, so the blank line is supplied.
			parser.feed("\n\n");
			parser.reset({ consume: true });
		},
	};
}
