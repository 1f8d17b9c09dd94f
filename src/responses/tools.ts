/**
 * The Responses lane's tools, both ways. What a client offers (`tools`) is checked and split:
 * `function`, `namespace` and `custom` tools become chat functions for the engine; hosted
 * `web_search`/`web_search_preview` is served by the gateway's own search backend when one is
 * configured; every other type (local_shell, file_search, …) is dropped and named in the
 * `x-venym-ignored-tools` header. An engine's call comes back in the shape the client offered:
 * a namespace's function as a `function_call` with its own `name` and its `namespace`, a custom
 * tool as a `custom_tool_call` with its `input`.
 */
import { z } from "zod";
import type { CustomToolCallItemValue, FunctionCallItemValue, ItemStatusValue } from "./item-schema";

export const FunctionTool = z.strictObject({
	type: z.literal("function"),
	name: z.string().min(1).max(64),
	description: z.string().nullable().optional(),
	parameters: z.record(z.string(), z.unknown()).nullable().optional(),
	strict: z.boolean().nullable().optional(),
	// Withheld from the engine until the gateway's tool search finds it (src/chat/tool-search.ts).
	defer_loading: z.boolean().nullable().optional(),
});

const CustomFormat = z.union([
	z.strictObject({ type: z.literal("text") }),
	z.strictObject({ type: z.literal("grammar"), syntax: z.enum(["lark", "regex"]), definition: z.string() }),
]);

export const CustomTool = z.strictObject({
	type: z.literal("custom"),
	name: z.string().min(1).max(64),
	description: z.string().nullable().optional(),
	format: CustomFormat.nullable().optional(),
});

export const NamespaceTool = z.strictObject({
	type: z.literal("namespace"),
	name: z.string().min(1).max(64),
	description: z.string().nullable().optional(),
	tools: z.array(z.discriminatedUnion("type", [FunctionTool, CustomTool])).min(1),
});

/** A hosted or unknown tool type, kept as sent: served (web search) or dropped, never a 400. */
export type HostedToolParam = { type: string } & Record<string, unknown>;
export type FunctionToolParam = z.output<typeof FunctionTool>;
export type CustomToolParam = z.output<typeof CustomTool>;
export type NamespaceToolParam = z.output<typeof NamespaceTool>;
export type ToolParam = FunctionToolParam | CustomToolParam | NamespaceToolParam | HostedToolParam;

const CHECKED: Record<string, z.ZodType> = { function: FunctionTool, custom: CustomTool, namespace: NamespaceTool };
export const WEB_SEARCH_TYPES: ReadonlySet<string> = new Set([
	"web_search",
	"web_search_preview",
	"web_search_preview_2025_03_11",
	"web_search_2025_08_26",
]);

/** The longest tool name offered to an engine (OpenAI's limit, which OpenAI-compatible servers may enforce). */
const MAX_ENGINE_NAME = 64;

/** FNV-1a, 32 bits, as 8 hex digits: a flat name's short, stable tag. */
function fnv1a(text: string): string {
	let h = 0x811c9dc5;
	for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
	return (h >>> 0).toString(16).padStart(8, "0");
}

/**
 * A namespace's tool as the engine sees it: one flat name, the same every turn (history replays
 * it), `<namespace>__<name>`, or when that is over 64 characters its first 55 code points, `_` and a
 * hash of the whole (two tools landing on one name are refused by `Tools`, as any clash is).
 */
export function flatName(namespace: string, name: string): string {
	const flat = `${namespace}__${name}`;
	const points = Array.from(flat);
	if (points.length <= MAX_ENGINE_NAME) return flat;
	return `${points.slice(0, MAX_ENGINE_NAME - 9).join("")}_${fnv1a(flat)}`;
}

/**
 * `tools`: the types the gateway translates are checked strictly (a malformed function tool is a
 * 400 naming it); any other type is kept as sent. Two tools that reach the engine under one name
 * are a 400 too: the engine could not tell their calls apart.
 */
