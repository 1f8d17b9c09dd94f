/**
 * Rewrites an engine's chat-completions SSE stream into the gateway's: every chunk names
 * the gateway model, exactly one usage chunk precedes `[DONE]`, engine comments vanish,
 * and an engine failure ends with an in-band error frame instead of a clean-looking end.
 */
import { boundedUsage, type UsageBounds } from "../chat/usage-bounds";
import { GatewayError, toErrorFrame } from "../errors";
import type { SettleStatus, Usage } from "../types";
import { estimateTokens } from "./estimate";
import type { SseEvent } from "./sse-parser";
import { createSseParser, MAX_EVENT_BYTES, SseOverflowError } from "./sse-parser";

export interface ChatStreamOptions {
	/** Gateway model id the client asked for, e.g. "venym/qwen-27b" or "venym/qwen-27b:online". */
	model: string;
	/** Used when the engine sends no usage. */
	promptTokensEstimate: number;
	/** Already-encoded JSON payloads sent as the first data frames (e.g. web-search sources). */
	prelude?: string[];
	/** Engine usage outside these is replaced by the estimate (see usage-bounds.ts). */
	bounds?: UsageBounds;
	/** The stream ends with an error frame when the engine sends nothing for this long while we wait on it. */
	idleTimeoutMs?: number;
}

/** What went wrong, for logs; the client only sees a generic error frame. */
export interface StreamError {
	message: string;
	type: string;
	code: string | null;
}

export interface StreamEnd {
	status: Extract<SettleStatus, "completed" | "engine_error" | "client_disconnected">;
	usage: Usage;
	estimated: boolean;
	/** True once a chunk with content, reasoning or tool calls was sent to the client. */
	contentForwarded: boolean;
	/** The engine reported usage outside the bounds; the estimate was billed. */
	usageOutOfBounds?: boolean;
	/** The engine went quiet for longer than the idle timeout. */
	idleTimedOut?: boolean;
	error?: StreamError;
}

export interface ChatStreamResult {
	stream: ReadableStream<Uint8Array>;
	/** Resolves exactly once, never rejects. */
	done: Promise<StreamEnd>;
}

type Json = Record<string, unknown>;
type Ending = { status: "completed" } | { status: "engine_error"; error: StreamError; idle?: boolean };

