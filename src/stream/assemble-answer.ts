/**
 * A non-stream client's answer, read from the engine's stream through the same layers a stream
 * client's goes through (engine events → chat reducer → an encoder), so usage bounds, the idle
 * timeout, the client leaving and the one end signal behave alike; the encoder here sends nothing
 * and puts the answer together instead (completion-assembler.ts).
 */

import { redactJson, secretForms } from "../redact";
import type { Usage } from "../types";
import type { ChatStreamReducer, EngineOutcome, ForwardedChunk, StreamEnd } from "./chat-reducer";
import { rewriteChatStream } from "./chat-stream";
import { type AssembledObject, CompletionAssembler } from "./completion-assembler";
import type { EngineEvents } from "./engine-events";
import type { ChunkTransform, StreamEncoder } from "./pipe-engine-stream";
import type { UsageBounds } from "./usage-bounds";

type Json = Record<string, unknown>;

export interface AssembleOptions {
	object: AssembledObject;
	promptTokensEstimate: number;
	bounds: UsageBounds;
	idleTimeoutMs: number;
	clientSignal?: AbortSignal;
	/** Node secrets never relayed (secret-filter.ts). */
	secrets?: readonly string[];
	/** Called as engine chunks arrive: the request is making progress (the hold keep-alive). */
	onData?: () => void;
	/** Rewrites chunks before they are put together (a search call taken out: chat/search-tool.ts). */
	transform?: ChunkTransform;
	/** Usage of the request's earlier engine calls, added to the body's `usage`. */
	earlierUsage?: Usage;
}

export interface AssembledAnswer {
	end: StreamEnd;
	/** The answer (with the gateway's model and the billed usage); only when the stream completed. */
	body(model: string): Json;
	/** The answer outgrew what a non-stream body may hold (the engine call was abandoned). */
	overflowed: boolean;
}

class AnswerTooLarge extends Error {}

class AssemblingEncoder implements StreamEncoder {
	readonly assembler: CompletionAssembler;
	readonly #onData: (() => void) | undefined;
	usage: Json = {};

	constructor(object: AssembledObject, onData?: () => void) {
		this.assembler = new CompletionAssembler(object);
		this.#onData = onData;
	}

	start(): string {
		return "";
	}

	chunks(chunks: ForwardedChunk[]): string {
		this.#onData?.();
		this.assembler.push(chunks);
		if (this.assembler.overflowed) throw new AnswerTooLarge("the engine's answer is too large for a non-stream response");
		return "";
	}

	finish(_outcome: EngineOutcome, reducer: ChatStreamReducer): string {
		this.usage = reducer.usageField();
		return "";
	}
}

/** Reads the engine's stream to its end (or the client's departure) and puts the answer together. */
export async function assembleAnswer(
	events: EngineEvents,
	opts: AssembleOptions,
	abortEngine: (reason: unknown) => void,
): Promise<AssembledAnswer> {
	const encoder = new AssemblingEncoder(opts.object, opts.onData);
	const { stream, done } = rewriteChatStream(
		events,
		{
			model: "",
			promptTokensEstimate: opts.promptTokensEstimate,
			bounds: opts.bounds,
			idleTimeoutMs: opts.idleTimeoutMs,
			encoder,
			clientSignal: opts.clientSignal,
			secrets: opts.secrets,
			transform: opts.transform,
			earlierUsage: opts.earlierUsage,
		},
		abortEngine,
	);
	const reader = stream.getReader();
	let overflowed = false;
	try {
		while (!(await reader.read()).done) {
			// The encoder sends nothing: this only drives the pipe.
		}
	} catch (err) {
		// The pipe has ended the stream as an engine failure already; an oversized answer is one.
		overflowed = err instanceof AnswerTooLarge;
		abortEngine(err);
	}
	const end = await done;
	// Scrubbed whole, as a stream's frames are: a field no filter reads (the engine's id, its
	// fingerprint, a usage extension) cannot carry a node key either.
	const forms = opts.secrets?.length ? secretForms(opts.secrets) : [];
	return { end, overflowed, body: (model) => redactJson(encoder.assembler.body(model, encoder.usage), forms) };
}
