/**
 * The stored responses of one key, inside its ResponseStore: a `turns` row per response
 * (pointing at the response it continues) and its documents (stored-docs.ts), each item stored
 * once. A conversation is rebuilt by following the pointers. A deleted or expired response that
 * a later one continues from stays, hidden, until nothing continues from it.
 */
import type { ItemLocation } from "./item-index";
import type { ResponseInputItem } from "./item-schema";
import { assemble, DOCS_SCHEMA, type DocRow, Docs, RESPONSE_SEQ } from "./stored-docs";

/** Stored responses live this long (OpenAI keeps them for 30 days). */
export const RESPONSE_TTL_MS = 30 * 24 * 60 * 60 * 1000;

export type Item = Record<string, unknown>;

export type ConversationRefusal =
	| { ok: false; reason: "not_found" }
	| { ok: false; reason: "too_large"; chars: number }
	/** The previous response has not finished: its output, part of this conversation, is not known yet. */
	| { ok: false; reason: "in_progress"; status: string };

type TurnRow = {
	status: string;
	prev: string | null;
	hidden: number;
	created_at: number;
	error: string | null;
};

export const TURNS_SCHEMA = `
	CREATE TABLE IF NOT EXISTS turns (id TEXT PRIMARY KEY, prev TEXT, created_at INTEGER NOT NULL, status TEXT NOT NULL, hidden INTEGER NOT NULL DEFAULT 0, error TEXT);
	CREATE INDEX IF NOT EXISTS turns_prev ON turns (prev);
	${DOCS_SCHEMA}
`;

/** Every response from the first turn to `?`, as `(id, depth)`: depth 0 is `?` itself. */
const CHAIN = `
	WITH RECURSIVE chain (id, prev, depth) AS (
		SELECT id, prev, 0 FROM turns WHERE id = ?
		UNION ALL SELECT t.id, t.prev, c.depth + 1 FROM turns t JOIN chain c ON t.id = c.prev
	)`;
const CONVERSATION_KINDS = "d.kind IN ('context', 'input', 'output')";
/** Responses nothing continues from: only these can go. */
const LEAF = "NOT EXISTS (SELECT 1 FROM turns c WHERE c.prev = t.id)";

/** Synchronous SQLite work only, so each public method runs whole under the object's input gate. */
export class Turns {
	readonly docs: Docs;

	constructor(
		private readonly sql: SqlStorage,
		private readonly transaction: (fn: () => void) => void,
	) {
		this.docs = new Docs(sql);
	}

	/** Refuses an unknown previous response, and a conversation over `maxChars` with this input. */
	check(previousId: string | null, inputChars: number, maxChars: number): { ok: true } | ConversationRefusal {
		let chars = inputChars;
		if (previousId) {
			if (!this.visible(previousId, Date.now())) return { ok: false, reason: "not_found" };
			const status = this.sql.exec<{ status: string }>("SELECT status FROM turns WHERE id = ?", previousId).toArray()[0]?.status;
			if (status === "queued" || status === "in_progress") return { ok: false, reason: "in_progress", status };
			chars += this.sql
				.exec<{ n: number }>(
					`${CHAIN} SELECT COALESCE(SUM(d.chars), 0) AS n FROM chain c JOIN docs d ON d.response_id = c.id WHERE ${CONVERSATION_KINDS}`,
					previousId,
				)
				.one().n;
		}
		return chars > maxChars ? { ok: false, reason: "too_large", chars } : { ok: true };
	}

	/** A new response: its row, the response object so far and its input (with its JSON texts), in one transaction with `also`. */
	create(
		id: string,
		previousId: string | null,
		createdAt: number,
		response: Item,
		input: { items: readonly unknown[]; texts: readonly string[] },
		also?: () => void,
	): void {
		this.transaction(() => {
			this.sql.exec(
				"INSERT INTO turns (id, prev, created_at, status) VALUES (?, ?, ?, ?)",
				id,
				previousId,
				createdAt,
				String(response.status),
			);
			this.docs.put(id, RESPONSE_SEQ, "response", { ...response, output: [] });
			this.docs.putItems(id, 1, "input", input.items, createdAt, input.texts);
			also?.();
		});
	}