export const Tools = z
	.array(z.looseObject({ type: z.string() }))
	.describe(
		"`function`, `namespace` and `custom` tools reach the engine; hosted `web_search` is served by the gateway's search backend when configured; any other type is dropped and named in `x-venym-ignored-tools`.",
	)
	.transform((tools, ctx): ToolParam[] => {
		const out: ToolParam[] = [];
		const seen = new Set<string>();
		for (const [i, tool] of tools.entries()) {
			const schema = CHECKED[tool.type];
			if (!schema) {
				out.push(tool);
				continue;
			}
			const parsed = schema.safeParse(tool, { reportInput: true });
			if (!parsed.success) {
				for (const issue of parsed.error.issues) ctx.issues.push({ ...issue, path: [i, ...issue.path] } as never);
				return z.NEVER;
			}
			const value = parsed.data as FunctionToolParam | CustomToolParam | NamespaceToolParam;
			const names = value.type === "namespace" ? value.tools.map((t) => flatName(value.name, t.name)) : [value.name];
			for (const name of names) {
				if (seen.has(name)) {
					ctx.issues.push({ code: "custom", path: [i, "name"], input: tool, message: `the tool name '${name}' is used twice.` });
					return z.NEVER;
				}
				seen.add(name);
			}
			out.push(value);
		}
		return out;
	});

type Translated = FunctionToolParam | CustomToolParam | NamespaceToolParam;

function isTranslated(t: ToolParam): t is Translated {
	return t.type === "function" || t.type === "custom" || t.type === "namespace";
}

/**
 * A hosted web search tool the gateway's backend may serve: `external_web_access: false` asks for
 * OpenAI's cached index only (Codex CLI's default), which a live backend is not, so such a tool is
 * dropped like any other hosted tool, and no search is run or billed for it.
 */
function isServableSearch(t: ToolParam): boolean {
	return WEB_SEARCH_TYPES.has(t.type) && (t as { external_web_access?: unknown }).external_web_access !== false;
}

/** Whether the request offers a hosted web search tool the gateway may serve. */
export function offersWebSearch(tools: ReadonlyArray<ToolParam> | null | undefined): boolean {
	return (tools ?? []).some(isServableSearch);
}

/** At most this many dropped tools are named in the header; the rest are counted (`+N`), so it stays a few KB. */
export const MAX_IGNORED_LABELS = 32;

/**
 * The tools the gateway does not serve, for the `x-venym-ignored-tools` header: each by its type
 * (and name, when it has one), the first MAX_IGNORED_LABELS of them, then `+N` for the others. A
 * hosted web search is served when the gateway has a backend.
 */
export function ignoredTools(tools: ReadonlyArray<ToolParam> | null | undefined, webSearchBackend: boolean): string[] {
	const labels = new Set<string>();
	for (const t of tools ?? []) {
		if (isTranslated(t) || (webSearchBackend && isServableSearch(t))) continue;
		const name = typeof t.name === "string" && t.name ? `:${t.name}` : "";
		labels.add(`${t.type}${name}`.replace(/[^\w.:-]/g, "_").slice(0, 80));
	}
	const out = [...labels];
	if (out.length <= MAX_IGNORED_LABELS) return out;
	return [...out.slice(0, MAX_IGNORED_LABELS), `+${out.length - MAX_IGNORED_LABELS}`];
}

/** What an engine name stands for, when it is not a plain function of the same name. */
export interface ToolOrigin {
	kind: "function" | "custom";
	name: string;
	namespace?: string;
}

const CUSTOM_INPUT = "input";

function customFunction(t: CustomToolParam, name: string): Record<string, unknown> {
	let description = t.description ?? "";
	if (t.format?.type === "grammar") {
		description += `${description ? "\n\n" : ""}The input must follow this ${t.format.syntax} grammar:\n${t.format.definition}`;
	}
	const fn: Record<string, unknown> = {
		name,
		parameters: {
			type: "object",
			properties: { [CUSTOM_INPUT]: { type: "string", description: "The tool's whole input, as free text." } },
			required: [CUSTOM_INPUT],
			additionalProperties: false,
		},
	};
	if (description) fn.description = description;
	return { type: "function", function: fn };
}

function plainFunction(t: FunctionToolParam, name: string): Record<string, unknown> {
	const fn: Record<string, unknown> = { name };
	if (t.description != null) fn.description = t.description;
	if (t.parameters != null) fn.parameters = t.parameters;
	if (t.strict != null) fn.strict = t.strict;
	return t.defer_loading ? { type: "function", function: fn, defer_loading: true } : { type: "function", function: fn };
}

