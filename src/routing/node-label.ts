import { memoize } from "../memo";

/**
 * How a node is named where it is stored (usage records, and through them the R2 export): its
 * URL without credentials, query or fragment, which may carry secrets an operator put there.
 * Remembered per URL (every settlement asks; the catalog has a few nodes).
 */
export const nodeLabel = memoize(labelOf);

function labelOf(url: string): string {
	try {
		const u = new URL(url);
		if (u.protocol === "http:" || u.protocol === "https:") return `${u.protocol}//${u.host}${u.pathname}`;
	} catch {}
	// Not an http(s) URL (nothing the config accepts): keep nothing that could be a secret.
	return url.replace(/^([a-z]+:\/\/)?[^/@]*@/i, "$1").replace(/[?#].*$/, "");
}
