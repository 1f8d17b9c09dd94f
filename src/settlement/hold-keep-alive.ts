/**
 * A running request's hold, kept alive while the request moves. A hold lives 15 minutes
 * (src/ledger/durable/holds.ts); a long generation renews it every HOLD_KEEPALIVE_MS so the
 * balance it covers is never handed out twice. A request that moved nothing since the last
 * renewal (a stream whose client stopped reading, an engine that went quiet) is not renewed:
 * its own timeouts end it (client_idle_timeout_ms, stream_idle_timeout_ms), and if they are set
 * longer than a hold lives, the hold lapses instead of being pinned by an open socket.
 */
import { errorText, logEvent } from "../observability/log-event";

/** A third of the ledger's 15-minute hold lifetime: two renewals may fail before a hold lapses. */
export const HOLD_KEEPALIVE_MS = 5 * 60 * 1000;

export interface HoldKeepAlive {
	/** Settlement: no more renewals. */
	stop(): void;
}

/**
 * Calls `renew` every `everyMs` while `progress()` (a count that grows as the request moves:
 * frames taken by its client, engine data read) has grown since the previous tick; never throws.
 */
export function keepHoldAlive(opts: {
	everyMs: number;
	progress: () => number;
	renew: () => Promise<void>;
	requestId: string;
}): HoldKeepAlive {
	let seen = opts.progress();
	const timer = setInterval(() => {
		const now = opts.progress();
		if (now === seen) {
			logEvent("warn", "hold not renewed: the request made no progress since the last renewal", {
				request_id: opts.requestId,
			});
			return;
		}
		seen = now;
		opts.renew().catch((err) => {
			logEvent("warn", "keeping the hold alive failed", { request_id: opts.requestId, error: errorText(err) });
		});
	}, opts.everyMs);
	return { stop: () => clearInterval(timer) };
}
