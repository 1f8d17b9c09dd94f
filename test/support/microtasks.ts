/**
 * Resolves once the microtasks queued so far, and every one they queue in turn, have run: the
 * next macrotask. For "nothing more happens" checks on promise- and stream-driven code that no
 * timer drives (a stream's pulls, a `finally`): not a wait on the clock, so not load-sensitive.
 */
export function microtasksDone(): Promise<void> {
	return new Promise((resolve) => setImmediate(resolve));
}
