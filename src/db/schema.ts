import { index, integer, primaryKey, sqliteTable, text } from "drizzle-orm/sqlite-core";
import type { AlertRule } from "../alerts/rules";

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
		/** Requests in flight at once (streams until their last byte, background responses); a token's count inside its parent's. */
		maxConcurrent: integer("max_concurrent"),
		/** Requests per minute of each end user (the request's `user`/`safety_identifier`, Messages' `metadata.user_id`). */
		perUserRpm: integer("per_user_rpm"),
		/** Spend per UTC day of each end user, nano-dollars. */
		perUserDailyNanos: integer("per_user_daily_nanos"),
		metadata: text("metadata", { mode: "json" }).$type<Record<string, string>>(),
		/** Set on short-lived `vk-tmp-` tokens: the key that minted them and whose balance they draw on. */
		parentKeyId: text("parent_key_id"),
		/** Spend alert rules (docs/operations.md, "Alerts"); their state lives in the key's ledger. */
		alerts: text("alerts", { mode: "json" }).$type<AlertRule[]>(),
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
		/** Prompt tokens the engine served from its prefix cache (billed at the cached-input price); 0 on older rows. */
		cachedTokens: integer("cached_tokens").notNull().default(0),
		/** Tool calls whose broken JSON arguments the gateway repaired (`tool_call_repair`); 0 on older rows. */
		toolCallsRepaired: integer("tool_calls_repaired").notNull().default(0),
		createdAt: integer("created_at").notNull(),
		/** The API the request came in on (`chat`, `completions`, `embeddings`, `responses`, `messages`); null on older records. */
		lane: text("lane"),
		/** The end user the request named (`user`/`safety_identifier`, Messages' `metadata.user_id`), at most 256 characters; null when none. */
		endUser: text("end_user"),
		/**
		 * The flush attempt that inserted the row (a random token per attempt; null on rows from before
		 * rollups). The flush rolls up only the rows carrying its own token, so a retried flush, whose rows
		 * are already there with an earlier attempt's token, adds nothing to usage_hourly.
		 */
		flushId: integer("flush_id"),
		/** The batch a batch line's record belongs to, and the line's `custom_id`; null on interactive requests. */
		batchId: text("batch_id"),
		customId: text("custom_id"),
	},
	(t) => [
		index("usage_key_created_idx").on(t.keyId, t.createdAt),
		index("usage_created_idx").on(t.createdAt),
		index("usage_key_end_user_idx").on(t.keyId, t.endUser, t.createdAt),
	],
);

/**
 * Usage per hour, paying key and served model: the sums of the usage records, written in the same
 * D1 batch as the records (ledger/durable/usage-flush.ts), so they always add up. Deleting old raw records
 * (maintenance/retention.ts) never touches them; the summary API reads only these.
 */
export const usageHourly = sqliteTable(
	"usage_hourly",
	{
		/** Start of the UTC hour, unix ms. */
		hour: integer("hour").notNull(),
		/** The paying key, as on the usage records. */
		keyId: text("key_id").notNull(),
		/** The model that served. */
		model: text("model").notNull(),
		requests: integer("requests").notNull(),
		promptTokens: integer("prompt_tokens").notNull(),
		completionTokens: integer("completion_tokens").notNull(),
		costNanos: integer("cost_nanos").notNull(),
		searchCount: integer("search_count").notNull(),
		cachedTokens: integer("cached_tokens").notNull().default(0),
	},
	(t) => [primaryKey({ columns: [t.hour, t.keyId, t.model] }), index("usage_hourly_key_hour_idx").on(t.keyId, t.hour)],
);

/**
 * Files uploaded for the batch lane (`/v1/files`) and the output and error files batches write.
 * The bytes are in R2 (`BATCH_FILES`, key = id); the row says whose they are.
 */
export const batchFiles = sqliteTable(
	"batch_files",
	{
		id: text("id").primaryKey(),
		/** The calling key (a `vk-tmp-` token's own id): only it sees the file. */
		keyId: text("key_id").notNull(),
		purpose: text("purpose").notNull(),
		filename: text("filename").notNull(),
		bytes: integer("bytes").notNull(),
		createdAt: integer("created_at").notNull(),
	},
	(t) => [index("batch_files_key_idx").on(t.keyId, t.createdAt)],
);

/**
 * Batches, as the API shows them. The model's BatchDispatcher Durable Object owns the lines and
 * their state; it writes status, counts and cost here at each change (batches/dispatcher.ts).
 */
