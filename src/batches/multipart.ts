/**
 * A multipart/form-data body read as it arrives (RFC 7578), never held whole: each part's
 * headers, then its content in the chunks it came in, handed to the sink the caller gives for
 * it. Only the delimiter's length is kept back between chunks, and a part's headers are bounded.
 */

export interface PartInfo {
	name: string | null;
	filename: string | null;
	contentType: string | null;
}

export interface PartSink {
	data(chunk: Uint8Array): Promise<void> | void;
	end(): Promise<void> | void;
}

export class MultipartError extends Error {}

/** The most bytes of one part's headers. */
const MAX_HEADER_BYTES = 16 * 1024;

/** The boundary of a `multipart/form-data` content type, or null. */
export function multipartBoundary(contentType: string | undefined | null): string | null {
	if (!contentType || !/^\s*multipart\/form-data\s*(;|$)/i.test(contentType)) return null;
	const m = /;\s*boundary=(?:"([^"]{1,70})"|([^\s;]{1,70}))/i.exec(contentType);
	return m ? ((m[1] ?? m[2]) as string) : null;
}

function param(header: string, key: string): string | null {
	const m =
		new RegExp(`(?:^|;)\\s*${key}="((?:[^"\\\\]|\\\\.)*)"`, "i").exec(header) ??
		new RegExp(`(?:^|;)\\s*${key}=([^;\\s]+)`, "i").exec(header);
	return m ? (m[1] as string).replace(/\\(.)/g, "$1") : null;
}

function partInfo(headerText: string): PartInfo {
	const info: PartInfo = { name: null, filename: null, contentType: null };
	for (const line of headerText.split("\r\n")) {
		const colon = line.indexOf(":");
		if (colon === -1) continue;
		const key = line.slice(0, colon).trim().toLowerCase();
		const value = line.slice(colon + 1).trim();
		if (key === "content-disposition") {
			info.name = param(value, "name");
			info.filename = param(value, "filename");
		} else if (key === "content-type") info.contentType = value;
	}
	return info;
}

function indexOfSeq(hay: Uint8Array, needle: Uint8Array, from: number): number {
	const first = needle[0] as number;
	for (let i = hay.indexOf(first, from); i !== -1 && i <= hay.length - needle.length; i = hay.indexOf(first, i + 1)) {
		let j = 1;
		while (j < needle.length && hay[i + j] === needle[j]) j++;
		if (j === needle.length) return i;
	}
	return -1;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
	if (a.length === 0) return b;
	const out = new Uint8Array(a.length + b.length);
	out.set(a);
	out.set(b, a.length);
	return out;
}

/** Reads the body, calling `onPart` for each part's headers and its sink with the part's bytes. Throws MultipartError on a malformed body. */
export async function readMultipart(
	body: ReadableStream<Uint8Array>,
	boundary: string,
	onPart: (info: PartInfo) => PartSink,
): Promise<void> {
	const enc = new TextEncoder();
	// The first delimiter has no CRLF before it: one is put in front of the body so every delimiter is alike.
	const delim = enc.encode(`\r\n--${boundary}`);
	const headEnd = enc.encode("\r\n\r\n");
	let buf: Uint8Array = enc.encode("\r\n");
	let state: "preamble" | "after" | "headers" | "body" | "done" = "preamble";
	let sink: PartSink | null = null;
	const reader = body.getReader();
	try {
		for (;;) {
			const { value, done } = await reader.read();
			if (done) break;
			buf = concat(buf, value);
			for (;;) {
				if (state === "preamble" || state === "body") {
					const at = indexOfSeq(buf, delim, 0);
					const keep = at === -1 ? Math.max(0, buf.length - (delim.length - 1)) : at;
					if (state === "body" && keep > 0) await sink?.data(buf.slice(0, keep));
					if (at === -1) {
						buf = buf.slice(keep);
						break;
					}
					if (state === "body") await sink?.end();
					sink = null;
					buf = buf.slice(at + delim.length);
					state = "after";
				} else if (state === "after") {
					if (buf.length < 2) break;
					if (buf[0] === 45 && buf[1] === 45) {
						state = "done";
						break;
					}
					// Transport padding (spaces, tabs) may follow the boundary before its CRLF.
					const crlf = indexOfSeq(buf, enc.encode("\r\n"), 0);
					if (crlf === -1) {
						if (buf.length > 256) throw new MultipartError("a malformed multipart boundary line");
						break;
					}
					buf = buf.slice(crlf + 2);
					state = "headers";
				} else if (state === "headers") {
					// A part with no headers: its CRLF CRLF is the boundary line's CRLF and one more.
					const at = buf[0] === 13 && buf[1] === 10 ? -2 : indexOfSeq(buf, headEnd, 0);
					if (at === -1) {
						if (buf.length > MAX_HEADER_BYTES) throw new MultipartError("a multipart part's headers are too long");
						break;
					}
					const text = at === -2 ? "" : new TextDecoder().decode(buf.subarray(0, at));
					buf = buf.slice(at === -2 ? 2 : at + 4);
					sink = onPart(partInfo(text));
					state = "body";
				} else break;
			}
			if (state === "done") break;
		}
		if (state !== "done") throw new MultipartError("the multipart body ended before its closing boundary");
	} catch (err) {
		// Refused mid-body: the rest is not read.
		await reader.cancel().catch(() => {});
		throw err;
	} finally {
		reader.releaseLock();
	}
}
