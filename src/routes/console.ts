/**
 * The operator console: `GET /admin` and `/admin/` serve its page, `/admin/console.css` and
 * `/admin/js/*.js` its style and scripts. The files are Workers static assets (`src/console/`, the
 * ASSETS binding) that only this route hands out, because wrangler.toml sends every request to
 * the Worker first: so the page gets the same security headers under `wrangler dev`,
 * vitest-pool-workers and Cloudflare, and adds nothing to the Worker bundle. The page is public;
 * the data it shows comes from the admin API, which still needs the admin token. Mounted before
 * the admin routes so their guard never sees these paths.
 */
import { type Context, Hono } from "hono";
import type { AppEnv } from "../app-env";
import { GatewayError } from "../errors";

/** No inline script or style, nothing from elsewhere: the page talks to its own origin only. */
export const CONSOLE_CSP =
	"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const SECURITY_HEADERS: Record<string, string> = {
	"content-security-policy": CONSOLE_CSP,
	"x-content-type-options": "nosniff",
	"referrer-policy": "no-referrer",
	// Revalidated each time (assets answer with an ETag): a deploy is seen at the next load.
	"cache-control": "no-cache",
};

/** The asset behind a console path (the only files served), or null. */
function assetPath(path: string): string | null {
	if (path === "/admin" || path === "/admin/") return "/index.html";
	if (path === "/admin/console.css") return "/console.css";
	const script = /^\/admin\/js\/([a-z][a-z-]*\.js)$/.exec(path);
	return script ? `/js/${script[1]}` : null;
}

async function serveAsset(c: Context<AppEnv>): Promise<Response> {
	const asset = assetPath(c.req.path);
	if (!asset) throw new GatewayError("not_found", "Unknown route.");
	const headers = new Headers();
	const etag = c.req.header("if-none-match");
	if (etag) headers.set("if-none-match", etag);
	const res = await c.env.ASSETS.fetch(new URL(asset, c.req.url), { headers });
	if (res.status === 404) throw new GatewayError("not_found", "Unknown route.");
	const out = new Response(res.body, res);
	for (const [name, value] of Object.entries(SECURITY_HEADERS)) out.headers.set(name, value);
	return out;
}

export const consoleRoutes = new Hono<AppEnv>()
	.get("/admin", serveAsset)
	.get("/admin/", serveAsset)
	.get("/admin/console.css", serveAsset)
	.get("/admin/js/:file", serveAsset);
