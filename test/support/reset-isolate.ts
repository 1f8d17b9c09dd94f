/**
 * The one place tests reset what an isolate keeps in module memory between requests. Production
 * code never calls these: an isolate's caches, allowances and settlement queues live as long as
 * the isolate. Each reset is also exported on its own, for a test that must keep the rest (in the
 * shared workerd, `npm run test:unit`, another file's settlements may still be on their way).
 */
import { forgetMemoisedKeys } from "../../src/auth/key-cache";
import { forgetAllowances } from "../../src/ledger/edge-allowance-state";
import { forgetSettleQueues } from "../../src/ledger/settle-batch";

export { forgetAllowances, forgetMemoisedKeys, forgetSettleQueues };

/** Forgets every memoised key, allowance and settlement queue of this isolate. */
export function resetIsolate(): void {
	forgetMemoisedKeys();
	forgetAllowances();
	forgetSettleQueues();
}