	/** The conversation up to and including `id`'s output, oldest first. */
	chain(id: string): ResponseInputItem[] {
		const rows = this.sql.exec<DocRow>(
			`${CHAIN} SELECT d.response_id, d.seq, d.text FROM chain c JOIN docs d ON d.response_id = c.id
			WHERE ${CONVERSATION_KINDS} ORDER BY c.depth DESC, d.seq, d.part`,
			id,
		);
		return assemble<ResponseInputItem>(rows);
	}

	/** What a stored response continues (the earlier turns) and its own input; null when it is gone. */
	conversation(id: string): { history: ResponseInputItem[]; input: ResponseInputItem[] } | null {
		const turn = this.turn(id);
		if (!turn || turn.hidden) return null;
		const history = turn.prev ? this.chain(turn.prev) : [];
		return { history: [...history, ...this.docs.list<ResponseInputItem>(id, ["context"])], input: this.docs.list(id, ["input"]) };
	}

	/** Sets the status, when it is `from` (when given); false when the response is gone or was not `from`. */
	setStatus(id: string, status: string, from?: string): boolean {
		const turn = this.turn(id);
		if (!turn || turn.hidden || (from !== undefined && turn.status !== from)) return false;
		this.sql.exec("UPDATE turns SET status = ? WHERE id = ?", status, id);
		return true;
	}

	/** The final response: its output and status. A cancelled or deleted response stays as it is. */
	finish(id: string, response: Item): void {
		const turn = this.turn(id);
		if (!turn || turn.hidden || (turn.status === "cancelled" && response.status !== "cancelled")) return;
		const output = Array.isArray(response.output) ? response.output : [];
		this.transaction(() => {
			this.docs.remove(id, ["output"]);
			this.docs.put(id, RESPONSE_SEQ, "response", { ...response, output: [] });
			this.docs.putItems(id, this.docs.nextSeq(id, ["context", "input"]), "output", output, turn.created_at);
			this.sql.exec("UPDATE turns SET status = ?, error = NULL WHERE id = ?", String(response.status), id);
		});
	}

	markFailed(id: string, error: { code: string; message: string }): void {
		this.adopt(id);
		this.sql.exec("UPDATE turns SET status = 'failed', error = ? WHERE id = ?", JSON.stringify(error), id);
	}

	/** The response object as the client sees it; null when unknown, deleted or expired. */
	get(id: string, now: number): Item | null {
		const turn = this.visible(id, now);
		if (!turn) return null;
		const response = this.docs.one<Item>(id, RESPONSE_SEQ) ?? { id, object: "response" };
		// `output` was stored as [] in its place, so the keys keep OpenAI's order.
		const out: Item = { ...response, status: turn.status, output: this.docs.list(id, ["output"]) };
		if (turn.error) out.error = JSON.parse(turn.error);
		return out;
	}

	inputItems(id: string, now: number): Item[] | null {
		return this.visible(id, now) ? this.docs.list(id, ["input"]) : null;
	}

	/** Where the input and output items with these ids are stored, in responses the client can see (item-index.ts). */
	locate(ids: readonly string[], now: number): Map<string, ItemLocation> {
		return this.docs.items.locate(ids, now, RESPONSE_TTL_MS);
	}

	/** The stored item at `at` (from `locate`). */
	item(at: ItemLocation): ResponseInputItem | null {
		return this.docs.one<ResponseInputItem>(at.response_id, at.seq);
	}

	/** Indexes the items stored before the index existed (schema 3). */
	indexStoredItems(): void {
		this.docs.items.backfill((responseId, seq) => this.docs.one(responseId, seq));
	}

	/** A response the client can see: stored, not deleted, not expired. */
	visible(id: string, now: number): TurnRow | null {
		const turn = this.turn(id);
		return turn && !turn.hidden && turn.created_at + RESPONSE_TTL_MS >= now ? turn : null;
	}

