/**
 * The ResponseStore's tables as ordered migrations (src/storage/migrations.ts), run once each on
 * load. A new column or table is a new migration at the end; released ones never change.
 * Stores from before versions (the first layout: a `responses` table and a `jobs` queue) are
 * version 0; the second layout recorded version 2 itself, which is where this list has it.
 */

import type { Migration } from "../storage/migrations";
import { ITEM_INDEX_SCHEMA } from "./item-index";
import { PAYER_SLOTS_SCHEMA } from "./payer-slots";
import { TURNS_SCHEMA, type Turns } from "./turns";

export function responseStoreMigrations(turns: Turns): Migration[] {
	return [
		{
			name: "queue, turns and their stored documents",
			up: (sql) =>
				sql.exec(`
					CREATE TABLE IF NOT EXISTS queue (id TEXT PRIMARY KEY, state TEXT NOT NULL, since INTEGER NOT NULL, hold TEXT);
					${TURNS_SCHEMA}
				`),
		},
		{
			// Jobs of the first layout never ran on a hold placed for them: they fail, to be retried by the client.
			name: "first-layout background jobs fail and go",
			up: (sql) => {
				if (!turns.hasTable("jobs")) return;
				for (const { id } of sql.exec<{ id: string }>("SELECT id FROM jobs").toArray()) {
					turns.markFailed(id, {
						code: "server_error",
						message: "The background run was interrupted by an upgrade. Please retry.",
					});
				}
				sql.exec("DROP TABLE jobs");
			},
		},
		{
			name: "item index, backfilled from the stored items",
			up: (sql) => {
				sql.exec(ITEM_INDEX_SCHEMA);
				turns.indexStoredItems();
			},
		},
		{
			name: "slots of the background jobs this key pays for in its tokens' stores",
			up: (sql) => sql.exec(PAYER_SLOTS_SCHEMA),
		},
	];
}
