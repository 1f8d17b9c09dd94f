/**
 * The reasoning round trip of stateless clients (reasoning-seal.ts does the cryptography). On the
 * way in, a reasoning item's `encrypted_content` is opened and its text put in the item's
 * `content`, which to-chat.ts gives the engine as the next assistant message's
 * `reasoning_content`; reasoning the gateway did not seal (plain `content` sent by the client, a
 * seal that does not open) is not given to the engine, and neither is any to a model without the
 * `reasoning` capability. On the way out, with `include: ["reasoning.encrypted_content"]`, each
 * reasoning item (in the JSON answer, or in a stream's `response.output_item.done` and final
 * events) gets its sealed text as `encrypted_content`.
 */
import { type GatewayConfig, resolveModel } from "../config";
import { openReasoning, sealReasoning, sealSecret } from "./reasoning-seal";
import type { ResponsesRequest } from "./request-schema";
import type { ResponseObject } from "./response-object";

const INCLUDE = "reasoning.encrypted_content";
type Json = Record<string, unknown>;

function isRecord(v: unknown): v is Json {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

function takesReasoning(config: GatewayConfig, model: string): boolean {
	try {
		return resolveModel(config, model).model.capabilities.includes("reasoning");
	} catch {
		// An unknown model is refused when the request is authorized, with its own error.
		return false;
	}
}

/**
 * The most seals one request opens: the latest ones (a long agent session sends every earlier
 * turn's); older reasoning is dropped. Opening runs before the hold, for any key, and each costs
 * an AES-GCM decryption: a body of many tiny forged seals would otherwise buy seconds of CPU.
 */
export const MAX_OPENED_SEALS = 256;

/** Opens the sealed reasoning of the request's input in place: only opened text stays as `content`. */
export async function openInputReasoning(
	req: ResponsesRequest,
	env: unknown,
	keyId: string,
	config: GatewayConfig,
): Promise<void> {
	if (!Array.isArray(req.input)) return;
	const items = req.input.filter((i) => i.type === "reasoning") as Json[];
	if (items.length === 0) return;
	const secret = takesReasoning(config, req.model) ? sealSecret(env) : undefined;
	const firstOpened = items.length - MAX_OPENED_SEALS;
	for (const [i, item] of items.entries()) {
		const text = i >= firstOpened ? await openReasoning(secret, keyId, item.encrypted_content) : undefined;
		if (text) item.content = [{ type: "reasoning_text", text }];
		else delete item.content;
	}
}

/** Whether the answer's reasoning items are to carry `encrypted_content`. */
export function wantsSeal(req: ResponsesRequest, env: unknown): boolean {
	return (req.include ?? []).includes(INCLUDE) && sealSecret(env) !== undefined;
}

function reasoningTextOf(item: Json): string {
	if (!Array.isArray(item.content)) return "";
	return item.content.map((c) => (isRecord(c) && typeof c.text === "string" ? c.text : "")).join("");
}

/** Seals reasoning items' text into `encrypted_content`, each item once (`done`: by item id). */
class Sealer {
	readonly #done = new Map<string, Promise<string | undefined>>();
	constructor(
		readonly secret: string | undefined,
		readonly keyId: string,
	) {}

	async items(output: unknown): Promise<void> {
		if (!Array.isArray(output)) return;
		for (const item of output) {
			if (!isRecord(item) || item.type !== "reasoning") continue;
			const id = typeof item.id === "string" ? item.id : "";
			let sealed = this.#done.get(id);
			if (!sealed) {
				sealed = sealReasoning(this.secret, this.keyId, reasoningTextOf(item));
				if (id) this.#done.set(id, sealed);
			}
			const value = await sealed;
			if (value) item.encrypted_content = value;
		}
	}
}

/** The JSON answer with its reasoning sealed. */
export async function sealResponse(body: ResponseObject, env: unknown, keyId: string): Promise<void> {
	await new Sealer(sealSecret(env), keyId).items(body.output);
}

const SEALED_EVENTS = /^event: (response\.output_item\.done|response\.completed|response\.incomplete|response\.failed)\n/;

/** One `event:`/`data:` frame with its reasoning sealed; other frames as they were. */
async function sealFrame(frame: string, sealer: Sealer): Promise<string> {
	if (!SEALED_EVENTS.test(frame) || !frame.includes('"reasoning"')) return frame;
	const at = frame.indexOf("\ndata: ");
	let event: Json;
	try {
		event = JSON.parse(frame.slice(at + 7));
	} catch {
		return frame;
	}
	if (isRecord(event.item)) await sealer.items([event.item]);
	if (isRecord(event.response)) await sealer.items(event.response.output);
	return `${frame.slice(0, at)}\ndata: ${JSON.stringify(event)}`;
}

/** The Responses event stream with its reasoning items sealed as they finish. */
export function sealStream(stream: ReadableStream<Uint8Array>, env: unknown, keyId: string): ReadableStream<Uint8Array> {
	const sealer = new Sealer(sealSecret(env), keyId);
	const decoder = new TextDecoder();
	const encoder = new TextEncoder();
	let buffer = "";
	return stream.pipeThrough(
		new TransformStream<Uint8Array, Uint8Array>({
			async transform(chunk, ctl) {
				buffer += decoder.decode(chunk, { stream: true });
				const end = buffer.lastIndexOf("\n\n");
				if (end < 0) return;
				const frames = buffer.slice(0, end).split("\n\n");
				buffer = buffer.slice(end + 2);
				let out = "";
				for (const frame of frames) out += `${await sealFrame(frame, sealer)}\n\n`;
				ctl.enqueue(encoder.encode(out));
			},
			flush(ctl) {
				buffer += decoder.decode();
				if (buffer) ctl.enqueue(encoder.encode(buffer));
			},
		}),
	);
}
