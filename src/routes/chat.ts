import type { Context } from "hono";
import type { AppEnv } from "../app-env";
import { callerKeyId } from "../auth/scopes";
import { runChat } from "../chat/run-chat";
import { loadConfig } from "../config";
import { readJsonBody } from "../http/read-json";

export async function chatCompletions(c: Context<AppEnv>): Promise<Response> {
	const config = loadConfig(c.env.GATEWAY_CONFIG);
	const principal = c.get("principal");
	const result = await runChat(
		{
			env: c.env,
			config,
			// ChatRun.keyId is the caller's key id (the ledger that pays comes from the principal).
			keyId: callerKeyId(principal),
			principal,
			requestId: c.get("requestId"),
			clientSignal: c.req.raw.signal,
			waitUntil: (p) => c.executionCtx.waitUntil(p),
		},
		await readJsonBody(c.req.raw, config.max_body_bytes),
	);
	if (result.kind === "stream") {
		return new Response(result.stream, {
			headers: { ...result.headers, "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" },
		});
	}
	return c.json(result.body, 200, result.headers);
}
