/**
 * JSON documents in the ResponseStore's SQLite, each stored once and split across rows: a row
 * of a Durable Object's SQLite holds at most 2 MB, less than one request body may carry.
 */
import { INDEXED_KINDS, ITEM_INDEX_SCHEMA, ItemIndex, itemIdOf } from "./item-index";

/**
 * The longest text one row holds, in UTF-16 code units. A code unit is at most 3 bytes of
 * UTF-8 (a surrogate pair, 2 units, is 4 bytes), so a part is at most 1.5 MiB: under the 2 MB
 * row limit with room for the other columns.
 */
export const PART_CHARS = 512 * 1024;

/** `text` in parts of at most `max` code units, never cut between the two halves of a surrogate pair. */
export function splitText(text: string, max: number = PART_CHARS): string[] {
	if (text.length <= max) return [text];
	const parts: string[] = [];
	for (let start = 0; start < text.length; ) {
		let end = Math.min(start + max, text.length);
		// A lone half would be stored as U+FFFD: keep the pair together in the next part.
		if (end < text.length && isHighSurrogate(text.charCodeAt(end - 1))) end--;
		parts.push(text.slice(start, end));
		start = end;
	}
	return parts;
}

function isHighSurrogate(code: number): boolean {
	return code >= 0xd800 && code <= 0xdbff;
}

/**
 * What a document is. Within a response, `seq` orders them: the job (-1), the response object
 * (0), then the conversation items in order: `context` (the earlier turns a response stored in
 * the first layout carried), `input`, `output`.
 */
export type DocKind = "job" | "response" | "context" | "input" | "output";
/** The documents that are conversation items. */
export type ItemKind = "context" | "input" | "output";

export const JOB_SEQ = -1;
export const RESPONSE_SEQ = 0;

export const DOCS_SCHEMA = `
	CREATE TABLE IF NOT EXISTS docs (
		response_id TEXT NOT NULL,
		seq INTEGER NOT NULL,
		part INTEGER NOT NULL,
		kind TEXT NOT NULL,
		chars INTEGER NOT NULL,
		text TEXT NOT NULL,
		PRIMARY KEY (response_id, seq, part)
	);
	${ITEM_INDEX_SCHEMA}
`;

export type DocRow = {
	response_id: string;
	seq: number;
	text: string;
};

/** Rows ordered by (response_id, seq, part) → one parsed value per document. */
export function assemble<T>(rows: Iterable<DocRow>): T[] {
	const out: T[] = [];
	let key: string | null = null;
	let parts: string[] = [];
	const flush = () => {
		if (key !== null) out.push(JSON.parse(parts.length === 1 ? (parts[0] as string) : parts.join("")) as T);
	};
	for (const row of rows) {
		const k = `${row.response_id}\u0000${row.seq}`;
		if (k !== key) {
			flush();
			key = k;
			parts = [];
		}
		parts.push(row.text);
	}
	flush();
	return out;
}

/**
 * The documents of the responses of one store, with the index of their item ids (item-index.ts)
 * kept in step. Every method is synchronous SQLite work.
 */
export class Docs {
	readonly items: ItemIndex;

	constructor(private readonly sql: SqlStorage) {
		this.items = new ItemIndex(sql);
	}

	/** Stores `value` as JSON under (responseId, seq), replacing what was there; returns its length. */
	put(responseId: string, seq: number, kind: DocKind, value: unknown): number {
		const text = JSON.stringify(value);
		this.putText(responseId, seq, kind, text);
		return text.length;
	}

	/** Stores JSON text already serialised, unindexed (conversation items go through `putItems`). */
	putText(responseId: string, seq: number, kind: DocKind, text: string): void {
		this.sql.exec("DELETE FROM docs WHERE response_id = ? AND seq = ?", responseId, seq);
		this.items.removeAt(responseId, seq);
		splitText(text).forEach((part, i) => {
			this.sql.exec(
				"INSERT INTO docs (response_id, seq, part, kind, chars, text) VALUES (?, ?, ?, ?, ?, ?)",
				responseId,
				seq,
				i,
				kind,
				part.length,
				part,
			);
		});
	}

	/**
	 * Stores conversation items in order from `firstSeq` (`texts`: their JSON, when already
	 * serialised), indexing the ids of input and output items under the response's `createdAt`.
	 */
	putItems(
		responseId: string,
		firstSeq: number,
		kind: ItemKind,
		items: readonly unknown[],
		createdAt: number,
		texts?: readonly string[],
	): void {
		const indexed = INDEXED_KINDS.has(kind);
		items.forEach((item, i) => {
			const seq = firstSeq + i;
			this.putText(responseId, seq, kind, texts?.[i] ?? JSON.stringify(item));
			const id = indexed ? itemIdOf(item) : null;
			if (id !== null) this.items.add(id, responseId, seq, createdAt);
		});
	}

	one<T>(responseId: string, seq: number): T | null {
		const rows = this.sql.exec<DocRow>(
			"SELECT response_id, seq, text FROM docs WHERE response_id = ? AND seq = ? ORDER BY part",
			responseId,
			seq,
		);
		return assemble<T>(rows)[0] ?? null;
	}

	/** The documents of these kinds, in order. */
	list<T>(responseId: string, kinds: readonly DocKind[]): T[] {
		const rows = this.sql.exec<DocRow>(
			`SELECT response_id, seq, text FROM docs WHERE response_id = ? AND kind IN (${kinds.map(() => "?").join(", ")}) ORDER BY seq, part`,
			responseId,
			...kinds,
		);
		return assemble<T>(rows);
	}

	/** The next free seq after the documents of these kinds (0 when there are none). */
	nextSeq(responseId: string, kinds: readonly DocKind[]): number {
		return this.sql
			.exec<{ n: number }>(
				`SELECT COALESCE(MAX(seq), 0) + 1 AS n FROM docs WHERE response_id = ? AND kind IN (${kinds.map(() => "?").join(", ")})`,
				responseId,
				...kinds,
			)
			.one().n;
	}

	remove(responseId: string, kinds?: readonly DocKind[]): void {
		this.items.remove(responseId, kinds);
		if (!kinds) {
			this.sql.exec("DELETE FROM docs WHERE response_id = ?", responseId);
			return;
		}
		this.sql.exec(
			`DELETE FROM docs WHERE response_id = ? AND kind IN (${kinds.map(() => "?").join(", ")})`,
			responseId,
			...kinds,
		);
	}
}
