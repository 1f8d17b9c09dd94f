/**
 * Responses items: the input items a client may send (zod, strict: an unknown field is a client
 * mistake reported by name), the checks zod cannot express, and the normalised shapes items take
 * once stored, listed and replayed as history. The request body around them is request-schema.ts.
 */
import { z } from "zod";
import { GatewayError } from "../errors";

export function isRecord(v: unknown): v is Record<string, unknown> {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

const InputText = z.strictObject({ type: z.literal("input_text"), text: z.string() });

const InputImage = z.strictObject({
	type: z.literal("input_image"),
	image_url: z.string().nullable().optional(),
	file_id: z.string().nullable().optional(),
	detail: z.enum(["low", "high", "auto", "original"]).optional(),
});

const OutputText = z.strictObject({
	type: z.literal("output_text"),
	text: z.string(),
	annotations: z.array(z.looseObject({ type: z.string() })).optional(),
	logprobs: z.array(z.unknown()).optional(),
});

const ContentPart = z.discriminatedUnion("type", [InputText, InputImage, OutputText], {
	error: (iss) => (iss.code === "invalid_union" ? "expected one of 'input_text', 'input_image', 'output_text'." : undefined),
});

const ItemStatus = z.enum(["in_progress", "completed", "incomplete"]).nullable().optional();

const MessageItem = z.strictObject({
	type: z.literal("message"),
	role: z.enum(["user", "assistant", "system", "developer"]),
	content: z.union([z.string(), z.array(ContentPart)]),
	id: z.string().nullable().optional(),
	status: ItemStatus,
	phase: z.enum(["commentary", "final_answer"]).nullable().optional(),
});

const FunctionCallItem = z.strictObject({
	type: z.literal("function_call"),
	call_id: z.string().min(1),
	name: z.string().min(1),
	// A namespace tool's function (tools.ts): the engine knew it under its flat name.
	namespace: z.string().min(1).nullable().optional(),
	arguments: z.string(),
	id: z.string().nullable().optional(),
	status: ItemStatus,
});

// A tool's output: text, or content parts (Codex sends `input_text`/`input_image` parts for some tools).
const ToolOutput = z.union([z.string(), z.array(z.looseObject({ type: z.string() }))]);

const FunctionCallOutputItem = z.strictObject({
	type: z.literal("function_call_output"),
	call_id: z.string().min(1),
	output: ToolOutput,
	id: z.string().nullable().optional(),
	status: ItemStatus,
});

const CustomToolCallItem = z.strictObject({
	type: z.literal("custom_tool_call"),
	call_id: z.string().min(1),
	name: z.string().min(1),
	namespace: z.string().min(1).nullable().optional(),
	input: z.string(),
	id: z.string().nullable().optional(),
	status: ItemStatus,
});

const CustomToolCallOutputItem = z.strictObject({
	type: z.literal("custom_tool_call_output"),
	call_id: z.string().min(1),
	output: ToolOutput,
	id: z.string().nullable().optional(),
	status: ItemStatus,
});

// A hosted search from an earlier turn (ours or OpenAI's): kept for the record, not sent to the engine.
const WebSearchCallItem = z.looseObject({ type: z.literal("web_search_call"), id: z.string().nullable().optional() });

// Replayed reasoning (ours or another provider's, maybe sealed): its shape is not checked; only
// reasoning text the gateway opened from its own seal (reasoning-seal.ts) reaches the engine.
const ReasoningItem = z.looseObject({ type: z.literal("reasoning"), id: z.string().nullable().optional() });

// An earlier stored input or output item, named by id; run-response resolves it from the key's store.
const ItemReferenceItem = z.strictObject({ type: z.literal("item_reference"), id: z.string().min(1) });

const ITEM_TYPES =
	"'message', 'function_call', 'function_call_output', 'custom_tool_call', 'custom_tool_call_output', 'reasoning', 'web_search_call', 'item_reference'";

/**
 * Fills in `type` where the OpenAI SDK lets it be left out: an item that is only an `id` is an
 * ItemReference (its `type` may also be null), any other item without one an EasyInputMessage.
 */
function withType(v: unknown): unknown {
	if (!isRecord(v)) return v;
	if (v.type == null && "id" in v && Object.keys(v).every((k) => k === "id" || k === "type")) {
		return { ...v, type: "item_reference" };
	}
	return v.type === undefined ? { ...v, type: "message" } : v;
}

export const InputItem = z.preprocess(
	withType,
	z.discriminatedUnion(
		"type",
		[
			MessageItem,
			FunctionCallItem,
			FunctionCallOutputItem,
			CustomToolCallItem,
			CustomToolCallOutputItem,
			ReasoningItem,
			WebSearchCallItem,
			ItemReferenceItem,
		],
		{
			error: (iss) => (iss.code === "invalid_union" ? `expected one of ${ITEM_TYPES}.` : undefined),
		},
	),
);

/** One input item as the client sent it (ids optional, content maybe a plain string, maybe a reference). */
export type RequestItem = z.output<
	| typeof MessageItem
	| typeof FunctionCallItem
	| typeof FunctionCallOutputItem
	| typeof CustomToolCallItem
	| typeof CustomToolCallOutputItem
	| typeof ReasoningItem
	| typeof WebSearchCallItem
	| typeof ItemReferenceItem
>;
/** A tool's output as a client may send it: text or content parts. */
export type ToolOutputValue = z.output<typeof ToolOutput>;
/** `{"type": "item_reference", "id": …}`: an earlier stored item, replaced by it before anything runs. */
export type ItemReference = z.output<typeof ItemReferenceItem>;
/** Images must be URLs (or data: URLs): there is no Files API behind this gateway to resolve a file_id. */
export function checkImages(items: RequestItem[]): void {
	for (const [i, item] of items.entries()) {
		if (item.type !== "message" || typeof item.content === "string") continue;
		for (const [j, part] of item.content.entries()) {
			const at = `input[${i}].content[${j}]`;
			if (part.type === "input_image") {
				if (item.role !== "user") {
					throw new GatewayError("invalid_request", `Invalid value for '${at}.type': images are only allowed in user messages.`, {
						param: `${at}.type`,
					});
				}
				if (part.file_id) {
					throw new GatewayError(
						"invalid_request",
						`Invalid value for '${at}.file_id': file inputs are not supported; send the image as image_url.`,
						{
							param: `${at}.file_id`,
						},
					);
				}
				if (!part.image_url) {
					throw new GatewayError("invalid_request", `Missing required parameter: '${at}.image_url'.`, {
						param: `${at}.image_url`,
					});
				}
			} else if (part.type === "output_text" && item.role !== "assistant") {
				throw new GatewayError(
					"invalid_request",
					`Invalid value for '${at}.type': 'output_text' is only allowed in assistant messages.`,
					{
						param: `${at}.type`,
					},
				);
			}
		}
	}
}

// ---- Item shapes after normalisation (stored, listed, replayed as history) ----

export interface UrlCitationAnnotation {
	type: "url_citation";
	start_index: number;
	end_index: number;
	url: string;
	title: string;
}

export interface InputTextPart {
	type: "input_text";
	text: string;
}

export interface InputImagePart {
	type: "input_image";
	image_url: string;
	detail: "low" | "high" | "auto" | "original";
}

export interface OutputTextPart {
	type: "output_text";
	text: string;
	annotations: UrlCitationAnnotation[];
	logprobs: never[];
}

export interface InputMessageItem {
	type: "message";
	id: string;
	role: "user" | "system" | "developer";
	status: "completed";
	content: Array<InputTextPart | InputImagePart>;
}

export type ItemStatusValue = "in_progress" | "completed" | "incomplete";

export interface OutputMessageItem {
	type: "message";
	id: string;
	role: "assistant";
	status: ItemStatusValue;
	content: OutputTextPart[];
}

export interface FunctionCallItemValue {
	type: "function_call";
	id: string;
	call_id: string;
	name: string;
	/** Set when the function belongs to a namespace tool. */
	namespace?: string;
	arguments: string;
	status: ItemStatusValue;
}

export interface FunctionCallOutputItemValue {
	type: "function_call_output" | "custom_tool_call_output";
	id: string;
	call_id: string;
	output: string | Array<{ type: string } & Record<string, unknown>>;
	status: "completed";
}

export interface CustomToolCallItemValue {
	type: "custom_tool_call";
	id: string;
	call_id: string;
	name: string;
	namespace?: string;
	input: string;
	status: ItemStatusValue;
}

/** A search the gateway ran (hosted web_search tool), or one an earlier turn replays. */
export interface WebSearchCallItemValue {
	type: "web_search_call";
	id: string;
	status: "completed" | "failed" | "in_progress" | "searching";
	action: { type: "search"; query: string; sources?: Array<{ type: "url"; url: string }> };
}

export interface ReasoningItemValue {
	type: "reasoning";
	id: string;
	summary: Array<{ type: "summary_text"; text: string }>;
	content?: Array<{ type: "reasoning_text"; text: string }>;
	encrypted_content?: string | null;
}

/** What a response produces. */
export type OutputItem =
	| ReasoningItemValue
	| OutputMessageItem
	| FunctionCallItemValue
	| CustomToolCallItemValue
	| WebSearchCallItemValue;

/** Any item of a conversation in normalised form: earlier inputs and outputs alike. */
export type ResponseInputItem =
	| InputMessageItem
	| OutputMessageItem
	| FunctionCallItemValue
	| FunctionCallOutputItemValue
	| CustomToolCallItemValue
	| WebSearchCallItemValue
	| ReasoningItemValue;
