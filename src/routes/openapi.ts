import type { Context } from "hono";
import type { AppEnv } from "../app-env";

/**
 * GET /openapi.json: public, no key. The document module is loaded and the document built on the
 * first call only, so nothing of it runs at isolate start or on any other route.
 */
export async function openApiDocument(c: Context<AppEnv>): Promise<Response> {
	const { openApiJson } = await import("../openapi/document");
	return c.body(openApiJson(), 200, {
		"content-type": "application/json; charset=utf-8",
		"cache-control": "public, max-age=300",
	});
}
