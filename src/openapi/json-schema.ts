/** Small builders for the hand-described JSON Schemas of the OpenAPI document. */
export type Json = Record<string, unknown>;

export const str = { type: "string" };
export const int = { type: "integer" };
export const num = { type: "number" };
export const bool = { type: "boolean" };
export const nullable = (type: string) => ({ type: [type, "null"] });
export const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
export const strings = { type: "array", items: str };
export const nullableStrings = { type: ["array", "null"], items: str };

export function obj(properties: Record<string, unknown>, open = false, required = Object.keys(properties)): Json {
	return { type: "object", required, properties, additionalProperties: open };
}

export function list(item: Json | { $ref: string }, extra: Record<string, unknown> = {}): Json {
	return obj({ object: { const: "list" }, data: { type: "array", items: item }, ...extra });
}
