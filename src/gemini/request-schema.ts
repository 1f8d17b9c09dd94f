/**
 * The Gemini API's `GenerateContentRequest` (`POST /v1beta/models/{model}:generateContent` and
 * `:streamGenerateContent`): every field the gateway translates is checked here (a wrong type is a
 * 400 naming it). The top level follows the allowlist rule of every lane (http/engine-fields.ts):
 * Google's own fields the engines cannot act on (`safetySettings`, `cachedContent`, `labels`) are
 * accepted and dropped, and any other field is refused with 400 naming it (Google's API refuses
 * unknown fields too, so its clients send none), unless the model's `pass_through_fields` lists
 * it: then it goes to the engine as sent, as on chat. to-chat.ts builds the chat body field by
 * field. Parts and configs are loose: `thoughtSignature`, `videoMetadata` and the like ride on them
 * and are dropped by the translation.
 */
import { z } from "zod";
import { VenymOptions } from "../chat/validate";
import { checkFields, type FieldUse, type LaneFields, readFields } from "../http/engine-fields";
import { assertObject, parseBody } from "../http/parse-body";

const Args = z.record(z.string(), z.unknown());

export const Part = z.looseObject({
	text: z.string().optional(),
	thought: z.boolean().optional(),
	inlineData: z.looseObject({ mimeType: z.string().min(1), data: z.string() }).optional(),
	fileData: z.looseObject({ mimeType: z.string().optional(), fileUri: z.string().min(1) }).optional(),
	functionCall: z.looseObject({ id: z.string().optional(), name: z.string().min(1), args: Args.optional() }).optional(),
	functionResponse: z.looseObject({ id: z.string().optional(), name: z.string().min(1), response: Args.optional() }).optional(),
});
export type GeminiPart = z.infer<typeof Part>;

export const Content = z.looseObject({
	role: z.enum(["user", "model", "function", "tool"]).optional(),
	parts: z.array(Part).default([]),
});
export type GeminiContent = z.infer<typeof Content>;

const FunctionDeclaration = z.looseObject({
	name: z.string().min(1),
	description: z.string().optional(),
	parameters: z.record(z.string(), z.unknown()).optional(),
	parametersJsonSchema: z.record(z.string(), z.unknown()).optional(),
});
export type GeminiFunctionDeclaration = z.infer<typeof FunctionDeclaration>;

const Tool = z.looseObject({ functionDeclarations: z.array(FunctionDeclaration).optional() });

const ToolConfig = z.looseObject({
	functionCallingConfig: z
		.looseObject({
			mode: z.enum(["MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED"]).optional(),
			allowedFunctionNames: z.array(z.string()).optional(),
		})
		.optional(),
});

const ThinkingConfig = z.looseObject({
	includeThoughts: z.boolean().optional(),
	thinkingBudget: z.number().int().optional(),
	thinkingLevel: z.string().optional(),
});

const GenerationConfig = z.looseObject({
	temperature: z.number().min(0).max(2).optional(),
	topP: z.number().min(0).max(1).optional(),
	topK: z.number().int().min(0).optional(),
	maxOutputTokens: z.number().int().positive().optional(),
	stopSequences: z.array(z.string()).max(16).optional(),
	candidateCount: z.number().int().positive().optional(),
	responseMimeType: z.string().optional(),
	responseSchema: z.record(z.string(), z.unknown()).optional(),
	responseJsonSchema: z.record(z.string(), z.unknown()).optional(),
	presencePenalty: z.number().optional(),
	frequencyPenalty: z.number().optional(),
	seed: z.number().int().optional(),
	thinkingConfig: ThinkingConfig.optional(),
});

export const GenerateContentSchema = z.object({
	contents: z.array(Content).min(1),
	systemInstruction: Content.optional(),
	tools: z.array(Tool).optional(),
	toolConfig: ToolConfig.optional(),
	generationConfig: GenerationConfig.optional(),
	// Venym's own: fallback models (chat's convention) and web search options.
	models: z.unknown().optional(),
	fallbacks: z.unknown().optional(),
	venym: VenymOptions.optional(),
});
export type GenerateContentRequest = z.infer<typeof GenerateContentSchema>;

/**
 * Google's own fields the engines cannot act on: accepted, dropped. `model` is the SDK's copy of
 * the path's; `session_id` a client's own tag.
 */
const DROPPED_FIELDS = ["safetySettings", "cachedContent", "labels", "model", "session_id"] as const;

/** The lane's allowlist: every field the translation reads, and those it drops. */
export const GEMINI_FIELDS: LaneFields = {
	...readFields(Object.keys(GenerateContentSchema.shape)),
	...Object.fromEntries(DROPPED_FIELDS.map((f): [string, FieldUse] => [f, "dropped"])),
};

/** `:countTokens` also takes the SDK's wrapper. */
const COUNT_FIELDS: LaneFields = { ...GEMINI_FIELDS, generateContentRequest: "read" };

export interface ValidatedGemini {
	req: GenerateContentRequest;
	/** The fields the model's `pass_through_fields` let through, as sent: the engine gets them. */
	passed: Record<string, unknown>;
}

function passedFields(body: Record<string, unknown>, lane: LaneFields, passThrough: ReadonlyArray<string>) {
	const passed: Record<string, unknown> = {};
	for (const field of passThrough) if (Object.hasOwn(body, field) && !Object.hasOwn(lane, field)) passed[field] = body[field];
	return passed;
}

/** A request to `:generateContent` or `:streamGenerateContent` for a model letting `passThrough` through. */
export function validateGenerateContent(body: unknown, passThrough: ReadonlyArray<string> = []): ValidatedGemini {
	assertObject(body);
	checkFields(body, GEMINI_FIELDS, passThrough);
	return { req: parseBody(GenerateContentSchema, body), passed: passedFields(body, GEMINI_FIELDS, passThrough) };
}

/**
 * `:countTokens` takes `{contents}` or `{generateContentRequest: {...}}` (what the SDK sends);
 * the contents may be empty there. The model's pass-through fields are accepted and not counted.
 */
export function validateCountTokens(body: unknown, passThrough: ReadonlyArray<string> = []): ValidatedGemini {
	assertObject(body);
	const inner = body.generateContentRequest;
	if (inner !== undefined) {
		checkFields(body, COUNT_FIELDS, passThrough);
		return validateCountTokens(inner, passThrough);
	}
	checkFields(body, GEMINI_FIELDS, passThrough);
	const schema = GenerateContentSchema.extend({ contents: z.array(Content).default([]) });
	return { req: parseBody(schema, body), passed: {} };
}
