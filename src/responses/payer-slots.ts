/**
 * The background jobs a key pays for that are queued in its tokens' stores. A `vk-tmp-` token's
 * responses (and so its queue) live in the token's own ResponseStore, but `max_queued_responses`
 * counts per paying key: the payer's store keeps one slot per token job, claimed before the job
 * is stored and given back when it leaves the token's queue. A slot whose give-back was lost
 * (an evicted object, a failed call) is found by asking the token's store whether it still holds
 * the job, once the slot is older than SLOT_GRACE_MS (a claim is made just before its job is stored).
 */

/** A slot younger than this is never checked: its job may not be stored yet. */
export const SLOT_GRACE_MS = 60_000;

export const PAYER_SLOTS_SCHEMA =
	"CREATE TABLE IF NOT EXISTS payer_slots (id TEXT PRIMARY KEY, caller TEXT NOT NULL, since INTEGER NOT NULL)";

export interface PayerSlot {
	id: string;
	caller: string;
}

export class PayerSlots {
	constructor(private readonly sql: SqlStorage) {}

	count(): number {
		return this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM payer_slots").one().n;
	}

	add(id: string, caller: string, now: number): void {
		this.sql.exec("INSERT OR IGNORE INTO payer_slots (id, caller, since) VALUES (?, ?, ?)", id, caller, now);
	}

	remove(id: string): void {
		this.sql.exec("DELETE FROM payer_slots WHERE id = ?", id);
	}

	/** Slots old enough to check whether their job is still queued. */
	checkable(now: number): PayerSlot[] {
		return this.sql
			.exec<{ id: string; caller: string }>("SELECT id, caller FROM payer_slots WHERE since < ?", now - SLOT_GRACE_MS)
			.toArray()
			.map((r) => ({ id: r.id, caller: r.caller }));
	}
}
