/**
 * KeyLedger schema versions (src/ledger/durable/schema.ts): a new ledger is at the last version,
 * and a ledger from before versions (its tables there, no `schema_version`) upgrades on load
 * with its balance, holds and settlements intact, whether or not it had `holds.expires_at`.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { HOLD_TTL_MS, KeyLedger } from "../../../src/ledger/durable/key-ledger";
import { LEDGER_MIGRATIONS } from "../../../src/ledger/durable/schema";
import { schemaVersion } from "../../../src/storage/migrations";
import { at } from "../../support/clock";

function ledger(label: string): DurableObjectStub<KeyLedger> {
	const id = `key_migrations_${label}_${crypto.randomUUID().slice(0, 8)}`;
	return (env.LEDGER as DurableObjectNamespace<KeyLedger>).get(env.LEDGER.idFromName(id));
}

function columns(sql: SqlStorage, table: string): string[] {
	return sql
		.exec<{ name: string }>(`SELECT name FROM pragma_table_info('${table}')`)
		.toArray()
		.map((c) => c.name);
}

/**
 * Turns the object's storage into a ledger as the code before schema versions left it: the
 * same tables, `holds` with or without `expires_at`, no version; a balance of 1,000 with one
 * open hold of 300 placed at `heldAt`, and one settled request.
 */
function makePreVersionLedger(sql: SqlStorage, withExpiresAt: boolean, heldAt: number): void {
	for (const { name } of sql
		.exec<{ name: string }>(
			"SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\' AND name NOT LIKE 'sqlite%'",
		)
		.toArray()) {
		sql.exec(`DROP TABLE "${name}"`);
	}
	sql.exec(`
		CREATE TABLE meta (k TEXT PRIMARY KEY, v);
		CREATE TABLE holds (request_id TEXT PRIMARY KEY, amount INTEGER NOT NULL, created_at INTEGER NOT NULL${withExpiresAt ? ", expires_at INTEGER" : ""});
		CREATE TABLE settlements (request_id TEXT PRIMARY KEY, cost INTEGER NOT NULL, balance_after INTEGER NOT NULL, created_at INTEGER NOT NULL, record TEXT, attempts INTEGER NOT NULL DEFAULT 0);
		CREATE TABLE credits (idempotency_key TEXT PRIMARY KEY, amount INTEGER NOT NULL, balance_after INTEGER NOT NULL, note TEXT, created_at INTEGER NOT NULL);
		CREATE TABLE rate_events (request_id TEXT NOT NULL, scope TEXT NOT NULL, at INTEGER NOT NULL, tokens INTEGER NOT NULL, PRIMARY KEY (request_id, scope));
		CREATE TABLE hold_limits (request_id TEXT NOT NULL, scope TEXT NOT NULL, spend INTEGER NOT NULL, rated INTEGER NOT NULL, PRIMARY KEY (request_id, scope));
		CREATE TABLE spend_periods (scope TEXT PRIMARY KEY, total INTEGER NOT NULL, day_start INTEGER NOT NULL, day INTEGER NOT NULL, week_start INTEGER NOT NULL, week INTEGER NOT NULL, month_start INTEGER NOT NULL, month INTEGER NOT NULL);
	`);
	sql.exec("INSERT INTO meta (k, v) VALUES ('balance', 1000), ('spent', 0), ('key_id', 'key_old')");
	sql.exec(
		"INSERT INTO credits (idempotency_key, amount, balance_after, note, created_at) VALUES ('initial', 1000, 1000, NULL, ?)",
		heldAt,
	);
	sql.exec("INSERT INTO holds (request_id, amount, created_at) VALUES ('held', 300, ?)", heldAt);
	sql.exec("INSERT INTO settlements (request_id, cost, balance_after, created_at) VALUES ('done', 0, 1000, ?)", heldAt);
}

describe("KeyLedger schema versions", () => {
	it("puts a new ledger at the last version", async () => {
		await runInDurableObject(ledger("new"), (_instance: KeyLedger, state) => {
			expect(schemaVersion(state.storage.sql)).toBe(LEDGER_MIGRATIONS.length);
			expect(columns(state.storage.sql, "holds")).toContain("expires_at");
		});
	});

	for (const withExpiresAt of [false, true]) {
		it(`upgrades a ledger from before versions ${withExpiresAt ? "that already had" : "without"} holds.expires_at, keeping its money`, async () => {
			await runInDurableObject(ledger(`old_${withExpiresAt}`), async (_instance: KeyLedger, state) => {
				const heldAt = 1_000_000;
				makePreVersionLedger(state.storage.sql, withExpiresAt, heldAt);
				expect(schemaVersion(state.storage.sql)).toBe(0);

				// The object as it loads next time: the constructor migrates.
				const upgraded = new KeyLedger(state, env);
				expect(schemaVersion(state.storage.sql)).toBe(LEDGER_MIGRATIONS.length);
				expect(columns(state.storage.sql, "holds").filter((c) => c === "expires_at")).toHaveLength(1);
				expect(upgraded.info()).toEqual({
					keyId: "key_old",
					balanceNanos: 1000,
					spentNanos: 0,
					heldNanos: 300,
					reservedNanos: 0,
					openHolds: 1,
					outboxSize: 0,
				});
				// A replayed settlement still debits nothing; the old hold expires HOLD_TTL_MS after it was placed.
				expect(
					await at(heldAt, () => upgraded.authorize({ payerKeyId: "key_old", requestId: "done", holdNanos: 5 })),
				).toMatchObject({
					ok: true,
					holdNanos: 0,
				});
				expect(await at(heldAt + HOLD_TTL_MS - 1, () => upgraded.expireHolds())).toBe(0);
				expect(await at(heldAt + HOLD_TTL_MS, () => upgraded.expireHolds())).toBe(1);
				expect(upgraded.info().heldNanos).toBe(0);
				// New holds carry their own expiry.
				expect(
					await at(heldAt, () => upgraded.authorize({ payerKeyId: "key_old", requestId: "new", holdNanos: 100, ttlMs: 10 })),
				).toMatchObject({
					ok: true,
				});
				expect(await at(heldAt + 10, () => upgraded.expireHolds())).toBe(1);
				// Loading again migrates nothing more.
				new KeyLedger(state, env);
				expect(schemaVersion(state.storage.sql)).toBe(LEDGER_MIGRATIONS.length);
			});
		});
	}
});
