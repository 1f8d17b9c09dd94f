/**
 * CORS for the public API. Preflights carry no Authorization, so they are answered before
 * authentication and cannot know the key: they reflect the requesting origin and the request
 * headers the OpenAI SDKs send. Whether an origin may actually use a key is decided per
 * request by the key's `allowed_origins` (403), and that 403, like every error, carries CORS
 * headers so the browser lets the page read it.
 */
import type { MiddlewareHandler } from "hono";

const ALLOWED_HEADERS = new Set(["authorization", "content-type", "openai-organization", "openai-project", "idempotency-key"]);
const ALLOWED_METHODS = "GET, POST, DELETE, OPTIONS";
const MAX_AGE_S = "7200";

export const EXPOSED_HEADERS = [
	"x-request-id",
	"x-venym-cost-usd",
	"x-venym-balance-usd",
	"x-venym-web-search",
	"x-venym-lane",
	"retry-after",
	"x-ratelimit-limit-requests",
	"x-ratelimit-remaining-requests",
	"x-ratelimit-reset-requests",
	"x-ratelimit-limit-tokens",
	"x-ratelimit-remaining-tokens",
	"x-ratelimit-reset-tokens",
].join(", ");

function headerAllowed(name: string): boolean {
	return ALLOWED_HEADERS.has(name) || name.startsWith("x-stainless-");
}

/** The subset of Access-Control-Request-Headers we allow, lowercased. */
export function allowedRequestHeaders(requested: string | null): string[] {
	if (!requested) return [];
	return requested
		.split(",")
		.map((h) => h.trim().toLowerCase())
		.filter((h) => h && headerAllowed(h));
}

function addVary(headers: Headers, value: string): void {
	const current = headers.get("vary");
	if (!current) headers.set("vary", value);
	else if (
		!current
			.toLowerCase()
			.split(/\s*,\s*/)
			.includes(value.toLowerCase())
	)
		headers.set("vary", `${current}, ${value}`);
}

/** Puts the CORS headers of an actual (non-preflight) response on `headers`. Idempotent. */
export function applyCors(origin: string | undefined, headers: Headers): void {
	addVary(headers, "Origin");
	if (!origin) return;
	headers.set("access-control-allow-origin", origin);
	headers.set("access-control-expose-headers", EXPOSED_HEADERS);
}

/** The answer to a preflight. */
export function preflight(req: Request): Response {
	const headers = new Headers();
	addVary(headers, "Origin");
	addVary(headers, "Access-Control-Request-Method");
	addVary(headers, "Access-Control-Request-Headers");
	const origin = req.headers.get("origin");
	if (origin) {
		headers.set("access-control-allow-origin", origin);
		headers.set("access-control-allow-methods", ALLOWED_METHODS);
		const allowed = allowedRequestHeaders(req.headers.get("access-control-request-headers"));
		if (allowed.length) headers.set("access-control-allow-headers", allowed.join(", "));
		headers.set("access-control-max-age", MAX_AGE_S);
	}
	return new Response(null, { status: 204, headers });
}

/** CORS middleware: preflights answered here, CORS headers on everything else (errors included). */
export const cors: MiddlewareHandler = async (c, next) => {
	if (c.req.method === "OPTIONS" && c.req.header("access-control-request-method")) return preflight(c.req.raw);
	await next();
	try {
		applyCors(c.req.header("origin"), c.res.headers);
	} catch {
		// Immutable headers (a response passed through from fetch): copy it first.
		c.res = new Response(c.res.body, c.res);
		applyCors(c.req.header("origin"), c.res.headers);
	}
};