export const batches = sqliteTable(
	"batches",
	{
		id: text("id").primaryKey(),
		keyId: text("key_id").notNull(),
		model: text("model").notNull(),
		endpoint: text("endpoint").notNull(),
		inputFileId: text("input_file_id").notNull(),
		status: text("status").notNull(),
		completionWindow: text("completion_window").notNull(),
		metadata: text("metadata", { mode: "json" }).$type<Record<string, string>>(),
		/** Validation errors (`{code, message, line, param}`), when the batch failed. */
		errors: text("errors", { mode: "json" }).$type<Array<Record<string, unknown>>>(),
		outputFileId: text("output_file_id"),
		errorFileId: text("error_file_id"),
		total: integer("total").notNull().default(0),
		completed: integer("completed").notNull().default(0),
		failed: integer("failed").notNull().default(0),
		/** What the batch's lines have been billed so far (nano-dollars). */
		costNanos: integer("cost_nanos").notNull().default(0),
		createdAt: integer("created_at").notNull(),
		expiresAt: integer("expires_at").notNull(),
		/** When each status was reached (ms): in_progress, finalizing, completed, failed, expired, cancelling, cancelled. */
		times: text("times", { mode: "json" }).$type<Record<string, number>>(),
	},
	(t) => [index("batches_key_idx").on(t.keyId, t.createdAt)],
);

export type ApiKeyRow = typeof apiKeys.$inferSelect;
export type UsageRow = typeof usageRecords.$inferSelect;

/**
 * Alert webhook deliveries (docs/operations.md, "Alerts"), as the Durable Object that sends each
 * one last wrote it (db/alert-deliveries.ts): key spend alerts from the key's ledger, node alerts
 * from NodeHealth. `target` is the webhook's origin only (a URL's path or query may hold a token).
 */
export const alertDeliveries = sqliteTable(
	"alert_deliveries",
	{
		id: text("id").primaryKey(),
		/** The rule's `when` (balance_below_usd, spent_pct_of_cap, exhausted) or node_down / node_back. */
		event: text("event").notNull(),
		keyId: text("key_id"),
		/** The key's name, or the node (its masked URL). */
		subject: text("subject"),
		target: text("target"),
		status: text("status").$type<"pending" | "delivered" | "failed">().notNull(),
		attempts: integer("attempts").notNull(),
		lastCode: integer("last_code"),
		lastError: text("last_error"),
		/** The JSON body sent (what the receiver gets, without the signature). */
		payload: text("payload").notNull(),
		createdAt: integer("created_at").notNull(),
		nextAttemptAt: integer("next_attempt_at"),
		deliveredAt: integer("delivered_at"),
		updatedAt: integer("updated_at").notNull(),
	},
	(t) => [index("alert_deliveries_created_idx").on(t.createdAt), index("alert_deliveries_key_idx").on(t.keyId, t.createdAt)],
);
export type AlertDeliveryRecord = typeof alertDeliveries.$inferSelect;

/**
 * Requests the gateway refused (401, 402, 429, 400, …) on the inference lanes, for the console's
 * trouble view. Bounded: each isolate records at most a few a minute (observability/refusals.ts)
 * and counts the rest in the next row's `suppressed`; the maintenance job deletes rows past
 * `REFUSAL_RETENTION_DAYS` (maintenance/refusal-retention.ts).
 */
export const refusedRequests = sqliteTable(
	"refused_requests",
	{
		requestId: text("request_id").primaryKey(),
		/** Unix ms. */
		createdAt: integer("created_at").notNull(),
		status: integer("status").notNull(),
		/** The error's code (`invalid_api_key`, `insufficient_balance`, `rate_limit_exceeded`, …). */
		code: text("code"),
		/** The error's message as the client got it, bounded. */
		message: text("message"),
		lane: text("lane").notNull(),
		/** The paying key; null when none authenticated (a 401). */
		keyId: text("key_id"),
		/** The `model` the client asked for. */
		model: text("model"),
		/** Refusals this isolate did not record in the minute before this one (over its cap). */
		suppressed: integer("suppressed").notNull().default(0),
	},
	(t) => [index("refused_created_idx").on(t.createdAt), index("refused_key_created_idx").on(t.keyId, t.createdAt)],
);

export type RefusedRow = typeof refusedRequests.$inferSelect;
export type BatchFileRow = typeof batchFiles.$inferSelect;
export type BatchRow = typeof batches.$inferSelect;
