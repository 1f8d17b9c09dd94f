/**
 * A running request's hold, kept alive while the request moves. A hold lives 15 minutes
 * (src/ledger/durable/holds.ts); a long generation renews it every HOLD_KEEPALIVE_MS so the
 * balance it covers is never handed out twice. A request that moved nothing since the last
 * renewal (a stream whose client stopped reading, an engine that went quiet) is not renewed:
 * its own timeouts end it (client_idle_timeout_ms, stream_idle_timeout_ms), and if they are set
 * longer than a hold lives, the hold lapses instead of being pinned by an open socket.
 */

import { MAX_WAIT_MS } from "../config-schema";
import type { ScopeLimits } from "../ledger/durable/limits";
import { SLOT_LEASE_MS } from "../ledger/durable/slots";
import { errorText, logEvent } from "../observability/log-event";

/** A third of the ledger's 15-minute hold lifetime: two renewals may fail before a hold lapses. */
export const HOLD_KEEPALIVE_MS = 5 * 60 * 1000;

/**
 * A request under a concurrency cap (`max_concurrent`) also holds a slot whose lease is shorter
 * (ledger/durable/slots.ts), so that a lost isolate frees its slots within minutes: the same
 * renewal (it extends the hold and the slot in one ledger call) runs four times a lease.
 */
export const SLOT_KEEPALIVE_MS = SLOT_LEASE_MS / 4;

/** How often a request's reservation is renewed: more often when it holds a concurrency slot. */
export function keepAliveEvery(scopes: readonly ScopeLimits[] | undefined): number {
	return scopes?.some((s) => s.maxConcurrent) ? SLOT_KEEPALIVE_MS : HOLD_KEEPALIVE_MS;
}

/**
 * How long a request may stall (move nothing) and still be renewed. A request holding a
 * concurrency slot still holds its engine request while it stalls, until its own timeouts end it
 * (client_idle_timeout_ms, stream_idle_timeout_ms, first_byte_timeout_ms: at most MAX_WAIT_MS
 * each): its slot must count that long, or a client that stops reading would free its slot after
 * one lease and open more engine requests than `max_concurrent`. Past that, it is a lost socket.
 * Other requests are renewed only while they move.
 */
export function keepAliveStallMs(scopes: readonly ScopeLimits[] | undefined): number {
	return scopes?.some((s) => s.maxConcurrent) ? MAX_WAIT_MS : 0;
}

export interface HoldKeepAlive {
	/** Settlement: no more renewals. */
	stop(): void;
}

/**
 * Calls `renew` every `everyMs` while `progress()` (a count that grows as the request moves:
 * frames taken by its client, engine data read) has grown since the previous tick, or it has
 * stalled for at most `stallMs` (keepAliveStallMs); never throws.
 */
export function keepHoldAlive(opts: {
	everyMs: number;
	progress: () => number;
	renew: () => Promise<void>;
	requestId: string;
	stallMs?: number;
}): HoldKeepAlive {
	let seen = opts.progress();
	let stalled = 0;
	const timer = setInterval(() => {
		const now = opts.progress();
		stalled = now === seen ? stalled + opts.everyMs : 0;
		if (now === seen && stalled > (opts.stallMs ?? 0)) {
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
