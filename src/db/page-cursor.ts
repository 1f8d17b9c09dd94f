/**
 * Where a page of a listing ends: the last row's created_at (ms) and id, the listing's sort order.
 * The key listing (`id`) and the usage listing (`request_id`) page the same way.
 */
export interface PageCursor {
	createdAt: number;
	id: string;
}

/** The opaque `next_cursor` of a page: `<created_at ms>:<id>` of its last row. */
export function encodePageCursor(createdAt: number, id: string): string {
	return `${createdAt}:${id}`;
}

/**
 * Parses a cursor made by `encodePageCursor`; null when it is not one: the time must be a
 * non-negative safe integer written in plain digits (no sign, exponent, fraction, `Infinity`)
 * and the id 1–128 printable ASCII characters without spaces (the ids the gateway makes are
 * `key_`/`req_` + hex), so nothing but a real position reaches the query.
 */
export function decodePageCursor(cursor: string): PageCursor | null {
	const m = /^(\d{1,16}):([\x21-\x7e]{1,128})$/.exec(cursor);
	if (!m) return null;
	const createdAt = Number(m[1]);
	return Number.isSafeInteger(createdAt) ? { createdAt, id: m[2] as string } : null;
}

/** One page of newest-first rows: the rows, and the cursor of the next page (null on the last). */
export function pageOf<T>(rows: T[], limit: number, cursorOf: (row: T) => string): { page: T[]; nextCursor: string | null } {
	const page = rows.slice(0, limit);
	const last = page[page.length - 1];
	return { page, nextCursor: rows.length > limit && last !== undefined ? cursorOf(last) : null };
}
