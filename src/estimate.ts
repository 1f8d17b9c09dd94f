/**
 * Rough token counts for usage when the engine reports none (about four characters a token, as
 * the public API promises; no tokenizer runs here), and the prompt's size that bounds what an
 * engine may bill for it (its UTF-8 bytes, images, fixed tokens: money/hold-bound.ts).
 */

const CHARS_PER_TOKEN = 4;
/** Chat templates wrap every message in role markers and separators. */
export const TOKENS_PER_MESSAGE = 4;
/**
 * What one image part counts as: no image is decoded here, so a fixed figure stands for the
 * larger images a vision model tiles (OpenAI bills a 2048×2048 high-detail image at 1,105).
 */
export const IMAGE_TOKENS = 1536;

const IMAGE_PART_TYPES = new Set(["image_url", "input_image", "image"]);

export function estimateTokens(chars: number): number {
	return chars > 0 ? Math.ceil(chars / CHARS_PER_TOKEN) : 0;
}

/**
 * What bounds the tokens a prompt can cost: a byte-level tokenizer (BPE over bytes, SentencePiece
 * with byte fallback) spends at most one token per UTF-8 byte of text; an image costs up to the
 * model's `image_tokens_max`; `tokens` are counted exactly (token-id prompts) or by a fixed figure
 * (the chat template's markers around each message).
 */
export interface PromptSize {
	bytes: number;
	images: number;
	tokens: number;
}

/** Short strings are counted in a loop; longer ones by encodeInto, about 40× faster on ASCII. */
const LOOP_MAX_CHARS = 64;
const encoder = new TextEncoder();
/** One scratch buffer per isolate: only ever written in one synchronous call, never read. */
const scratch = new Uint8Array(64 * 1024);

/** The UTF-8 length of a string without building its bytes (a lone surrogate counts as U+FFFD's 3). */
export function utf8Bytes(s: string): number {
	if (s.length <= LOOP_MAX_CHARS) {
		let n = s.length;
		for (let i = 0; i < s.length; i++) {
			const c = s.charCodeAt(i);
			if (c < 0x80) continue;
			if (c < 0x800) n += 1;
			else if (c >= 0xd800 && c < 0xdc00 && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
				n += 2;
				i++;
			} else n += 2;
		}
		return n;
	}
	// encodeInto stops before a character that does not fit, so a surrogate pair is never split.
	let bytes = 0;
	for (let i = 0; i < s.length; ) {
		const { read, written } = encoder.encodeInto(i === 0 ? s : s.slice(i), scratch);
		bytes += written;
		i += read;
	}
	return bytes;
}

function stringBytes(v: unknown): number {
	return typeof v === "string" ? utf8Bytes(v) : 0;
}

function isRecord(v: unknown): v is Record<string, unknown> {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

function stringLength(v: unknown): number {
	return typeof v === "string" ? v.length : 0;
}

/** String content, or the text of an array of parts; each text also goes to `texts` when given. */
function contentChars(content: unknown, texts?: unknown[]): number {
	if (typeof content === "string") {
		texts?.push(content);
		return content.length;
	}
	if (!Array.isArray(content)) return 0;
	let chars = 0;
	for (const part of content) {
		if (!isRecord(part)) continue;
		chars += stringLength(part.text) + stringLength(part.refusal);
		texts?.push(part.text, part.refusal);
		// Inline audio and files are bounded by their bytes (base64 spends far more than a token a byte).
		if (part.type === "input_audio" || part.type === "file") texts?.push(JSON.stringify(part));
	}
	return chars;
}

/** Image parts of a message's content, each counted at IMAGE_TOKENS. */
function imageCount(content: unknown): number {
	if (!Array.isArray(content)) return 0;
	let n = 0;
	for (const part of content) {
		if (isRecord(part) && typeof part.type === "string" && IMAGE_PART_TYPES.has(part.type)) n++;
	}
	return n;
}

function toolCallChars(toolCalls: unknown, texts?: unknown[]): number {
	if (!Array.isArray(toolCalls)) return 0;
	let chars = 0;
	for (const call of toolCalls) {
		if (isRecord(call) && isRecord(call.function)) {
			chars += stringLength(call.id) + stringLength(call.function.name) + stringLength(call.function.arguments);
			texts?.push(call.id, call.function.name, call.function.arguments);
		}
	}
	return chars;
}

/** Estimated prompt tokens of a chat-completions body; anything unexpected counts as nothing. */
export function estimatePromptTokens(body: unknown): number {
	return measureChatPrompt(body, false).estimate;
}

/** A chat-completions body's estimate and, when `sized`, its size (PromptSize), in one pass over it. */
export function measureChatPrompt(body: unknown, sized = true): { estimate: number; size: PromptSize } {
	const size: PromptSize = { bytes: 0, images: 0, tokens: 0 };
	if (!isRecord(body) || !Array.isArray(body.messages)) return { estimate: 0, size };
	const texts: unknown[] = [];
	let chars = 0;
	for (const message of body.messages) {
		if (!isRecord(message)) continue;
		chars += contentChars(message.content, sized ? texts : undefined);
		size.images += imageCount(message.content);
		// Earlier reasoning given back to the engine (the Responses lane's round trip; vLLM reads `reasoning` too).
		// A tool result's `tool_call_id` is text to templates that render it (Mistral's), as is `tool_name` (llama.cpp).
		for (const v of [message.name, message.reasoning_content, message.reasoning, message.tool_call_id, message.tool_name]) {
			chars += stringLength(v);
			if (sized) texts.push(v);
		}
		chars += toolCallChars(message.tool_calls, sized ? texts : undefined);
	}
	// Tool definitions are rendered into the prompt too; their JSON length is close enough.
	// vLLM renders `documents` (RAG) into the chat template: prompt text like any other. So are the
	// `chat_template_kwargs` a template reads (vLLM and llama.cpp hand them all to it: gpt-oss's
	// `model_identity`, SmolLM3's `custom_instructions` become system text); their JSON's bytes
	// are at least their strings' bytes.
	for (const v of [body.tools, body.documents, body.chat_template_kwargs]) {
		if (!Array.isArray(v) && !isRecord(v)) continue;
		const json = JSON.stringify(v);
		chars += json.length;
		if (sized) texts.push(json);
	}
	for (const t of texts) size.bytes += stringBytes(t);
	size.tokens = TOKENS_PER_MESSAGE * body.messages.length;
	return { estimate: estimateTokens(chars) + size.images * IMAGE_TOKENS + size.tokens, size };
}

/** Sizes added up (a prompt and what the gateway adds to it). */
export function addSizes(...sizes: PromptSize[]): PromptSize {
	const sum: PromptSize = { bytes: 0, images: 0, tokens: 0 };
	for (const s of sizes) {
		sum.bytes += s.bytes;
		sum.images += s.images;
		sum.tokens += s.tokens;
	}
	return sum;
}

/** The size of one text or token-id prompt (legacy completions, embeddings). */
export function inputSize(input: string | readonly number[]): PromptSize {
	return typeof input === "string"
		? { bytes: utf8Bytes(input), images: 0, tokens: 0 }
		: { bytes: 0, images: 0, tokens: input.length };
}
