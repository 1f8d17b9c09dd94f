import { and, desc, eq, lt, or } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import { type ApiKeyRow, apiKeys } from "./schema";

export type NewApiKey = typeof apiKeys.$inferInsert;
export type ApiKeyPatch = Partial<Omit<NewApiKey, "id" | "hash" | "prefix" | "createdAt">>;

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
 * and the id non-empty, so nothing but a real position reaches the query.
 */
export function decodePageCursor(cursor: string): PageCursor | null {
	const m = /^(\d{1,16}):(.+)$/.exec(cursor);
	if (!m) return null;
	const createdAt = Number(m[1]);
	return Number.isSafeInteger(createdAt) ? { createdAt, id: m[2] as string } : null;
}

export function keyStore(d1: D1Database) {
	const db = drizzle(d1);
	return {
		async insert(row: NewApiKey): Promise<void> {
			await db.insert(apiKeys).values(row);
		},
		async byHash(hash: string): Promise<ApiKeyRow | undefined> {
			return db.select().from(apiKeys).where(eq(apiKeys.hash, hash)).get();
		},
		async byId(id: string): Promise<ApiKeyRow | undefined> {
			return db.select().from(apiKeys).where(eq(apiKeys.id, id)).get();
		},
		/**
		 * Newest first, ties on created_at broken by id; `before` is the cursor of the last row of the
		 * previous page, so keys created in the same millisecond are neither skipped nor repeated.
		 */
		async list(limit: number, before?: PageCursor): Promise<ApiKeyRow[]> {
			return db
				.select()
				.from(apiKeys)
				.where(
					before
						? or(lt(apiKeys.createdAt, before.createdAt), and(eq(apiKeys.createdAt, before.createdAt), lt(apiKeys.id, before.id)))
						: undefined,
				)
				.orderBy(desc(apiKeys.createdAt), desc(apiKeys.id))
				.limit(limit)
				.all();
		},
		async update(id: string, patch: ApiKeyPatch): Promise<ApiKeyRow | undefined> {
			if (Object.keys(patch).length === 0) return this.byId(id);
			return db.update(apiKeys).set(patch).where(eq(apiKeys.id, id)).returning().get();
		},
		async revoke(id: string, now: number): Promise<ApiKeyRow | undefined> {
			await db
				.update(apiKeys)
				.set({ revokedAt: now })
				.where(and(eq(apiKeys.id, id)))
				.run();
			return this.byId(id);
		},
	};
}
