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

/** ASCII whitespace, as `String.prototype.trim` drops it (a byte past ASCII counts as text). */
function isSpace(b: number): boolean {
	return b === 32 || (b >= 9 && b <= 13);
}

/**
 * The same bounds as `jsonlLines`, checked on bytes as they pass without holding a line: each
 * line at most `maxLineBytes` (LineTooLong), at most `maxLines` lines that are not blank
 * (TooManyLines). For an upload streamed to storage as it arrives.
 */
export class JsonlLimits {
	/** Lines that are not blank so far. */
	lines = 0;
	#n = 0;
	#size = 0;
	#blank = true;

	constructor(
		private readonly maxLineBytes: number,
		private readonly maxLines: number,
	) {}

	push(chunk: Uint8Array): void {
		let from = 0;
		for (;;) {
			const nl = chunk.indexOf(10, from);
			const end = nl === -1 ? chunk.length : nl;
			this.#size += end - from;
			if (this.#size > this.maxLineBytes + 1) throw new LineTooLong(this.#n + 1, this.maxLineBytes);
			if (this.#blank) {
				for (let i = from; i < end; i++) {
					if (!isSpace(chunk[i] as number)) {
						this.#blank = false;
						break;
					}
				}
			}
			if (nl === -1) return;
			this.#endLine();
			from = nl + 1;
		}
	}

	/** The last line, which needs no newline. */
	end(): void {
		if (this.#size > 0) this.#endLine();
	}

	#endLine(): void {
		this.#n += 1;
		if (!this.#blank && ++this.lines > this.maxLines) throw new TooManyLines(this.maxLines);
		this.#size = 0;
		this.#blank = true;
	}
}

export class TooManyLines extends Error {
	constructor(readonly maxLines: number) {
		super(`A batch input file may hold at most ${maxLines} lines.`);
	}
}
