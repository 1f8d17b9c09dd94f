/**
 * CORS for the public API, with hono/cors. Preflights carry no Authorization, so they are
 * answered before authentication and cannot know the key: they reflect the requesting origin and
 * allow the request headers the OpenAI SDKs send. Whether an origin may actually use a key is
 * decided per request by the key's `allowed_origins` (scopes.ts, 403), and that 403, like every
 * error, carries CORS headers so the browser lets the page read it.
 */
import type { MiddlewareHandler } from "hono";
import { cors as honoCors } from "hono/cors";

const ALLOWED_HEADERS = new Set([
	"authorization",
	"content-type",
	"openai-organization",
	"openai-project",
	"idempotency-key",
	// Anthropic's SDKs in browsers (Messages lane).
	"x-api-key",
	"anthropic-version",
	"anthropic-beta",
	"anthropic-dangerous-direct-browser-access",
	// Google's SDKs (the Gemini lane).
	"x-goog-api-key",
	"x-goog-api-client",
]);
const MAX_AGE_S = 7200;

const EXPOSED_HEADERS = [
	"x-request-id",
	"x-venym-cost-usd",
	"x-venym-balance-usd",
	"x-venym-overhead-ms",
	"x-venym-web-search",
	"x-venym-lane",
	"x-venym-ignored-fields",
	"x-venym-ignored-tools",
	"x-venym-token-count",
	"request-id",
	"retry-after",
	"retry-after-ms",
	"x-should-retry",
	"x-ratelimit-limit-requests",
	"x-ratelimit-remaining-requests",
	"x-ratelimit-reset-requests",
	"x-ratelimit-limit-tokens",
	"x-ratelimit-remaining-tokens",
	"x-ratelimit-reset-tokens",
];

/** The subset of Access-Control-Request-Headers we allow, lowercased: the list, and the SDKs' whole `x-stainless-*` family. */
export function allowedRequestHeaders(requested: string | null | undefined): string[] {
	if (!requested) return [];
	return requested
		.split(",")
		.map((h) => h.trim().toLowerCase())
		.filter((h) => h && (ALLOWED_HEADERS.has(h) || h.startsWith("x-stainless-")));
}

const base = honoCors({
	origin: (origin) => origin || null,
	allowMethods: ["GET", "POST", "DELETE", "OPTIONS"],
	exposeHeaders: EXPOSED_HEADERS,
	maxAge: MAX_AGE_S,
});

/** CORS middleware: preflights answered here, CORS headers on everything else (errors included). */
export const cors: MiddlewareHandler = async (c, next) => {
	const isPreflight = c.req.method === "OPTIONS" && c.req.header("access-control-request-method") !== undefined;
	// A request without Origin is no browser's: it gets no CORS headers, only Vary. An OPTIONS that
	// is no preflight goes on to authentication like any request (onError adds its CORS headers).
	if (!isPreflight && (c.req.header("origin") === undefined || c.req.method === "OPTIONS")) {
		await next();
		c.res.headers.append("vary", "Origin");
		return;
	}
	const preflight = await base(c, next);
	if (preflight) {
		// hono/cors allows a fixed list or echoes whatever is asked; the SDKs' headers are a family
		// (x-stainless-*) no fixed list keeps up with. Hono copies c.res's headers onto the
		// response it is given, so both carry the list.
		const allowed = allowedRequestHeaders(c.req.header("access-control-request-headers")).join(", ");
		for (const headers of [preflight.headers, c.res.headers]) {
			if (allowed) headers.set("access-control-allow-headers", allowed);
			else headers.delete("access-control-allow-headers");
		}
	}
	return preflight;
};

/**
 * For app.onError: the CORS headers of an answer, on an error response that did not pass through
 * the middleware (an OPTIONS that is no preflight). Responses that did already have them.
 */
export function applyCors(origin: string | undefined, headers: Headers): void {
	if (!origin || headers.has("access-control-allow-origin")) return;
	headers.set("access-control-allow-origin", origin);
	headers.set("access-control-expose-headers", EXPOSED_HEADERS.join(","));
}
