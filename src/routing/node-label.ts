import { memoize } from "../memo";

/**
 * How a node URL is shown and stored: the one masking of node URLs, for the admin API (and the
 * console, which shows what it answers), usage records (and through them the R2 export) and
 * logs. An operator may put a secret in a node URL in several places (`user:pass@`, a
 * `?token=…` query, a fragment, a key as a path segment), so each is masked; the scheme, host,
 * port and ordinary path segments stay, which is what tells nodes apart.
 */

const MASK = "***";

/** Path segment names after which the next segment is a secret (`/token/abc…`, `/key/…`). */
const SECRET_NAMES = /^(?:api[-_]?keys?|keys?|tokens?|secrets?|auth|bearer|passwords?|pass|access[-_]?token)$/i;
/** Segments that carry their own secret: a key prefix, or `name=value`. */
const SECRET_PREFIX = /^(?:sk|pk|rk|hf|key|token|secret|api[-_]?key|bearer)[-_]|[=:]/i;

/**
 * A segment that looks like a credential: a known key shape, or a run of 24+ letters and digits
 * mixing both (hex and base62 keys). Ordinary segments (`v1`, `n`, `node-1`, a model name, a
 * hyphenated UUID naming a tenant) stay readable.
 */
function credentialShaped(segment: string): boolean {
	if (segment.length === 0) return false;
	if (SECRET_PREFIX.test(segment)) return true;
	for (const run of segment.match(/[A-Za-z0-9]{24,}/g) ?? []) {
		if (/[0-9](?:.*[0-9]){2}/.test(run) && /[A-Za-z](?:.*[A-Za-z]){2}/.test(run)) return true;
	}
	return false;
}

function maskPath(pathname: string): string {
	const segments = pathname.split("/");
	for (let i = 0; i < segments.length; i++) {
		const previous = i > 0 ? decode(segments[i - 1] as string) : "";
		const segment = decode(segments[i] as string);
		if (credentialShaped(segment) || (segment !== "" && SECRET_NAMES.test(previous))) segments[i] = MASK;
	}
	return segments.join("/");
}

function decode(segment: string): string {
	try {
		return decodeURIComponent(segment);
	} catch {
		return segment;
	}
}

/** `scheme://[***@]host[:port]/path`, credential-shaped segments masked, then `?***` and `#***` when present. */
function masked(url: string): string {
	try {
		const u = new URL(url);
		if (u.protocol === "http:" || u.protocol === "https:") {
			const credentials = u.username || u.password ? `${MASK}@` : "";
			const query = u.search ? `?${MASK}` : "";
			const fragment = u.hash ? `#${MASK}` : "";
			return `${u.protocol}//${credentials}${u.host}${maskPath(u.pathname)}${query}${fragment}`;
		}
	} catch {}
	// Not an http(s) URL (nothing the config accepts): keep nothing that could be a secret.
	return maskPath(url.replace(/^([a-z]+:\/\/)?[^/@]*@/i, "$1").replace(/[?#].*$/, ""));
}

/** A node URL as the admin API, the console and logs show it: every credential-shaped part masked. */
export const maskNodeUrl = memoize(masked);

/**
 * How a node is named where it is stored (usage records, and through them the R2 export): the
 * masked URL without its query or fragment, so a record's label does not change with them.
 * Remembered per URL (every settlement asks; the catalog has a few nodes).
 */
export const nodeLabel = memoize((url: string) =>
	maskNodeUrl(url)
		.replace(/^([a-z]+:\/\/)\*\*\*@/i, "$1")
		.replace(/[?#].*$/, ""),
);
