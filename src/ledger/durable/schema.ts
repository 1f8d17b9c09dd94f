/**
 * The KeyLedger's SQLite tables, as migrations (storage/migrations.ts). Released migrations are
 * never edited: a change to a table is a new migration at the end of LEDGER_MIGRATIONS.
 */
import { ALERT_OUTBOX_SQL } from "../../alerts/outbox";
import { hasColumn, type Migration } from "../../storage/migrations";

/** Version 1: the tables as they were before the ledger had a schema version. */
const TABLES_V1 = `
	CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v);
	CREATE TABLE IF NOT EXISTS holds (request_id TEXT PRIMARY KEY, amount INTEGER NOT NULL, created_at INTEGER NOT NULL);
	-- One row per settled request: the idempotency record and, until flushed to D1, the usage outbox.
	CREATE TABLE IF NOT EXISTS settlements (request_id TEXT PRIMARY KEY, cost INTEGER NOT NULL, balance_after INTEGER NOT NULL, created_at INTEGER NOT NULL, record TEXT, attempts INTEGER NOT NULL DEFAULT 0);
	CREATE INDEX IF NOT EXISTS settlements_created ON settlements (created_at);
	CREATE INDEX IF NOT EXISTS settlements_outbox ON settlements (request_id) WHERE record IS NOT NULL;
	CREATE TABLE IF NOT EXISTS credits (idempotency_key TEXT PRIMARY KEY, amount INTEGER NOT NULL, balance_after INTEGER NOT NULL, note TEXT, created_at INTEGER NOT NULL);
`;

/** Version 1 of the limit tables (limits.ts): rate windows, the limits each open hold counts against, spend per period. */
const LIMIT_TABLES_V1 = `
	CREATE TABLE IF NOT EXISTS rate_events (request_id TEXT NOT NULL, scope TEXT NOT NULL, at INTEGER NOT NULL, tokens INTEGER NOT NULL, PRIMARY KEY (request_id, scope));
	CREATE INDEX IF NOT EXISTS rate_events_scope_at ON rate_events (scope, at);
	CREATE TABLE IF NOT EXISTS hold_limits (request_id TEXT NOT NULL, scope TEXT NOT NULL, spend INTEGER NOT NULL, rated INTEGER NOT NULL, PRIMARY KEY (request_id, scope));
	CREATE INDEX IF NOT EXISTS hold_limits_scope ON hold_limits (scope);
	CREATE TABLE IF NOT EXISTS spend_periods (scope TEXT PRIMARY KEY, total INTEGER NOT NULL, day_start INTEGER NOT NULL, day INTEGER NOT NULL, week_start INTEGER NOT NULL, week INTEGER NOT NULL, month_start INTEGER NOT NULL, month INTEGER NOT NULL);
`;

export const LEDGER_MIGRATIONS: readonly Migration[] = [
	{
		name: "balance, holds, settlements (the usage outbox), credits and limits",
		up(sql) {
			sql.exec(TABLES_V1);
			sql.exec(LIMIT_TABLES_V1);
		},
	},
	{
		// A hold carries its own expiry (a queued background response needs longer than HOLD_TTL_MS).
		// Holds from before it expire HOLD_TTL_MS after they were placed (COALESCE in key-ledger.ts).
		// Ledgers from before schema versions may have added the column already.
		name: "holds.expires_at",
		up(sql) {
			if (!hasColumn(sql, "holds", "expires_at")) sql.exec("ALTER TABLE holds ADD COLUMN expires_at INTEGER");
		},
	},
	{
		// Edge allowances (allowance-grants.ts, docs/allowances.md): an isolate's reservation, counted
		// as held until its expiry; and the keys (this ledger's own, or tokens it pays for) revoked
		// since, which the ledger refuses to hold for.
		name: "allowances and revoked scopes",
		up(sql) {
			sql.exec(`
				CREATE TABLE IF NOT EXISTS allowances (id TEXT PRIMARY KEY, amount INTEGER NOT NULL, unit INTEGER NOT NULL, expires_at INTEGER NOT NULL, revoked INTEGER NOT NULL DEFAULT 0);
				CREATE TABLE IF NOT EXISTS revoked_scopes (scope TEXT PRIMARY KEY, at INTEGER NOT NULL);
			`);
		},
	},
	{
		// Concurrency slots (slots.ts): a hold's limit row under a scope with max_concurrent is its
		// slot, leased until slot_until; null on other rows.
		name: "hold_limits.slot_until",
		up(sql) {
			if (!hasColumn(sql, "hold_limits", "slot_until")) sql.exec("ALTER TABLE hold_limits ADD COLUMN slot_until INTEGER");
		},
	},
	{
		// Spend alerts (alerts.ts): each rule's armed flag, and the deliveries the alarm sends.
		name: "alert rules' state and deliveries",
		up(sql) {
			sql.exec("CREATE TABLE IF NOT EXISTS alert_arms (rule TEXT PRIMARY KEY, armed INTEGER NOT NULL)");
			sql.exec(ALERT_OUTBOX_SQL);
		},
	},
];
