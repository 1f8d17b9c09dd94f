import { runDurableObjectAlarm } from "cloudflare:test";
import type { KeyLedger } from "../../src/ledger/key-ledger";
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
