/**
 * Whether the client has left, allowing for the runtime's order of events: when a client goes
 * away mid-call, workerd can fail the request's subrequest or body read ("Network connection
 * lost") a moment before it fires the request's signal for the same departure. Blaming the
 * node (cooling it, logging an engine failure) needs the signal's answer first.
 */

/** Longest wait for a late client signal after an I/O failure: only failures pay it, never a success. */
export const CLIENT_SIGNAL_GRACE_MS = 25;

/** True when `signal` has fired or fires within `graceMs`; false at once when there is no signal. */
export function clientLeft(signal: AbortSignal | undefined, graceMs = CLIENT_SIGNAL_GRACE_MS): Promise<boolean> {
	if (!signal) return Promise.resolve(false);
	if (signal.aborted) return Promise.resolve(true);
	return new Promise((resolve) => {
		const done = (left: boolean) => {
			clearTimeout(timer);
			signal.removeEventListener("abort", onAbort);
			resolve(left);
		};
		const onAbort = () => done(true);
		const timer = setTimeout(() => done(false), graceMs);
		signal.addEventListener("abort", onAbort, { once: true });
	});
}
