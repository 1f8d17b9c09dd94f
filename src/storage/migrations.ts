/**
 * Schema versions for a Durable Object's SQLite storage: an ordered list of migrations, run on
 * load, each once. The version is the number of migrations applied, kept in the object's `meta`
 * table (`k TEXT PRIMARY KEY, v`) under `schema_version`; an object from before versions has
 * none, which is version 0, so the first migration must accept tables that already exist
 * (`CREATE TABLE IF NOT EXISTS`). A migration, once released, never changes: a new column is a
 * new migration at the end of the list.
 */

/** What migrations and the runner use of SqlStorage. */
export type SqlExec = Pick<SqlStorage, "exec">;

export interface Migration {
	/** What it changes, for readers and the log. */
	name: string;
	up(sql: SqlExec): void;
}

/** What the runner needs of DurableObjectStorage (a test passes a fake). */
export interface MigratableStorage {
	sql: SqlExec;
	transactionSync<T>(fn: () => T): T;
}

const VERSION_KEY = "schema_version";

/** The version recorded in `meta`: 0 when there is none (a new object, or one from before versions). */
export function schemaVersion(sql: SqlExec): number {
	const row = sql.exec<{ v: SqlStorageValue }>("SELECT v FROM meta WHERE k = ?", VERSION_KEY).toArray()[0];
	return row ? Number(row.v) : 0;
}

/**
 * Brings the storage up to the end of `migrations` (`migrations[i]` takes version i to i + 1)
 * and returns the version it is at. Each migration runs in one transaction with the version it
 * reaches, so a failure leaves the last complete version and the next load tries again. A version
 * past the list (the code was rolled back) runs nothing: migrations add, so older code still
 * reads the tables it knows.
 */
export function migrate(storage: MigratableStorage, migrations: readonly Migration[]): number {
	const { sql } = storage;
	sql.exec("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v)");
	let version = schemaVersion(sql);
	if (version > migrations.length) {
		console.warn(`storage schema version ${version} is newer than this code's ${migrations.length}; running without migrating`);
	}
	for (; version < migrations.length; version++) {
		const migration = migrations[version] as Migration;
		const reached = version + 1;
		storage.transactionSync(() => {
			migration.up(sql);
			sql.exec("INSERT INTO meta (k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v", VERSION_KEY, reached);
		});
	}
	return version;
}

/** Whether `table` has `column`: for a migration that objects from before versions may already have applied by hand. */
export function hasColumn(sql: SqlExec, table: string, column: string): boolean {
	return sql
		.exec<{ name: string }>("SELECT name FROM pragma_table_info(?)", table)
		.toArray()
		.some((c) => c.name === column);
}
