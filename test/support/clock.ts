import { vi } from "vitest";

/**
 * Runs `fn` with the clock at `ms` and puts the real clock back once it settles. The Durable
 * Objects under test run in the test's own isolate, so this is also the clock their `Date.now()`
 * reads: a test decides the time a ledger call sees without the call taking a time of its own.
 * The clock stays still while `fn` runs. `fn` may be synchronous (inside runInDurableObject).
 */
export async function at<T>(ms: number, fn: () => T): Promise<Awaited<T>> {
	vi.setSystemTime(ms);
	try {
		return await fn();
	} finally {
		vi.useRealTimers();
	}
}
