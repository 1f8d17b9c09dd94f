import { index, integer, sqliteTable, text } from "drizzle-orm/sqlite-core";

/** API keys. Only the SHA-256 digest of the secret is stored; balances live in each key's ledger Durable Object. */
export const apiKeys = sqliteTable(
	"api_keys",
	{
		id: text("id").primaryKey(),
		name: text("name").notNull(),
		hash: text("hash").notNull().unique(),
		/** First characters of the secret, to tell keys apart in listings. */
		prefix: text("prefix").notNull(),
		createdAt: integer("created_at").notNull(),
		revokedAt: integer("revoked_at"),
		expiresAt: integer("expires_at"),
		allowedOrigins: text("allowed_origins", { mode: "json" }).$type<string[]>(),
		allowedModels: text("allowed_models", { mode: "json" }).$type<string[]>(),
		rpm: integer("rpm"),
		tpm: integer("tpm"),
		spendLimitNanos: integer("spend_limit_nanos"),
		spendLimitPeriod: text("spend_limit_period"),
		maxTokens: integer("max_tokens"),
		metadata: text("metadata", { mode: "json" }).$type<Record<string, string>>(),
		/** Set on short-lived `vk-tmp-` tokens: the key that minted them and whose balance they draw on. */
		parentKeyId: text("parent_key_id"),
	},
	(t) => [index("api_keys_created_idx").on(t.createdAt), index("api_keys_parent_idx").on(t.parentKeyId)],
);

/** One row per settled request, written by the key's ledger from its outbox (INSERT OR IGNORE by request id). */
export const usageRecords = sqliteTable(
	"usage_records",
	{
		requestId: text("request_id").primaryKey(),
		keyId: text("key_id").notNull(),
		/** The model that served and was billed. */
		model: text("model").notNull(),
		/** The model the client asked for: another than `model` when a fallback served; null on records from before fallbacks. */
		requestedModel: text("requested_model"),
		node: text("node"),
		promptTokens: integer("prompt_tokens").notNull(),
		completionTokens: integer("completion_tokens").notNull(),
		costNanos: integer("cost_nanos").notNull(),
		status: text("status").notNull(),
		estimated: integer("estimated", { mode: "boolean" }).notNull(),
		searchCount: integer("search_count").notNull().default(0),
		createdAt: integer("created_at").notNull(),
	},
	(t) => [index("usage_key_created_idx").on(t.keyId, t.createdAt), index("usage_created_idx").on(t.createdAt)],
);

export type ApiKeyRow = typeof apiKeys.$inferSelect;
export type UsageRow = typeof usageRecords.$inferSelect;
