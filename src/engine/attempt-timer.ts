/**
 * One attempt's wait for its first token: `first_byte_timeout_ms` plus the prompt's prefill time
 * at the node's rate (routing/node-state.ts), within the request's overall deadline. Whichever
 * ends first aborts the attempt, and the caller reads which one did: a first-token timeout is the
 * node's (the next node is tried), the deadline is the request's (it ends, no node blamed).
 */
import { MAX_WAIT_MS } from "../config-schema";
import { GatewayError } from "../errors";
import { isLongPrompt, prefillAllowanceMs } from "../routing/node-state";

export interface AttemptTimerOptions {
	firstByteTimeoutMs: number;
	/** The prompt's tokens (the estimate): its prefill time is added to the wait. */
	promptTokens: number;
	/** The node's prefill rate (configured, learned, or the default). */
	prefillTokensPerS: number;
	/** The request's overall deadline (epoch ms), if it has one. */
	deadlineAt?: number;
	now: number;
}

export class AttemptTimer {
	/** What ended the wait, once something did. */
	expired: "first_token" | "request" | null = null;
	/** The prompt is long for this node: a timeout may be its prefill rather than a mute node. */
	readonly long: boolean;
	/** How long the attempt may wait for its first token. */
	readonly waitMs: number;
	readonly #timer: ReturnType<typeof setTimeout>;

	constructor(controller: AbortController, opts: AttemptTimerOptions) {
		const allowance = prefillAllowanceMs(opts.promptTokens, opts.prefillTokensPerS);
		this.long = allowance > 0 && isLongPrompt(allowance, opts.firstByteTimeoutMs);
		// Never past MAX_WAIT_MS: a request that moves nothing for longer would let its hold lapse.
		const firstToken = Math.min(MAX_WAIT_MS, opts.firstByteTimeoutMs + allowance);
		const left = opts.deadlineAt === undefined ? Number.POSITIVE_INFINITY : opts.deadlineAt - opts.now;
		const which = left < firstToken ? "request" : "first_token";
		this.waitMs = Math.max(0, Math.min(firstToken, left));
		this.#timer = setTimeout(() => {
			this.expired = which;
			controller.abort(new Error(which === "request" ? "request deadline" : "first byte timeout"));
		}, this.waitMs);
	}

	clear(): void {
		clearTimeout(this.#timer);
	}
}

/** The request's overall deadline (`request_timeout_ms`) passed: the lane's 504. */
export function requestDeadlineError(): GatewayError {
	return new GatewayError("upstream_timeout", "The request did not complete in time. Please retry shortly.");
}

/** Whether `deadlineAt` (epoch ms) has passed at `now`. */
export function pastDeadline(deadlineAt: number | undefined, now: number): boolean {
	return deadlineAt !== undefined && now >= deadlineAt;
}