/** The chat `tools` for the engine: functions, custom tools and namespaces' tools, in order. */
export function chatTools(tools: ReadonlyArray<ToolParam>): Array<Record<string, unknown>> {
	const out: Array<Record<string, unknown>> = [];
	for (const t of tools) {
		if (t.type === "function") out.push(plainFunction(t as FunctionToolParam, t.name as string));
		else if (t.type === "custom") out.push(customFunction(t as CustomToolParam, t.name as string));
		else if (t.type === "namespace") {
			const ns = t as NamespaceToolParam;
			for (const inner of ns.tools) {
				const name = flatName(ns.name, inner.name);
				out.push(inner.type === "custom" ? customFunction(inner, name) : plainFunction(inner, name));
			}
		}
	}
	return out;
}

/** Engine name → what it stands for; a name missing here is a plain function call. */
export function toolOrigins(tools: ReadonlyArray<ToolParam> | null | undefined): Map<string, ToolOrigin> {
	const map = new Map<string, ToolOrigin>();
	for (const t of tools ?? []) {
		if (t.type === "custom") map.set(t.name as string, { kind: "custom", name: t.name as string });
		else if (t.type === "namespace") {
			const ns = t as NamespaceToolParam;
			for (const inner of ns.tools) {
				map.set(flatName(ns.name, inner.name), { kind: inner.type, name: inner.name, namespace: ns.name });
			}
		}
	}
	return map;
}

/** A custom tool's input from the engine's arguments (`{"input": …}`); anything else is taken as the input itself. */
export function customInput(args: string): string {
	try {
		const parsed: unknown = JSON.parse(args);
		if (parsed && typeof parsed === "object" && typeof (parsed as Record<string, unknown>)[CUSTOM_INPUT] === "string") {
			return (parsed as Record<string, string>)[CUSTOM_INPUT] as string;
		}
	} catch {
		// Not JSON: a weak model wrote the input bare.
	}
	return args;
}

/** A custom tool call as the engine's arguments: what `customInput` reads back. */
export function customArguments(input: string): string {
	return JSON.stringify({ [CUSTOM_INPUT]: input });
}

/** The output item for an engine's tool call, in the shape of the tool the client offered. */
export function callItem(
	origins: ReadonlyMap<string, ToolOrigin>,
	id: string,
	callId: string,
	engineName: string,
	args: string,
	status: ItemStatusValue,
): FunctionCallItemValue | CustomToolCallItemValue {
	const origin = origins.get(engineName);
	if (origin?.kind === "custom") {
		const input = customInput(args);
		const item: CustomToolCallItemValue = { id, type: "custom_tool_call", status, call_id: callId, name: origin.name, input };
		if (origin.namespace) item.namespace = origin.namespace;
		return item;
	}
	const item: FunctionCallItemValue = { id, type: "function_call", status, arguments: args, call_id: callId, name: engineName };
	if (origin) {
		item.name = origin.name;
		if (origin.namespace) item.namespace = origin.namespace;
	}
	return item;
}

/** A function tool as the response object echoes it: OpenAI's nulls for the fields it was sent without. */
export interface EchoedFunctionTool {
	type: "function";
	name: string;
	description: string | null;
	parameters: Record<string, unknown> | null;
	strict: boolean | null;
	defer_loading?: boolean;
}

/** A tool in the response object: any type as sent (hosted and unknown ones too, which the SDK's type lacks). */
export type EchoedTool = EchoedFunctionTool | CustomToolParam | NamespaceToolParam | HostedToolParam;

/** A tool echoed in the response object: as sent, with OpenAI's nulls for a function's missing fields. */
export function echoTool(t: ToolParam): EchoedTool {
	if (t.type !== "function") return { ...t };
	const f = t as FunctionToolParam;
	return {
		type: f.type,
		name: f.name,
		description: f.description ?? null,
		parameters: f.parameters ?? null,
		strict: f.strict ?? null,
		...(f.defer_loading != null ? { defer_loading: f.defer_loading } : {}),
	};
}
