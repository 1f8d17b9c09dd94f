import { GatewayError } from "../errors";
import { requestDeadlineError } from "./attempt-timer";

/**
 * The largest non-stream engine answer we read (a whole completion, `n` choices included): it is
 * parsed and re-serialised, within a Worker's 128 MB. Answers with large logprobs should stream.
 */
export const MAX_ENGINE_BODY_BYTES = 8 * 1024 * 1024;

/** The errors readEngineBody threw for an answer over `maxBytes`. */
const oversized = new WeakSet<object>();

/** Whether `err` is an answer over the size cap: the engine did the work the client asked for (billed). */
export function isOversized(err: unknown): boolean {
	return typeof err === "object" && err !== null && oversized.has(err);
}

export interface ReadBodyOptions {
	/** Ends the read when no byte arrives for this long. */
	idleTimeoutMs: number;
	maxBytes?: number;
	/** Aborts the engine request (the read is abandoned). */
	abort: (reason: unknown) => void;
	/** The request's overall deadline (epoch ms): past it the read ends as 504, the engine request aborted. */
	deadlineAt?: number;
	/** Told of each piece that carries data (not keep-alive whitespace): the request is moving. */
	onData?: () => void;
}

/**
 * A non-stream engine body as text, read chunk by chunk: an engine that sends headers and then
 * stalls is given up on after `idleTimeoutMs` of silence (504), and one that sends more than
 * `maxBytes` is cut off (502). Either way the engine request is aborted.
 */
export async function readEngineBody(response: Response, opts: ReadBodyOptions): Promise<string> {
	if (!response.body) return "";
	const reader = response.body.getReader();
	const max = opts.maxBytes ?? MAX_ENGINE_BODY_BYTES;
	const chunks: Uint8Array[] = [];
	let size = 0;
	let timer: ReturnType<typeof setTimeout> | undefined;
	let idle = false;
	let late = false;
	const deadlineAt = opts.deadlineAt ?? Number.POSITIVE_INFINITY;
	// Whitespace is what keep-alives send: only other bytes count as the engine making progress.
	let lastDataAt = Date.now();
	const stop = (reason: Error) => {
		opts.abort(reason);
		reader.cancel(reason).catch(() => {});
	};
	try {
		for (;;) {
			const idleLeft = opts.idleTimeoutMs - (Date.now() - lastDataAt);
			const deadlineLeft = deadlineAt - Date.now();
			timer = setTimeout(
				() => {
					if (deadlineLeft < idleLeft) late = true;
					else idle = true;
					stop(new Error(late ? "request deadline" : "engine idle timeout"));
				},
				Math.max(0, Math.min(idleLeft, deadlineLeft)),
			);
			let result: ReadableStreamReadResult<Uint8Array>;
			try {
				result = await reader.read();
			} catch (err) {
				if (late) throw requestDeadlineError();
				if (idle) throw idleError(opts.idleTimeoutMs);
				throw err;
			}
			clearTimeout(timer);
			if (late) throw requestDeadlineError();
			if (idle) throw idleError(opts.idleTimeoutMs);
			if (result.done) break;
			size += result.value.byteLength;
			if (size > max) {
				stop(new Error("engine answer too large"));
				const err = new GatewayError("upstream_unavailable", "The inference node sent an answer that is too large.", {
					status: 502,
				});
				oversized.add(err);
				throw err;
			}
			if (hasData(result.value)) {
				lastDataAt = Date.now();
				opts.onData?.();
			}
			chunks.push(result.value);
		}
	} finally {
		clearTimeout(timer);
	}
	const decoder = new TextDecoder();
	if (chunks.length === 1) return decoder.decode(chunks[0]);
	let text = "";
	for (const c of chunks) text += decoder.decode(c, { stream: true });
	return text + decoder.decode();
}

/** Any byte other than JSON whitespace. */
function hasData(bytes: Uint8Array): boolean {
	for (let i = 0; i < bytes.length; i++) {
		const b = bytes[i] as number;
		if (b !== 0x20 && b !== 0x0a && b !== 0x0d && b !== 0x09) return true;
	}
	return false;
}

function idleError(ms: number): GatewayError {
	return new GatewayError("upstream_timeout", `The inference node stopped sending its answer (no data for ${ms} ms).`);
}
