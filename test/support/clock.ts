import { ledgerClock } from "../../src/ledger/durable/clock";

/**
 * Runs `fn` with the ledger's clock (src/ledger/durable/clock.ts) at `ms`, and puts it back once
 * `fn` settles. The ledger Durable Objects run in the test's isolate and share its modules, so a
 * ledger call made in `fn` (over RPC or in runInDurableObject) stamps `ms`; the isolate's own
 * clock, which node health and every other alarm run on, is left alone. `fn` may be synchronous.
 */
export async function at<T>(ms: number, fn: () => T): Promise<Awaited<T>> {
	const real = ledgerClock.now;
	ledgerClock.now = () => ms;
	try {
		return await fn();
	} finally {
		ledgerClock.now = real;
	}
}
