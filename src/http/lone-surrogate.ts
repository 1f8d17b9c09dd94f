/**
 * Lone UTF-16 surrogates (`"\ud800"` in JSON) are not Unicode text: stored, they come back as
 * invalid UTF-8 (or U+FFFD), break other clients' JSON parsers and cannot be re-encoded by the
 * engines. A body carrying one is refused when it is read, naming where it is.
 */

type Path = Array<string | number>;

/**
 * A lone surrogate can reach a parsed body only as a JSON escape: the text is decoded from UTF-8
 * (Request.text(), TextDecoder), which turns a surrogate's bytes into U+FFFD. So the raw text is
 * searched for `\uD800`–`\uDFFF` escapes (a well-formed pair of them too: emoji escaped by
 * `ensure_ascii` serialisers), and only a hit costs a walk of the parsed value. `includes` first:
 * it scans a megabyte in well under a millisecond; the regex runs only when a `\u` escape is
 * there at all. (A `\p{Cs}` scan of the raw text would cost three times JSON.parse on non-ASCII.)
 */
const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/;

/**
 * The path of the first string (a value, or an object key: the path then ends at that key) in
 * `value`, parsed from `text` (decoded from UTF-8), that holds a lone surrogate; null when there
 * is none.
 */
export function loneSurrogatePath(text: string, value: unknown): Path | null {
	if (!text.includes("\\u") || !SURROGATE_ESCAPE.test(text)) return null;
	const found = find(value);
	return found ? found.reverse() : null;
}

/** Depth is bounded by the caller's depth check (json-depth.ts), which runs first. */
function find(v: unknown): Path | null {
	if (typeof v === "string") return v.isWellFormed() ? null : [];
	if (typeof v !== "object" || v === null) return null;
	if (Array.isArray(v)) {
		for (let i = 0; i < v.length; i++) {
			const found = find(v[i]);
			if (found) {
				found.push(i);
				return found;
			}
		}
		return null;
	}
	for (const key in v) {
		if (!key.isWellFormed()) return [key];
		const found = find((v as Record<string, unknown>)[key]);
		if (found) {
			found.push(key);
			return found;
		}
	}
	return null;
}
