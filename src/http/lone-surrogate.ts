/**
 * Lone UTF-16 surrogates (`"\ud800"` in JSON) are not Unicode text: stored, they come back as
 * invalid UTF-8 (or U+FFFD), break other clients' JSON parsers and cannot be re-encoded by the
 * engines. A body carrying one is refused when it is read, naming where it is.
 */

type Path = Array<string | number>;

/**
 * What can put a lone surrogate in a parsed value: a `\uD800`–`\uDFFF` escape (a well-formed
 * pair of them too: emoji escaped by `ensure_ascii` serialisers), or a raw lone surrogate in
 * text that did not come from UTF-8. One linear scan of the raw text, so the common body (no
 * such escape) costs no walk of the parsed value.
 */
const MAYBE_LONE = /\\u[dD][89a-fA-F]|\p{Cs}/u;

/** With the `u` flag a surrogate pair is one code point: only an unpaired half is `\p{Cs}`. */
const LONE = /\p{Cs}/u;

/**
 * The path of the first string (a value, or an object key: the path then ends at that key) in
 * `value`, parsed from `text`, that holds a lone surrogate; null when there is none.
 */
export function loneSurrogatePath(text: string, value: unknown): Path | null {
	if (!MAYBE_LONE.test(text)) return null;
	const found = find(value);
	return found ? found.reverse() : null;
}

/** Depth is bounded by the caller's depth check (json-depth.ts), which runs first. */
function find(v: unknown): Path | null {
	if (typeof v === "string") return LONE.test(v) ? [] : null;
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
		if (LONE.test(key)) return [key];
		const found = find((v as Record<string, unknown>)[key]);
		if (found) {
			found.push(key);
			return found;
		}
	}
	return null;
}
