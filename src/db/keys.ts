import { and, desc, eq, lt, or, sql } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
import type { PageCursor } from "./page-cursor";
import { type ApiKeyRow, apiKeys } from "./schema";

export type NewApiKey = typeof apiKeys.$inferInsert;
export type ApiKeyPatch = Partial<Omit<NewApiKey, "id" | "hash" | "prefix" | "createdAt">>;

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
		/** The secret digests of the `vk-tmp-` tokens a key minted. */
		async childHashes(parentKeyId: string): Promise<string[]> {
			const rows = await db.select({ hash: apiKeys.hash }).from(apiKeys).where(eq(apiKeys.parentKeyId, parentKeyId)).all();
			return rows.map((r) => r.hash);
		},
		/**
		 * Newest first, ties on created_at broken by id; `before` is the cursor of the last row of the
		 * previous page, so keys created in the same millisecond are neither skipped nor repeated.
		 * `nameContains` keeps keys whose name contains it, ignoring ASCII case. instr() rather than LIKE:
		 * no wildcard to escape, and D1 caps LIKE patterns at 50 bytes.
		 */
		async list(limit: number, before?: PageCursor, nameContains?: string): Promise<ApiKeyRow[]> {
			return db
				.select()
				.from(apiKeys)
				.where(
					and(
						before
							? or(
									lt(apiKeys.createdAt, before.createdAt),
									and(eq(apiKeys.createdAt, before.createdAt), lt(apiKeys.id, before.id)),
								)
							: undefined,
						nameContains ? sql`instr(lower(${apiKeys.name}), lower(${nameContains})) > 0` : undefined,
					),
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
