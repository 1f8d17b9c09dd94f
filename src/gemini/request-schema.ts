/**
 * The Gemini API's `GenerateContentRequest` (`POST /v1beta/models/{model}:generateContent` and
 * `:streamGenerateContent`): every field the gateway translates is checked here (a wrong type is a
 * 400 naming it); fields the engine cannot act on (`safetySettings`, `cachedContent`, `labels`)
 * are accepted and dropped; any other top-level field is ignored and reported back by name in
 * `x-venym-ignored-fields`, the Messages lane's rule, except an engine's own field clients send by
 * habit (http/engine-fields.ts FIELD_HINTS), refused as on every lane. None reaches the engine:
 * to-chat.ts builds the chat body field by field. Parts are loose: `thoughtSignature`,
 * `videoMetadata` and the like ride on them and are dropped by the translation.
 */
import { z } from "zod";
import { VenymOptions } from "../chat/validate";
import { refuseEngineNames } from "../http/engine-fields";
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

/** Google's own fields the engines cannot act on: accepted, dropped. */
export const DROPPED_FIELDS = ["safetySettings", "cachedContent", "labels", "model", "session_id"] as const;

const KNOWN = new Set<string>([...Object.keys(GenerateContentSchema.shape), ...DROPPED_FIELDS]);

const MAX_IGNORED = 20;
const MAX_IGNORED_NAME = 64;

export interface ValidatedGemini {
	req: GenerateContentRequest;
	ignored: string[];
}

export function validateGenerateContent(body: unknown): ValidatedGemini {
	assertObject(body);
	refuseEngineNames(body, KNOWN);
	return { req: parseBody(GenerateContentSchema, body), ignored: ignoredFields(body) };
}

/**
 * `:countTokens` takes `{contents}` or `{generateContentRequest: {...}}` (what the SDK sends);
 * the contents may be empty there.
 */
export function validateCountTokens(body: unknown): ValidatedGemini {
	assertObject(body);
	const inner = body.generateContentRequest;
	if (inner !== undefined) return validateCountTokens(inner);
	refuseEngineNames(body, KNOWN);
	const schema = GenerateContentSchema.extend({ contents: z.array(Content).default([]) });
	return { req: parseBody(schema, body), ignored: ignoredFields(body) };
}

function ignoredFields(body: Record<string, unknown>): string[] {
	const ignored: string[] = [];
	for (const field in body) {
		if (KNOWN.has(field)) continue;
		if (ignored.length === MAX_IGNORED) break;
		ignored.push(field.replace(/[^\x21-\x7e]/g, "_").slice(0, MAX_IGNORED_NAME));
	}
	return ignored;
}
