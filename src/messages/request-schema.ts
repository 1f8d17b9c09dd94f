/**
 * The `POST /v1/messages` body (Anthropic Messages): every field the gateway translates is
 * checked here (a wrong type is a 400 naming it); fields the engine cannot act on are accepted
 * and dropped; any other top-level field is ignored and reported back by name, so a newer
 * client's beta fields never break a request, except an engine's own field clients send by habit
 * (http/engine-fields.ts FIELD_HINTS: `n_predict`, `priority`…), refused as on every lane. None
 * reaches the engine: to-chat.ts builds its body field by field. Content blocks are loose: `cache_control`,
 * `citations` and the like ride on them and are dropped by the translation.
 */

import { z } from "zod";
import { VenymOptions } from "../chat/validate";
import { refuseEngineNames } from "../http/engine-fields";
import { assertObject, parseBody } from "../http/parse-body";

const Text = z.looseObject({ type: z.literal("text"), text: z.string() });

const ImageSource = z.discriminatedUnion("type", [
	z.looseObject({ type: z.literal("base64"), media_type: z.string().min(1), data: z.string() }),
	z.looseObject({ type: z.literal("url"), url: z.string().min(1) }),
]);
const Image = z.looseObject({ type: z.literal("image"), source: ImageSource });

const DocumentSource = z.looseObject({ type: z.literal("text"), data: z.string() });
const Document = z.looseObject({
	type: z.literal("document"),
	source: DocumentSource,
	title: z.string().nullable().optional(),
});

/** A RAG result the user (or a tool) hands the model: its text, with where it came from. */
const SearchResult = z.looseObject({
	type: z.literal("search_result"),
	source: z.string(),
	title: z.string(),
	content: z.array(Text),
});

const ToolUse = z.looseObject({
	type: z.literal("tool_use"),
	id: z.string().min(1),
	name: z.string().min(1),
	input: z.record(z.string(), z.unknown()),
});

/**
 * A tool search's answer (Anthropic's tool search, Claude Code's `ToolSearch`): the deferred tool
 * it names is offered to the model from this turn on (deferred-tools.ts).
 */
const ToolReference = z.looseObject({ type: z.literal("tool_reference"), tool_name: z.string().min(1) });

const ToolResult = z.looseObject({
	type: z.literal("tool_result"),
	tool_use_id: z.string().min(1),
	content: z
		.union([z.string(), z.array(z.discriminatedUnion("type", [Text, Image, Document, SearchResult, ToolReference]))])
		.optional(),
	is_error: z.boolean().optional(),
});

const Thinking = z.looseObject({ type: z.literal("thinking"), thinking: z.string() });
const RedactedThinking = z.looseObject({ type: z.literal("redacted_thinking") });

/** Blocks of server tools (search results, code execution) from earlier turns: no chat equivalent, dropped. */
const SERVER_BLOCKS = [
	"server_tool_use",
	"web_search_tool_result",
	"web_fetch_tool_result",
	"code_execution_tool_result",
	"bash_code_execution_tool_result",
	"text_editor_code_execution_tool_result",
	"mcp_tool_use",
	"mcp_tool_result",
	"container_upload",
] as const;
const ServerBlock = z.looseObject({ type: z.enum(SERVER_BLOCKS) });

const Block = z.discriminatedUnion(
	"type",
	[Text, Image, Document, SearchResult, ToolUse, ToolResult, Thinking, RedactedThinking, ServerBlock],
	{
		error: (iss) =>
			iss.code === "invalid_union" && iss.note === "No matching discriminator"
				? "expected a content block of type 'text', 'image', 'document', 'search_result', 'tool_use', 'tool_result', 'thinking' or 'redacted_thinking'."
				: undefined,
	},
);

export type ContentBlock = z.infer<typeof Block>;

const Blocks = z.array(Block);

/**
 * A string or blocks. Not a zod union: a union reports a bad block at `content` itself; this
 * names the block (`messages[0].content[2]`) and what is wrong with it.
 */
const Content = z.unknown().transform((v, ctx): string | ContentBlock[] => {
	if (typeof v === "string") return v;
	if (v === undefined) {
		ctx.addIssue({ code: "invalid_type", expected: "string", input: v, message: "Missing required parameter." });
		return z.NEVER;
	}
	if (!Array.isArray(v)) {
		ctx.addIssue({ code: "custom", input: v, message: "expected a string or an array of content blocks." });
		return z.NEVER;
	}
	const blocks = Blocks.safeParse(v, { reportInput: true });
	if (blocks.success) return blocks.data;
	for (const issue of blocks.error.issues) ctx.addIssue(issue as Parameters<typeof ctx.addIssue>[0]);
	return z.NEVER;
});

