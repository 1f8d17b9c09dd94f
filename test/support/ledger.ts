import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { expect } from "vitest";
import type { KeyLedger } from "../../src/ledger/durable/key-ledger";
import type { UsageRecordInput } from "../../src/ledger/durable/usage-flush";
import { waitFor } from "./gateway";

/**
 * Flushes a ledger's usage outbox to D1 now, by running its alarm, and returns once the outbox
 * is empty. A settle plans that alarm 200 ms ahead, so the runtime may fire it first: then
 * runDurableObjectAlarm finds nothing to run, and this waits for the runtime's run to finish.
 */
export async function flushUsage(stub: DurableObjectStub<KeyLedger>, timeoutMs = 10_000): Promise<void> {
	await waitFor(async () => {
		if ((await stub.info()).outboxSize === 0) return true;
		await runDurableObjectAlarm(stub);
		return (await stub.info()).outboxSize === 0;
	}, timeoutMs);
}

/** A minimal usage record for a settlement made straight through a ledger stub. */
export function record(keyId: string): UsageRecordInput {
	return {
		key_id: keyId,
		model: "test/ok",
		node: null,
		prompt_tokens: 1,
		completion_tokens: 1,
		status: "completed",
		estimated: false,
	};
}

/** The KeyLedger Durable Object of a key id. */
export function ledger(keyId: string): DurableObjectStub<KeyLedger> {
	return (env.LEDGER as DurableObjectNamespace<KeyLedger>).get(env.LEDGER.idFromName(keyId));
}

/** A key id no other test uses, so a test gets a ledger of its own: `key_<prefix>_<label>_<random>`. */
export function freshKeyId(prefix: string, label: string): string {
	return `key_${prefix}_${label}_${crypto.randomUUID().slice(0, 12)}`;
}

/** A key's usage records in D1 (its outbox flushed first): request id, cost and status. */
export async function usageRows(keyId: string): Promise<Array<{ request_id: string; cost_nanos: number; status: string }>> {
	await flushUsage(ledger(keyId));
	const rows = await env.DB.prepare("SELECT request_id, cost_nanos, status FROM usage_records WHERE key_id = ?")
		.bind(keyId)
		.all<{ request_id: string; cost_nanos: number; status: string }>();
	return rows.results;
}

/**
 * The books of a key once nothing of it is held: no open hold, nothing held, at most one usage record
 * per request, the records add up to what the ledger debited, and the balance is `creditNanos` less
 * that. Returns the ledger's view, the records and what they charged.
 */
export async function expectBooks(keyId: string, creditNanos: number, timeoutMs = 10_000) {
	const info = await waitFor(async () => {
		const i = await ledger(keyId).info();
		return i.openHolds === 0 && i.heldNanos === 0 ? i : null;
	}, timeoutMs).catch(() => ledger(keyId).info());
	expect(info).toMatchObject({ openHolds: 0, heldNanos: 0 });
	const rows = await usageRows(keyId);
	const ids = rows.map((r) => r.request_id);
	expect(new Set(ids).size).toBe(ids.length);
	const charged = rows.reduce((s, r) => s + r.cost_nanos, 0);
	expect(info.spentNanos).toBe(charged);
	expect(info.balanceNanos).toBe(creditNanos - charged);
	return { info, rows, charged };
}

/** When the open hold of `requestId` on `keyId`'s ledger expires (Unix ms), or null once it is settled. */
export function holdExpiry(keyId: string, requestId: string): Promise<number | null> {
	return runInDurableObject(
		ledger(keyId),
		(_i, state) =>
			state.storage.sql.exec<{ e: number }>("SELECT expires_at AS e FROM holds WHERE request_id = ?", requestId).toArray()[0]
				?.e ?? null,
	);
}

/** When a request's slot lease ends (its hold_limits row for the key), or null when it holds none. */
export function slotUntil(keyId: string, requestId: string): Promise<number | null> {
	return runInDurableObject(
		ledger(keyId),
		(_i, state) =>
			state.storage.sql
				.exec<{ t: number | null }>(
					"SELECT slot_until AS t FROM hold_limits WHERE request_id = ? AND scope = ?",
					requestId,
					keyId,
				)
				.toArray()[0]?.t ?? null,
	);
}