function isRecord(v: unknown): v is Json {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

function frame(json: string): string {
	return `data: ${json}\n\n`;
}

const UNBOUNDED: UsageBounds = { maxPromptTokens: Number.MAX_SAFE_INTEGER, maxCompletionTokens: Number.MAX_SAFE_INTEGER };

// Built by the one error mapping, so a frame carries the code the HTTP path gives the same
// cause; the openai SDK throws an APIError for any data frame whose JSON has a truthy `error`
// key. 5xx details stay in the logs.
const ERROR_FRAME = toErrorFrame(
	new GatewayError("upstream_unavailable", "The model engine failed while streaming the response."),
);
const IDLE_FRAME = toErrorFrame(
	new GatewayError("upstream_timeout", "The model engine stopped sending data before the response was complete."),
);
const DONE_FRAME = frame("[DONE]");

function engineFailure(message: string): Ending {
	return { status: "engine_error", error: { message, type: "server_error", code: null } };
}

function describeEngineError(e: Json): StreamError {
	return {
		message: typeof e.message === "string" ? e.message : JSON.stringify(e),
		type: typeof e.type === "string" ? e.type : "server_error",
		code: e.code === undefined || e.code === null ? null : String(e.code),
	};
}

/** Nested `{"error":{...}}`, `{"error":"text"}`, or vLLM's flat `{"object":"error",...}`. */
function engineError(payload: Json, event: string | undefined): StreamError | null {
	const { error } = payload;
	if (isRecord(error)) return describeEngineError(error);
	if (typeof error === "string") return { message: error, type: "server_error", code: null };
	if (error || payload.object === "error" || event === "error") return describeEngineError(payload);
	return null;
}

function stringLength(v: unknown): number {
	return typeof v === "string" ? v.length : 0;
}

/** Generated characters in a delta: the basis of the completion estimate. */
function deltaChars(delta: Json): number {
	let chars = stringLength(delta.content) + stringLength(delta.reasoning_content) + stringLength(delta.reasoning);
	if (Array.isArray(delta.tool_calls)) {
		for (const call of delta.tool_calls) {
			if (isRecord(call) && isRecord(call.function)) {
				chars += stringLength(call.function.name) + stringLength(call.function.arguments);
			}
		}
	}
	return chars;
}

/**
 * `abortEngine` aborts the engine request: called when the client cancels and when the engine
 * goes idle past `idleTimeoutMs`.
 */
export function rewriteChatStream(
	upstream: ReadableStream<Uint8Array>,
	opts: ChatStreamOptions,
	abortEngine?: (reason: unknown) => void,
): ChatStreamResult {
	const reader = upstream.getReader();
	const decoder = new TextDecoder();
	const encoder = new TextEncoder();
	const modelField = `"model":${JSON.stringify(opts.model)}`;

	let out: string[] = [];
	let ending: Ending | undefined;
	let cancelled = false;
	let settled = false;

	let lastUsage: Json | undefined;
	let lastId: string | undefined;
	let lastCreated: number | undefined;
	let sawFinish = false;
	let forwardedChars = 0;
	let contentForwarded = false;
	// The engine's model rarely changes within a stream; keep its encoded field ready.
	let engineModel: string | undefined;
	let engineModelField = "";

	let resolveDone: (end: StreamEnd) => void = () => {};
	const done = new Promise<StreamEnd>((resolve) => {
		resolveDone = resolve;
	});

	/** The engine's last usage within bounds, with whatever it lacked (or got wrong) estimated. */
	function usageSoFar(): { usage: Usage; estimated: boolean; outOfBounds: boolean } {
		return boundedUsage(lastUsage, opts.bounds ?? UNBOUNDED, {
			promptTokens: opts.promptTokensEstimate,
			completionTokens: estimateTokens(forwardedChars),
		});
	}

	function settle(status: StreamEnd["status"], error?: StreamError, idle = false): void {
		if (settled) return;
		settled = true;
		clearTimeout(idleTimer);
		const { usage, estimated, outOfBounds } = usageSoFar();
		const end: StreamEnd = { status, usage, estimated, contentForwarded };
		if (outOfBounds) end.usageOutOfBounds = true;
		if (idle) end.idleTimedOut = true;
		if (error) end.error = error;
		resolveDone(end);
	}

	// Idle watch: one timer per idle period, not one per chunk. Only time spent waiting on the
	// engine counts; a client that reads slowly (backpressure) is not the engine being idle.
	const idleMs = opts.idleTimeoutMs ?? 0;
	let idleTimer: ReturnType<typeof setTimeout> | undefined;
	let waitingSince = 0;
	function checkIdle(): void {
		idleTimer = undefined;
		if (settled || cancelled || ending) return;
		const quiet = waitingSince === 0 ? 0 : Date.now() - waitingSince;
		if (quiet < idleMs) {
			idleTimer = setTimeout(checkIdle, idleMs - quiet);
			return;
		}
		ending = {
			status: "engine_error",
			error: { message: `engine sent nothing for ${idleMs} ms`, type: "server_error", code: null },
			idle: true,
		};
		const reason = new Error("engine idle timeout");
		abortEngine?.(reason);
		reader.cancel(reason).catch(() => {});
	}

	/** Swap the model without re-serialising when the raw text allows it unambiguously. */
	function withGatewayModel(raw: string, chunk: Json): string {
		// A raw newline would break the frame, so multi-line data is always re-serialised.
		if (typeof chunk.model === "string" && !raw.includes("\n")) {
			if (chunk.model !== engineModel) {
				engineModel = chunk.model;
				engineModelField = `"model":${JSON.stringify(engineModel)}`;
			}
			// Outside string values `"model"` only appears as a key, so a single occurrence
			// that starts the exact field is the top-level one; anything else falls through.
			const at = raw.indexOf('"model"');
			if (at !== -1 && at === raw.lastIndexOf('"model"') && raw.startsWith(engineModelField, at)) {
				return raw.slice(0, at) + modelField + raw.slice(at + engineModelField.length);
			}
		}
		chunk.model = opts.model;
		return JSON.stringify(chunk);
	}

	function onChunk(raw: string, chunk: Json): void {
		if (typeof chunk.id === "string") lastId = chunk.id;
		if (typeof chunk.created === "number") lastCreated = chunk.created;
		const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
		for (const choice of choices) {
			if (!isRecord(choice)) continue;
			if (choice.finish_reason !== undefined && choice.finish_reason !== null) sawFinish = true;
			if (!isRecord(choice.delta)) continue;
			const chars = deltaChars(choice.delta);
			forwardedChars += chars;
			const tools = choice.delta.tool_calls;
			if (chars > 0 || (Array.isArray(tools) && tools.length > 0)) contentForwarded = true;
		}
		if (isRecord(chunk.usage)) {
			// Engines may repeat cumulative usage on every chunk: the last one wins, never a sum.
			lastUsage = chunk.usage;
			// The usage-only chunk is held: exactly one goes out, just before [DONE].
			if (choices.length === 0) return;
			delete chunk.usage;
			chunk.model = opts.model;
			out.push(frame(JSON.stringify(chunk)));
			return;
		}
		out.push(frame(withGatewayModel(raw, chunk)));
	}

	function onEvent(e: SseEvent): void {
		// Whatever follows [DONE] or an error in the same read is not forwarded.
		if (ending) return;
		const data = e.data.trim();
		if (data === "") return;
		if (data === "[DONE]") {
			ending = { status: "completed" };
			return;
		}
		let payload: unknown;
		try {
			payload = JSON.parse(data);
		} catch {
			// Forwarding it would make the client's SDK throw a parse error instead of an API error.
			ending = engineFailure("upstream sent an event that is not JSON");
			return;
		}
		if (!isRecord(payload)) {
			ending = engineFailure("upstream sent an event that is not a JSON object");
			return;
		}
		const error = engineError(payload, e.event);
		if (error) {
			ending = { status: "engine_error", error };
			return;
		}
		onChunk(data, payload);
	}

	const parser = createSseParser(onEvent);

	function usageFrame(): string {
		return frame(
			JSON.stringify({
				id: lastId ?? `chatcmpl-${crypto.randomUUID().replaceAll("-", "")}`,
				object: "chat.completion.chunk",
				created: lastCreated ?? Math.floor(Date.now() / 1000),
				model: opts.model,
				choices: [],
				// Extra engine fields (prompt_tokens_details, …) are kept.
				usage: { ...lastUsage, ...usageSoFar().usage },
			}),
		);
	}

	/** One enqueue per pull: frames that arrived together leave together. */
	function flush(controller: ReadableStreamDefaultController<Uint8Array>): void {
		if (out.length === 0) return;
		controller.enqueue(encoder.encode(out.join("")));
		out = [];
	}

	function finish(controller: ReadableStreamDefaultController<Uint8Array>, end: Ending): void {
		const idle = end.status === "engine_error" && end.idle === true;
		out.push(usageFrame(), end.status === "completed" ? DONE_FRAME : idle ? IDLE_FRAME : ERROR_FRAME);
		flush(controller);
		controller.close();
		// Frees the engine connection when we stop early; harmless once it has closed.
		reader.cancel().catch(() => {});
		if (end.status === "completed") settle("completed");
		else settle("engine_error", end.error, idle);
	}

	function feed(text: string): void {
		try {
			parser.feed(text);
		} catch (err) {
			if (!(err instanceof SseOverflowError)) throw err;
			ending ??= engineFailure(`upstream sent an event over ${MAX_EVENT_BYTES} bytes`);
			reader.cancel(err).catch(() => {});
		}
	}

	async function readUpstream(): Promise<void> {
		let result: ReadableStreamReadResult<Uint8Array>;
		if (idleMs > 0) {
			waitingSince = Date.now();
			idleTimer ??= setTimeout(checkIdle, idleMs);
		}
		try {
			result = await reader.read();
		} catch (err) {
			ending ??= engineFailure(`upstream read failed: ${err instanceof Error ? err.message : String(err)}`);
			return;
		} finally {
			waitingSince = 0;
		}
		if (cancelled || ending) return;
		if (!result.done) {
			feed(decoder.decode(result.value, { stream: true }));
			return;
		}
		feed(decoder.decode());
		parser.end();
		// A finish_reason means the answer is whole even when [DONE] never came.
		ending ??= sawFinish ? { status: "completed" } : engineFailure("upstream closed the stream early");
	}

	const stream = new ReadableStream<Uint8Array>({
		start(controller) {
			if (opts.prelude && opts.prelude.length > 0) {
				controller.enqueue(encoder.encode(opts.prelude.map(frame).join("")));
			}
		},
		// Upstream is read only when the client wants more: backpressure reaches the engine.
		async pull(controller) {
			try {
				// Keep reading until something can be sent: a pull that enqueues nothing
				// leaves the client's read pending with nobody to call pull again.
				while (!cancelled) {
					await readUpstream();
					if (cancelled) return;
					if (ending) {
						finish(controller, ending);
						return;
					}
					if (out.length > 0) {
						flush(controller);
						return;
					}
				}
			} catch (err) {
				// A bug here must still settle the request and end the client's stream.
				reader.cancel().catch(() => {});
				settle("engine_error", { message: `stream rewrite failed: ${String(err)}`, type: "server_error", code: null });
				controller.error(err);
			}
		},
		cancel(reason) {
			if (settled) return;
			cancelled = true;
			const upstreamCancelled = reader.cancel(reason).catch(() => {});
			try {
				abortEngine?.(reason);
			} finally {
				settle("client_disconnected");
			}
			return upstreamCancelled;
		},
	});

	return { stream, done };
}
