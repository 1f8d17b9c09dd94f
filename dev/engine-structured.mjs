// Structured output for the development engine: what vLLM, SGLang and llama.cpp do with
// `response_format`, simply. `json_object` answers a JSON object; `json_schema` answers JSON that
// parses and matches the schema's types and required properties (every property is filled in,
// as OpenAI's strict mode requires), built from the schema alone: the first `enum`/`const` value,
// the first `anyOf`/`oneOf` branch, local `$ref`s followed, strings made of the prompt's text.

const MAX_DEPTH = 8;
const MAX_STRING = 200;

/**
 * The answer text for a request's `response_format`, or null when it asks for plain text.
 * @param {unknown} responseFormat the request's `response_format`
 * @param {string} promptText the last user message's text (strings in the answer echo it)
 * @returns {string | null}
 */
export function structuredText(responseFormat, promptText) {
	const format = /** @type {{ type?: unknown, json_schema?: { schema?: unknown } } | null} */ (responseFormat);
	if (!format || typeof format !== "object") return null;
	const text = promptText.trim().slice(0, MAX_STRING) || "echo";
	if (format.type === "json_object") return JSON.stringify({ echo: text });
	if (format.type !== "json_schema") return null;
	const schema = format.json_schema?.schema;
	if (!schema || typeof schema !== "object") return JSON.stringify({ echo: text });
	return JSON.stringify(valueFor(schema, schema, text, 0));
}

/** Follows `#/$defs/…` and `#/definitions/…` inside the schema itself; anything else is left as it is. */
function resolve(schema, root) {
	const ref = schema?.$ref;
	if (typeof ref !== "string" || !ref.startsWith("#/")) return schema;
	let target = root;
	for (const part of ref.slice(2).split("/")) target = target?.[part.replaceAll("~1", "/").replaceAll("~0", "~")];
	return target && typeof target === "object" ? target : {};
}

function typeOf(schema) {
	const t = schema.type;
	if (Array.isArray(t)) return t.find((x) => x !== "null") ?? "null";
	if (typeof t === "string") return t;
	if (schema.properties) return "object";
	if (schema.items) return "array";
	return "string";
}

function valueFor(raw, root, text, depth) {
	const schema = resolve(raw, root);
	if (!schema || typeof schema !== "object") return text;
	if (Object.hasOwn(schema, "const")) return schema.const;
	if (Array.isArray(schema.enum) && schema.enum.length) return schema.enum[0];
	const branch = (schema.anyOf ?? schema.oneOf ?? schema.allOf)?.[0];
	if (branch) return valueFor(branch, root, text, depth + 1);
	if (depth >= MAX_DEPTH) return null;
	switch (typeOf(schema)) {
		case "object": {
			const out = {};
			for (const [name, prop] of Object.entries(schema.properties ?? {})) out[name] = valueFor(prop, root, text, depth + 1);
			for (const name of Array.isArray(schema.required) ? schema.required : []) {
				if (!Object.hasOwn(out, name)) out[name] = text;
			}
			return out;
		}
		case "array": {
			const count = Math.min(Math.max(Number(schema.minItems) || 1, 1), 3);
			return Array.from({ length: count }, () => valueFor(schema.items ?? {}, root, text, depth + 1));
		}
		case "integer":
			return Math.round(inRange(1, schema));
		case "number":
			return inRange(1.5, schema);
		case "boolean":
			return true;
		case "null":
			return null;
		default:
			return stringFor(schema, text);
	}
}

function inRange(value, schema) {
	const lo = Number.isFinite(schema.minimum) ? schema.minimum : -Infinity;
	const hi = Number.isFinite(schema.maximum) ? schema.maximum : Infinity;
	return Math.min(Math.max(value, lo), hi);
}

function stringFor(schema, text) {
	if (schema.format === "date-time") return "2026-01-01T00:00:00Z";
	if (schema.format === "date") return "2026-01-01";
	if (schema.format === "email") return "dev@example.com";
	if (schema.format === "uri") return "https://example.com/";
	const max = Number.isInteger(schema.maxLength) ? schema.maxLength : MAX_STRING;
	return text.padEnd(Number(schema.minLength) || 0, ".").slice(0, max);
}
