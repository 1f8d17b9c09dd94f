import { and, desc, eq, lt } from "drizzle-orm";
import { drizzle } from "drizzle-orm/d1";
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
		/** Newest first; `before` is the created_at/id cursor of the last row of the previous page. */
		async list(limit: number, before?: { createdAt: number }): Promise<ApiKeyRow[]> {
			return db
				.select()
				.from(apiKeys)
				.where(before ? lt(apiKeys.createdAt, before.createdAt) : undefined)
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
