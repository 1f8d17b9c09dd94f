/**
 * Resolves once the runtime has had a turn of its own: work a handler starts through this runs
 * after the response it is returning has been handed over for sending, not before it.
 *
 * A request's bookkeeping (its settlement, its log line) is under waitUntil anyway; started
 * synchronously, it ran its first steps (the ledger call's serialisation, JSON.stringify and
 * console.log) before the runtime could send the answer, and the client waited for them:
 * about 0.6 ms of sequential latency in the bench (bench/HISTORY.md, session 7).
 */
export function afterResponse(): Promise<void> {
	return new Promise((resolve) => setTimeout(resolve, 0));
}