const Message = z
	.looseObject({
		// Claude Code puts `system` entries inside `messages` too.
		role: z.enum(["user", "assistant", "system"]),
		content: Content,
	})
	.superRefine((m, ctx) => {
		// As Anthropic: a user turn says something (an empty one would be dropped, and billed, silently).
		if (m.role === "user" && (m.content === "" || (Array.isArray(m.content) && m.content.length === 0))) {
			ctx.addIssue({ code: "custom", path: ["content"], input: m.content, message: "a user message must not be empty." });
		}
	});

export type AnthropicMessage = z.infer<typeof Message>;

const CustomTool = z.looseObject({
	type: z.literal("custom").optional(),
	name: z.string().min(1).max(128),
	description: z.string().optional(),
	input_schema: z.record(z.string(), z.unknown()),
	defer_loading: z.boolean().optional(),
});

export type CustomToolInput = z.infer<typeof CustomTool>;

const ToolChoice = z.discriminatedUnion("type", [
	z.looseObject({ type: z.literal("auto"), disable_parallel_tool_use: z.boolean().optional() }),
	z.looseObject({ type: z.literal("any"), disable_parallel_tool_use: z.boolean().optional() }),
	z.looseObject({ type: z.literal("tool"), name: z.string().min(1), disable_parallel_tool_use: z.boolean().optional() }),
	z.looseObject({ type: z.literal("none") }),
]);

const ThinkingConfig = z.discriminatedUnion("type", [
	z.looseObject({ type: z.literal("enabled"), budget_tokens: z.number().int().positive() }),
	z.looseObject({ type: z.literal("adaptive") }),
	z.looseObject({ type: z.literal("disabled") }),
]);

/** The fields translated for the engine (or read by the gateway). */
export const MessagesRequestSchema = z.object({
	model: z.string().min(1),
	messages: z.array(Message).min(1),
	max_tokens: z.number().int().positive(),
	system: z.union([z.string(), z.array(Text)]).optional(),
	// The engines take at most 4 stop strings (the chat lane's own limit): more is refused here, by this name.
	stop_sequences: z.array(z.string()).max(4).optional(),
	stream: z.boolean().optional(),
	temperature: z.number().min(0).max(2).optional(),
	top_p: z.number().min(0).max(1).optional(),
	top_k: z.number().int().min(0).optional(),
	// Checked one by one in to-chat.ts: a server tool gets its own message.
	tools: z.array(z.looseObject({ name: z.string().optional(), type: z.string().optional() })).optional(),
	tool_choice: ToolChoice.optional(),
	thinking: ThinkingConfig.optional(),
	metadata: z.looseObject({ user_id: z.string().nullable().optional() }).nullable().optional(),
	// Venym's own: fallback models (chat's convention) and web search options.
	models: z.unknown().optional(),
	fallbacks: z.unknown().optional(),
	venym: VenymOptions.optional(),
});

export type MessagesRequest = z.infer<typeof MessagesRequestSchema>;

/**
 * Accepted and dropped: prompt caching hints (the engine's prefix cache needs none), Anthropic's
 * context editing, output and service options, containers and MCP servers it runs itself.
 */
export const DROPPED_FIELDS = [
	"cache_control",
	"context_management",
	"output_config",
	"output_format",
	"service_tier",
	"container",
	"mcp_servers",
	"inference_geo",
	"betas",
] as const;

const KNOWN = new Set<string>([...Object.keys(MessagesRequestSchema.shape), ...DROPPED_FIELDS]);

/** The request, and the top-level fields nobody here knows (for the `x-venym-ignored-fields` header). */
export interface ValidatedMessages {
	req: MessagesRequest;
	ignored: string[];
}

/** At most this many ignored names go in the header, each cut to this length. */
const MAX_IGNORED = 20;
const MAX_IGNORED_NAME = 64;

/** count_tokens takes the same body without `max_tokens` (and ignores generation settings). */
export const CountTokensSchema = MessagesRequestSchema.extend({ max_tokens: z.number().int().positive().optional() });

export type CountTokensRequest = z.infer<typeof CountTokensSchema>;

export function validateMessagesRequest(body: unknown): ValidatedMessages {
	assertObject(body);
	// An engine's own field (`n_predict`, `priority`…) is refused as on the other lanes, not ignored.
	refuseEngineNames(body, KNOWN);
	return { req: parseBody(MessagesRequestSchema, body), ignored: ignoredFields(body) };
}

export function validateCountTokensRequest(body: unknown): { req: CountTokensRequest; ignored: string[] } {
	assertObject(body);
	refuseEngineNames(body, KNOWN);
	return { req: parseBody(CountTokensSchema, body), ignored: ignoredFields(body) };
}

function ignoredFields(body: Record<string, unknown>): string[] {
	const ignored: string[] = [];
	for (const field in body) {
		if (KNOWN.has(field)) continue;
		if (ignored.length === MAX_IGNORED) break;
		// A header value: printable ASCII only.
		ignored.push(field.replace(/[^\x21-\x7e]/g, "_").slice(0, MAX_IGNORED_NAME));
	}
	return ignored;
}
