/**
 * The lines of a JSONL stream, read as they arrive (a 100 MiB file is never held whole), each
 * bounded: a line over `maxLineBytes` ends the read with its number. The lines are split on
 * bytes (`\n`, a `\r` before it dropped), then decoded, so a multibyte character split across
 * chunks is whole.
 */

export class LineTooLong extends Error {
	constructor(
		readonly line: number,
		readonly maxBytes: number,
	) {
		super(`Line ${line} is over ${maxBytes} bytes (a batch line's bound: max_body_bytes, at most 1 MiB).`);
	}
}

/** Yields each line's text and 1-based number, in order; the last line needs no newline. */
export async function* jsonlLines(
	stream: ReadableStream<Uint8Array>,
	maxLineBytes: number,
): AsyncGenerator<{ text: string; n: number }> {
	const decoder = new TextDecoder();
	let parts: Uint8Array[] = [];
	let size = 0;
	let n = 0;
	const take = (): string => {
		const buf = new Uint8Array(size);
		let at = 0;
		for (const p of parts) {
			buf.set(p, at);
			at += p.length;
		}
		parts = [];
		size = 0;
		const end = buf.length > 0 && buf[buf.length - 1] === 13 ? buf.length - 1 : buf.length;
		return decoder.decode(buf.subarray(0, end));
	};
	for await (const chunk of stream as unknown as AsyncIterable<Uint8Array>) {
		let from = 0;
		for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, from)) {
			size += i - from;
			if (size > maxLineBytes + 1) throw new LineTooLong(n + 1, maxLineBytes);
			parts.push(chunk.subarray(from, i));
			n += 1;
			yield { text: take(), n };
			from = i + 1;
		}
		if (from < chunk.length) {
			size += chunk.length - from;
			if (size > maxLineBytes + 1) throw new LineTooLong(n + 1, maxLineBytes);
			parts.push(chunk.slice(from));
		}
	}
	if (size > 0) {
		n += 1;
		yield { text: take(), n };
	}
}
