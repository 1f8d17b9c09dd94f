/**
 * A bound on how deeply a request's JSON nests. Deep JSON is cheap to send and expensive to
 * handle: recursive copies, schema walkers and storage blow up long after the request was
 * admitted and billed. Every field of a body is checked once, when the body is read.
 */

/** Levels a field's value may nest: `{"a": 1}` is one level, `[[1]]` two. */
export const MAX_JSON_DEPTH = 64;

type Path = Array<string | number>;

/**
 * The path of the first value nested deeper than `maxDepth` levels below its top-level field
 * (the field's own value is level 1), or null when every field is within the bound.
 */
export function tooDeep(body: unknown, maxDepth: number = MAX_JSON_DEPTH): Path | null {
	if (typeof body !== "object" || body === null) return null;
	// The body itself is not a field: its members are level 1.
	const found = deeper(body, 0, maxDepth);
	return found ? found.reverse() : null;
}

/**
 * Recursion stops past `max`, so the stack never grows beyond the bound whatever the input.
 * The path is built only on the way back from a failure (reversed), nothing is allocated otherwise.
 */
function deeper(v: object, level: number, max: number): Path | null {
	if (level > max) return [];
	if (Array.isArray(v)) {
		for (let i = 0; i < v.length; i++) {
			const item: unknown = v[i];
			if (typeof item !== "object" || item === null) continue;
			const found = deeper(item, level + 1, max);
			if (found) {
				found.push(i);
				return found;
			}
		}
		return null;
	}
	for (const key in v) {
		const item: unknown = (v as Record<string, unknown>)[key];
		if (typeof item !== "object" || item === null) continue;
		const found = deeper(item, level + 1, max);
		if (found) {
			found.push(key);
			return found;
		}
	}
	return null;
}

/** The param to name: the path down to the first schema-like key, or its first four steps. */
export function depthParam(path: Path): string {
	const cut: Path = [];
	for (const seg of path) {
		cut.push(seg);
		if (seg === "schema" || seg === "parameters" || cut.length >= 4) break;
	}
	let out = "";
	for (const seg of cut) out += typeof seg === "number" ? `[${seg}]` : out ? `.${seg}` : seg;
	return out;
}
