/**
 * `item_index`: item id → where the item is stored (response, seq), for every stored input and
 * output item, so an `item_reference` is found without reading every response. Docs
 * (stored-docs.ts) writes and removes its rows with the documents themselves.
 */

/** A document's kinds whose items are indexed: `item_reference` names the input and output items a response stored, not a layout-1 context copy. */
export const INDEXED_KINDS: ReadonlySet<string> = new Set(["input", "output"]);

export const ITEM_INDEX_SCHEMA = `
	CREATE TABLE IF NOT EXISTS item_index (
		item_id TEXT NOT NULL,
		response_id TEXT NOT NULL,
		seq INTEGER NOT NULL,
		created_at INTEGER NOT NULL,
		PRIMARY KEY (response_id, seq)
	);
	CREATE INDEX IF NOT EXISTS item_index_item ON item_index (item_id, created_at);
`;

/** Where a stored item is: its response and seq, and its size in JSON characters. */
export type ItemLocation = { response_id: string; seq: number; chars: number };

/** An item's own id, when it has one to be referenced by. */
export function itemIdOf(item: unknown): string | null {
	const id = typeof item === "object" && item !== null ? (item as { id?: unknown }).id : undefined;
	return typeof id === "string" && id !== "" ? id : null;
}

function placeholders(n: number): string {
	return Array.from({ length: n }, () => "?").join(", ");
}

/** Every method is synchronous SQLite work. */
export class ItemIndex {
	constructor(private readonly sql: SqlStorage) {}

	/** Records where the item `itemId` is stored; `createdAt` is its response's. */
	add(itemId: string, responseId: string, seq: number, createdAt: number): void {
		this.sql.exec(
			"INSERT OR REPLACE INTO item_index (item_id, response_id, seq, created_at) VALUES (?, ?, ?, ?)",
			itemId,
			responseId,
			seq,
			createdAt,
		);
	}

	/** Forgets the document at (responseId, seq), when it was indexed. */
	removeAt(responseId: string, seq: number): void {
		this.sql.exec("DELETE FROM item_index WHERE response_id = ? AND seq = ?", responseId, seq);
	}

	/** Forgets the response's documents of these kinds (all of them without `kinds`); before the documents go. */
	remove(responseId: string, kinds?: readonly string[]): void {
		if (!kinds) {
			this.sql.exec("DELETE FROM item_index WHERE response_id = ?", responseId);
		} else if (kinds.some((k) => INDEXED_KINDS.has(k))) {
			this.sql.exec(
				`DELETE FROM item_index WHERE response_id = ? AND seq IN
				(SELECT seq FROM docs WHERE response_id = ? AND kind IN (${placeholders(kinds.length)}))`,
				responseId,
				responseId,
				...kinds,
			);
		}
	}

	/**
	 * Where the items with these ids are stored: the input and output items of responses that are
	 * neither hidden (deleted) nor older than `ttlMs`. Where a client reused an id, the most recent
	 * response's item (within one millisecond, the later written). An id not found is absent.
	 */
	locate(ids: readonly string[], now: number, ttlMs: number): Map<string, ItemLocation> {
		const found = new Map<string, ItemLocation>();
		for (const itemId of new Set(ids)) {
			const row = this.sql
				.exec<ItemLocation>(
					`SELECT i.response_id, i.seq,
						(SELECT SUM(d.chars) FROM docs d WHERE d.response_id = i.response_id AND d.seq = i.seq) AS chars
					FROM item_index i JOIN turns t ON t.id = i.response_id
					WHERE i.item_id = ? AND t.hidden = 0 AND t.created_at + ? >= ?
					ORDER BY i.created_at DESC, i.rowid DESC LIMIT 1`,
					itemId,
					ttlMs,
					now,
				)
				.toArray()[0];
			if (row) found.set(itemId, { response_id: row.response_id, seq: row.seq, chars: row.chars });
		}
		return found;
	}

	/**
	 * Indexes every stored input and output item (documents written before the index have no
	 * rows). A one-row document is read by SQLite's JSON functions, never loaded here; the few
	 * split across rows (`read` assembles one) are parsed one at a time.
	 */
	backfill(read: (responseId: string, seq: number) => unknown): void {
		const kinds = [...INDEXED_KINDS];
		// A part of a split document is not valid JSON on its own: the CASE keeps json_type off it.
		this.sql.exec(
			`INSERT OR REPLACE INTO item_index (item_id, response_id, seq, created_at)
			SELECT json_extract(d.text, '$.id'), d.response_id, d.seq, t.created_at
			FROM docs d JOIN turns t ON t.id = d.response_id
			WHERE d.kind IN (${placeholders(kinds.length)}) AND d.part = 0
				AND CASE WHEN json_valid(d.text) THEN json_type(d.text, '$.id') = 'text' AND json_extract(d.text, '$.id') != '' ELSE 0 END`,
			...kinds,
		);
		const split = this.sql
			.exec<{ response_id: string; seq: number; created_at: number }>(
				`SELECT d.response_id, d.seq, t.created_at FROM docs d JOIN turns t ON t.id = d.response_id
				WHERE d.kind IN (${placeholders(kinds.length)}) AND d.part = 1`,
				...kinds,
			)
			.toArray();
		for (const { response_id, seq, created_at } of split) {
			const id = itemIdOf(read(response_id, seq));
			if (id !== null) this.add(id, response_id, seq, created_at);
		}
	}
}