	/**
	 * Deletes a response, or hides it while later responses continue from it; then the earlier
	 * responses that were only kept for it.
	 */
	remove(id: string, now: number = Date.now()): void {
		let current: string | null = id;
		let hide = true;
		while (current) {
			const turn: TurnRow | null = this.turn(current);
			if (!turn) return;
			if (this.sql.exec("SELECT 1 FROM turns WHERE prev = ? LIMIT 1", current).toArray().length) {
				if (hide) {
					this.sql.exec("UPDATE turns SET hidden = 1 WHERE id = ?", current);
					this.docs.remove(current, ["response", "job"]);
				}
				return;
			}
			this.sql.exec("DELETE FROM turns WHERE id = ?", current);
			this.docs.remove(current);
			const prev: string | null = turn.prev;
			if (!prev) return;
			// The one before goes too when it was only kept for this one (deleted or expired).
			const before = this.sql
				.exec<{ gone: number }>("SELECT hidden OR created_at + ? < ? AS gone FROM turns WHERE id = ?", RESPONSE_TTL_MS, now, prev)
				.toArray()[0];
			if (!before?.gone) return;
			current = prev;
			hide = false;
		}
	}

	/** Removes expired responses nothing continues from (and rows of layout 1 past their time). */
	collect(now: number): void {
		const expired = this.sql
			.exec<{ id: string }>(`SELECT id FROM turns t WHERE created_at + ? < ? AND ${LEAF}`, RESPONSE_TTL_MS, now)
			.toArray();
		for (const { id } of expired) this.remove(id, now);
		if (this.hasTable("responses")) {
			this.sql.exec("DELETE FROM responses WHERE created_at + ? < ?", RESPONSE_TTL_MS, now);
			if (this.sql.exec("SELECT 1 FROM responses LIMIT 1").toArray().length === 0) this.sql.exec("DROP TABLE responses");
		}
	}

	/** When the next response can expire (null: none stored). */
	nextExpiry(): number | null {
		const leaf = this.sql.exec<{ t: number | null }>(`SELECT MIN(created_at) AS t FROM turns t WHERE ${LEAF}`).one().t;
		const legacy = this.hasTable("responses")
			? this.sql.exec<{ t: number | null }>("SELECT MIN(created_at) AS t FROM responses").one().t
			: null;
		const oldest = leaf === null ? legacy : legacy === null ? leaf : Math.min(leaf, legacy);
		return oldest === null ? null : oldest + RESPONSE_TTL_MS;
	}

	hasTable(name: string): boolean {
		return this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", name).toArray().length > 0;
	}

	private turn(id: string): TurnRow | null {
		this.adopt(id);
		return (
			this.sql.exec<TurnRow>("SELECT status, prev, hidden, created_at, error FROM turns WHERE id = ?", id).toArray()[0] ?? null
		);
	}

	/**
	 * Layout 1 kept a response as one JSON row in `responses` (its input twice, every earlier
	 * turn again); such a row is moved to this layout when it is first read.
	 */
	private adopt(id: string): void {
		if (!this.hasTable("responses")) return;
		const row = this.sql
			.exec<{ record: string; created_at: number }>("SELECT record, created_at FROM responses WHERE id = ?", id)
			.toArray()[0];
		if (!row) return;
		const record = JSON.parse(row.record) as { response: Item; inputItems?: Item[]; contextItems?: Item[] };
		const input = record.inputItems ?? [];
		const output = Array.isArray(record.response.output) ? (record.response.output as Item[]) : [];
		const all = record.contextItems ?? [];
		// The context was [...earlier turns, ...input, ...output]: the earlier turns are kept as this one's context.
		const context = all.slice(0, Math.max(0, all.length - input.length - output.length));
		this.transaction(() => {
			this.sql.exec(
				"INSERT OR IGNORE INTO turns (id, prev, created_at, status) VALUES (?, NULL, ?, ?)",
				id,
				row.created_at,
				String(record.response.status ?? "completed"),
			);
			this.docs.put(id, RESPONSE_SEQ, "response", { ...record.response, output: [] });
			this.docs.putItems(id, 1, "context", context, row.created_at);
			this.docs.putItems(id, 1 + context.length, "input", input, row.created_at);
			this.docs.putItems(id, 1 + context.length + input.length, "output", output, row.created_at);
			this.sql.exec("DELETE FROM responses WHERE id = ?", id);
		});
	}
}
