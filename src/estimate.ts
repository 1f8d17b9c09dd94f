/**
 * Rough token counts for holds before a call and for usage when the engine reports none.
 * About four characters a token, as the public API promises; no tokenizer runs here.
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

function isRecord(v: unknown): v is Record<string, unknown> {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

function stringLength(v: unknown): number {
	return typeof v === "string" ? v.length : 0;
}

/** String content, or the text of an array of parts. */
function contentChars(content: unknown): number {
	if (typeof content === "string") return content.length;
	if (!Array.isArray(content)) return 0;
	let chars = 0;
	for (const part of content) {
		if (isRecord(part)) chars += stringLength(part.text) + stringLength(part.refusal);
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

function toolCallChars(toolCalls: unknown): number {
	if (!Array.isArray(toolCalls)) return 0;
	let chars = 0;
	for (const call of toolCalls) {
		if (isRecord(call) && isRecord(call.function)) {
			chars += stringLength(call.function.name) + stringLength(call.function.arguments);
		}
	}
	return chars;
}

/** Estimated prompt tokens of a chat-completions body; anything unexpected counts as nothing. */
export function estimatePromptTokens(body: unknown): number {
	if (!isRecord(body) || !Array.isArray(body.messages)) return 0;
	let chars = 0;
	let images = 0;
	for (const message of body.messages) {
		if (!isRecord(message)) continue;
		chars += contentChars(message.content);
		images += imageCount(message.content);
		chars += stringLength(message.name);
		// Earlier reasoning given back to the engine (the Responses lane's reasoning round trip).
		chars += stringLength(message.reasoning_content);
		chars += toolCallChars(message.tool_calls);
	}
	// Tool definitions are rendered into the prompt too; their JSON length is close enough.
	if (Array.isArray(body.tools)) chars += JSON.stringify(body.tools).length;
	// vLLM renders `documents` (RAG) into the chat template: prompt text like any other.
	if (Array.isArray(body.documents)) chars += JSON.stringify(body.documents).length;
	return estimateTokens(chars) + images * IMAGE_TOKENS + TOKENS_PER_MESSAGE * body.messages.length;
}
