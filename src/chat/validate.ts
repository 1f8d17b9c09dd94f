import { z } from "zod";
import { parseBody } from "../http/parse-body";
import { SAMPLING_FIELDS, TOP_LOGPROBS } from "../http/sampling-params";

const ROLES = ["system", "developer", "user", "assistant", "tool"] as const;

/**
 * The content parts the gateway can bound: text (a token per byte at most), images (the model's
 * `image_tokens_max` each), inline audio and files (their bytes: estimate.ts). A part an engine
 * fetches or decodes at a size no byte shows (vLLM's `video_url`, `audio_url`, `image_embeds`) is
 * refused, so no prompt is prefilled beyond what was held.
 */
export const CONTENT_PART_TYPES = ["text", "refusal", "image_url", "input_image", "image", "input_audio", "file"] as const;
const PART_TYPES: ReadonlySet<string> = new Set(CONTENT_PART_TYPES);
const PART_TYPE_MESSAGE = `Invalid content part type: expected one of ${CONTENT_PART_TYPES.map((t) => `'${t}'`).join(", ")} (video and audio by URL cannot be held for)`;
const ContentPart = z.looseObject({ type: z.string() });
const Content = z.union([z.string(), z.array(ContentPart)]);

const Message = z
	.looseObject({
		role: z.enum(ROLES),
		content: z.union([Content, z.null()]).optional(),
		tool_calls: z.array(z.looseObject({})).optional(),
	})
	.superRefine((m, ctx) => {
		if (Array.isArray(m.content)) {
			const at = m.content.findIndex((part) => !PART_TYPES.has(part.type));
			if (at >= 0) ctx.addIssue({ code: "custom", path: ["content", at, "type"], message: PART_TYPE_MESSAGE });
		}
		// Only an assistant turn (carrying tool calls) may omit content.
		if (m.role !== "assistant" && (m.content === undefined || m.content === null)) {
			ctx.addIssue({ code: "custom", path: ["content"], message: `Missing required parameter: content (role '${m.role}')` });
		}
	});

const MaxTokens = z.number().int().positive().nullable().optional();

export const VenymOptions = z.strictObject({
	web_search: z.boolean().optional(),
	search_results: z.number().int().min(1).max(10).optional(),
	/** `false` turns the model's tool-call repair off for this request. */
	tool_call_repair: z.boolean().optional(),
});

/**
 * What the gateway reads, and the sampling parameters' ranges, are checked here; which other
 * top-level fields are accepted, and which of them reach the engine, is chat's allowlist
 * (http/engine-fields.ts `CHAT_FIELDS`), checked once the model is known (its `pass_through_fields`).
 */
export const ChatRequestSchema = z.looseObject({
	model: z.string().min(1),
	messages: z.array(Message).min(1),
	stream: z.boolean().nullable().optional(),
	stream_options: z.looseObject({}).nullable().optional(),
	max_tokens: MaxTokens,
	max_completion_tokens: MaxTokens,
	// Range and integrality are checked with max_n (run-chat), so 1e20 and 2.5 get the same clear message.
	n: z.number().nullable().optional(),
	...SAMPLING_FIELDS,
	logprobs: z.boolean().nullable().optional(),
	top_logprobs: TOP_LOGPROBS,
	venym: VenymOptions.optional(),
});

export type ChatRequest = z.infer<typeof ChatRequestSchema>;

/** Validates a chat completions body. The same object is returned so nothing is copied on the hot path. */
export function validateChatRequest(body: unknown): ChatRequest {
	parseBody(ChatRequestSchema, body);
	return body as ChatRequest;
}
