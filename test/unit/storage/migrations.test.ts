/**
 * The Durable Object migration runner (src/storage/migrations.ts) over a fake storage: the
 * `meta` table is a Map, a transaction rolls it back when its function throws.
 */
import { describe, expect, it } from "vitest";
import { type MigratableStorage, type Migration, migrate } from "../../../src/storage/migrations";

function fakeStorage(initialVersion?: number) {
	let meta = new Map<string, unknown>(initialVersion === undefined ? [] : [["schema_version", initialVersion]]);
	const sql = {
		exec(query: string, ...bindings: unknown[]) {
			let rows: unknown[] = [];
			if (query.startsWith("SELECT v FROM meta WHERE k = ?")) {
				rows = meta.has(bindings[0] as string) ? [{ v: meta.get(bindings[0] as string) }] : [];
			} else if (query.startsWith("INSERT INTO meta")) {
				meta.set(bindings[0] as string, bindings[1]);
			} else if (!query.startsWith("CREATE TABLE IF NOT EXISTS meta")) {
				throw new Error(`unexpected statement: ${query}`);
			}
			return { toArray: () => rows };
		},
	};
	const storage = {
		sql,
		transactionSync<T>(fn: () => T): T {
			const before = new Map(meta);
			try {
				return fn();
			} catch (err) {
				meta = before;
				throw err;
			}
		},
	};
	return { storage: storage as unknown as MigratableStorage, version: () => meta.get("schema_version") };
}

function logging(log: string[], ...names: string[]): Migration[] {
	return names.map((name) => ({ name, up: () => void log.push(name) }));
}

describe("migrate", () => {
	it("runs every migration in order on a new object and records the version", () => {
		const log: string[] = [];
		const { storage, version } = fakeStorage();
		expect(migrate(storage, logging(log, "a", "b", "c"))).toBe(3);
		expect(log).toEqual(["a", "b", "c"]);
		expect(version()).toBe(3);
	});

	it("runs only the migrations after the recorded version, and none on the next load", () => {
		const log: string[] = [];
		const { storage, version } = fakeStorage(1);
		expect(migrate(storage, logging(log, "a", "b", "c"))).toBe(3);
		expect(log).toEqual(["b", "c"]);
		expect(migrate(storage, logging(log, "a", "b", "c"))).toBe(3);
		expect(log).toEqual(["b", "c"]);
		expect(version()).toBe(3);
	});

	it("keeps the last complete version when a migration fails, and retries from there", () => {
		const log: string[] = [];
		const { storage, version } = fakeStorage();
		const failing: Migration[] = [
			...logging(log, "a"),
			{
				name: "b",
				up: () => {
					throw new Error("disk full");
				},
			},
			...logging(log, "c"),
		];
		expect(() => migrate(storage, failing)).toThrow("disk full");
		expect(version()).toBe(1);
		expect(migrate(storage, logging(log, "a", "b", "c"))).toBe(3);
		expect(log).toEqual(["a", "b", "c"]);
	});

	it("runs nothing when the storage is newer than the code (a rollback)", () => {
		const log: string[] = [];
		const { storage, version } = fakeStorage(5);
		expect(migrate(storage, logging(log, "a", "b"))).toBe(5);
		expect(log).toEqual([]);
		expect(version()).toBe(5);
	});
});
