/**
 * The `POST /v1/responses` body: settings, tools, and the request-level routing fields; the
 * input items it carries are item-schema.ts. Objects are strict: the gateway translates every
 * field it accepts, so an unknown one is a client mistake reported by name rather than a setting
 * silently dropped.
 */

import { z } from "zod";
import { VenymOptions } from "../chat/validate";
import { GatewayError } from "../errors";
import { checkFields, readFields } from "../http/engine-fields";
import { assertObject, parseBody } from "../http/parse-body";
import { numberIn, TOP_LOGPROBS } from "../http/sampling-params";
import { takeRequestFallbacks } from "../routing/fallback-chain";
import { checkImages, InputItem } from "./item-schema";
import { checkToolChoice } from "./tool-choice";
import { Tools, WEB_SEARCH_TYPES } from "./tools";

const ToolChoice = z.union(
	[
		z.enum(["none", "auto", "required"]),
		z.strictObject({ type: z.literal("function"), name: z.string().min(1), namespace: z.string().min(1).optional() }),
		z.strictObject({ type: z.literal("custom"), name: z.string().min(1) }),
		// The hosted search, served by the gateway (responses/hosted-search.ts): the engine must call it.
		z.strictObject({ type: z.enum([...WEB_SEARCH_TYPES] as [string, ...string[]]) }),
	],
	{
		error: () =>
			`expected 'none', 'auto', 'required', {"type": "function", "name": "..."}, {"type": "custom", "name": "..."} or {"type": "web_search"}.`,
	},
);

const TextFormat = z.discriminatedUnion("type", [
	z.strictObject({ type: z.literal("text") }),
	z.strictObject({ type: z.literal("json_object") }),
	z.strictObject({
		type: z.literal("json_schema"),
		name: z.string().min(1).max(64),
		schema: z.record(z.string(), z.unknown()),
		strict: z.boolean().nullable().optional(),
		description: z.string().optional(),
	}),
]);

const Metadata = z
	.record(z.string().max(64), z.string().max(512))
	.refine((m) => Object.keys(m).length <= 16, { message: "at most 16 keys are allowed." });

const Nullable = <T extends z.ZodType>(t: T) => t.nullable().optional();

export const ResponsesRequestSchema = z.strictObject({
	model: z.string().min(1),
	input: z.union([z.string(), z.array(InputItem).min(1)], { error: () => "expected a string or an array of input items." }),
	instructions: Nullable(z.string()),
	max_output_tokens: Nullable(z.number().int().positive()),
	temperature: Nullable(numberIn(0, 2)),
	top_p: Nullable(numberIn(0, 1)),
	// Accepted in range, as OpenAI does; it has an effect there only with `include`
	// `message.output_text.logprobs`, which this gateway does not return, so it goes no further.
	top_logprobs: TOP_LOGPROBS,
	// function, namespace and custom tools are translated; hosted ones are served or dropped (tools.ts).
	tools: Nullable(Tools),
	tool_choice: Nullable(ToolChoice),
	parallel_tool_calls: Nullable(z.boolean()),
	text: Nullable(
		z.strictObject({
			format: TextFormat.optional(),
			verbosity: Nullable(z.enum(["low", "medium", "high"])),
		}),
	),
	reasoning: Nullable(
		z.strictObject({
			effort: Nullable(z.enum(["none", "minimal", "low", "medium", "high", "xhigh"])),
			summary: Nullable(z.enum(["auto", "concise", "detailed"])),
		}),
	),
	metadata: Nullable(Metadata),
	store: Nullable(z.boolean()).transform((v) => v ?? true),
	previous_response_id: Nullable(z.string().min(1)),
	background: Nullable(z.boolean()),
	stream: Nullable(z.boolean()),
	stream_options: Nullable(z.looseObject({})),
	user: z.string().optional(),
	venym: VenymOptions.optional(),
	truncation: Nullable(z.enum(["auto", "disabled"])),
	include: Nullable(z.array(z.string())),
	// Hints for OpenAI's own platform (sent by Codex-style clients): accepted, no effect here.
	service_tier: Nullable(z.string()),
	safety_identifier: Nullable(z.string()),
	// Codex's session and turn ids: accepted, neither forwarded to the engine nor stored.
	client_metadata: Nullable(z.record(z.string(), z.unknown())),
	// OpenAI platform settings an official client may send: accepted, no effect here (docs/responses.md).
	prompt_cache_retention: Nullable(z.string()),
	prompt_cache_options: Nullable(z.looseObject({})),
	moderation: Nullable(z.looseObject({})),
	max_tool_calls: Nullable(z.number().int().nonnegative()),
	context_management: Nullable(z.array(z.looseObject({}))),
	background_options: Nullable(z.looseObject({})),
	access_programs: Nullable(z.looseObject({})),
	image: Nullable(z.looseObject({})),
	// Routing, as on chat: the node affinity key (passed on to the engine), and the fallback models
	// (OpenRouter's `models`, Venice's `fallbacks`), whose shape is chat's, checked by
	// `takeRequestFallbacks` in validateResponsesRequest, and whose ids are checked when authorized.
	prompt_cache_key: Nullable(z.string()),
	models: z.unknown().optional(),
	fallbacks: z.unknown().optional(),
});

export type ResponsesRequest = z.output<typeof ResponsesRequestSchema>;

/**
 * Every top-level field Responses accepts: all translated by to-chat.ts, none sent as is. Any other
 * is a 400 `unsupported_parameter` naming it (with its hint when it is an engine's field).
 */
const RESPONSES_FIELDS = readFields(Object.keys(ResponsesRequestSchema.shape));

/** Validates a Responses create body; throws GatewayError "invalid_request" naming the bad param. */
export function validateResponsesRequest(body: unknown): ResponsesRequest {
	assertObject(body);
	checkFields(body, RESPONSES_FIELDS);
	const req = parseBody(ResponsesRequestSchema, body, { issues: precise });
	if (req.background && req.stream) {
		throw new GatewayError("invalid_request", "Background responses cannot be streamed: set 'stream' to false or omit it.", {
			param: "background",
		});
	}
	// Chat's own check, on a copy (it removes what it reads): the same 400s, naming the same entries.
	takeRequestFallbacks({ models: req.models, fallbacks: req.fallbacks });
	if (Array.isArray(req.input)) checkImages(req.input);
	checkToolChoice(req.tools, req.tool_choice);
	return req;
}

/**
 * A union failure names only the union (`input`), which tells the client little. When
 * exactly one branch got past the value's type, that branch's issues are what the client
 * meant, so they are reported instead, under their full path.
 */
function precise(issues: z.core.$ZodIssue[]): z.core.$ZodIssue[] {
	const first = issues[0];
	if (first?.code !== "invalid_union") return issues;
	const matched = first.errors.filter((branch) => !branch.some((i) => i.code === "invalid_type" && i.path.length === 0));
	if (matched.length === 0 && first.input === undefined) {
		return [{ code: "invalid_type", expected: "nonoptional", path: first.path, input: undefined, message: "Required" }];
	}
	const [branch] = matched;
	if (matched.length !== 1 || !branch || branch.length === 0) return issues;
	return precise(branch.map((i) => ({ ...i, path: [...first.path, ...i.path] })));
}
