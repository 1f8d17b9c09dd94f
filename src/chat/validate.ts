import { z } from "zod";
import { GatewayError } from "../errors";
import { zodToGatewayError } from "../http/zod-error";

const ROLES = ["system", "developer", "user", "assistant", "tool"] as const;

const ContentPart = z.looseObject({ type: z.string() });
const Content = z.union([z.string(), z.array(ContentPart)]);

const Message = z
	.looseObject({
		role: z.enum(ROLES),
		content: z.union([Content, z.null()]).optional(),
		tool_calls: z.array(z.looseObject({})).optional(),
	})
	.superRefine((m, ctx) => {
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

/** Only what the gateway itself reads is checked; every other field goes to the engine untouched. */
export const ChatRequestSchema = z.looseObject({
	model: z.string().min(1),
	messages: z.array(Message).min(1),
	stream: z.boolean().nullable().optional(),
	stream_options: z.looseObject({}).nullable().optional(),
	max_tokens: MaxTokens,
	max_completion_tokens: MaxTokens,
	// Range and integrality are checked with max_n (run-chat), so 1e20 and 2.5 get the same clear message.
	n: z.number().nullable().optional(),
	venym: VenymOptions.optional(),
});

export type ChatRequest = z.infer<typeof ChatRequestSchema>;
export type VenymOptionsInput = z.infer<typeof VenymOptions>;

/**
 * Engine-specific fields that would escape the gateway's caps or the operator's setup: output
 * lengths that override `max_tokens` (llama.cpp's `n_predict`, Ollama's `num_predict`), work
 * multipliers the hold does not cover (`best_of`, beam search), and a client-supplied chat
 * template (rendered by the engine, unseen by the estimate).
 */
export const REFUSED_FIELDS: Record<string, string> = {
	n_predict: "use 'max_tokens'",
	num_predict: "use 'max_tokens'",
	best_of: "use 'n'",
	use_beam_search: "beam search is not offered",
	chat_template: "the model's own template is used",
	// Engine internals a client has no business setting: scheduling priority, the engine's own
	// request ids, disaggregated-serving KV transfer targets, vLLM's extension arguments.
	priority: "requests are scheduled by the gateway",
	request_id: "the gateway names requests",
	kv_transfer_params: "KV transfer is the operator's",
	vllm_xargs: "engine extension arguments are the operator's",
};

function unsupported(param: string, instead: string): GatewayError {
	return new GatewayError("invalid_request", `'${param}' is not supported by this gateway: ${instead}.`, {
		param,
		code: "unsupported_parameter",
	});
}

/** Validates a chat completions body. The same object is returned so nothing is copied on the hot path. */
export function validateChatRequest(body: unknown): ChatRequest {
	if (body === null || typeof body !== "object" || Array.isArray(body)) {
		throw new GatewayError("invalid_request", "The request body must be a JSON object.", { param: null });
	}
	const result = ChatRequestSchema.safeParse(body, { reportInput: true });
	if (!result.success) throw zodToGatewayError(result.error);
	for (const field in REFUSED_FIELDS) {
		if (Object.hasOwn(body, field)) throw unsupported(field, REFUSED_FIELDS[field] as string);
	}
	// vLLM passes chat_template_kwargs to the template; a `chat_template` inside it replaces the template.
	const kwargs = (body as Record<string, unknown>).chat_template_kwargs;
	if (kwargs !== undefined && kwargs !== null) {
		if (typeof kwargs !== "object" || Array.isArray(kwargs)) {
			throw new GatewayError("invalid_request", "Invalid value for 'chat_template_kwargs': expected an object.", {
				param: "chat_template_kwargs",
			});
		}
		if (Object.hasOwn(kwargs, "chat_template")) {
			throw unsupported("chat_template_kwargs.chat_template", REFUSED_FIELDS.chat_template as string);
		}
	}
	return body as ChatRequest;
}
