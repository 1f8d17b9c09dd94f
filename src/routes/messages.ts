import { type Context, Hono } from "hono";
import type { AppEnv } from "../app-env";
import { readJsonBody } from "../http/read-json";
import { countMessageTokens, createMessage } from "../messages/run-messages";
import { runOf } from "./chat";

/** POST /v1/messages and /v1/messages/count_tokens (Anthropic Messages); errors in Anthropic's shape (app.onError). */
export const messagesRoutes = new Hono<AppEnv>()
	.post("/", async (c) => {
		const run = runOf(c);
		const body = await readJsonBody(c.req.raw, run.config.max_body_bytes);
		run.log?.asked(body);
		const result = await createMessage(run, body);
		if (result.kind === "stream") {
			run.log?.streaming();
			return new Response(result.stream, {
				headers: { ...result.headers, "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" },
			});
		}
		return c.json(result.body, 200, result.headers);
	})
	.post("/count_tokens", async (c: Context<AppEnv>) => {
		const run = runOf(c);
		const body = await readJsonBody(c.req.raw, run.config.max_body_bytes);
		const result = await countMessageTokens(run, body);
		return c.json(result.body, 200, result.headers);
	});

/** Whether a path is the Messages lane's, whose errors are Anthropic-shaped. */
export function isMessagesPath(path: string): boolean {
	return path === "/v1/messages" || path.startsWith("/v1/messages/");
}
