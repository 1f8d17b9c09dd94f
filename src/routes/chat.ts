import type { Context } from "hono";
import type { AppEnv } from "../app-env";
import { callerKeyId } from "../auth/scopes";
import type { AuthorizedChat } from "../chat/authorize-chat";
import type { ChatResult, ChatRun } from "../chat/chat-run";
import { authorizeChat, runAuthorized } from "../chat/run-chat";
import { authorizeCompletion } from "../completions/authorize-completion";
import { loadConfig } from "../config";
import { runEmbeddings } from "../embeddings/run-embeddings";
import { readJsonBody } from "../http/read-json";

type Authorize = (run: ChatRun, body: unknown) => Promise<AuthorizedChat>;

/** The one ChatRun of a request on an inference route (chat, legacy completions, embeddings, Responses, Messages). */
export function runOf(c: Context<AppEnv>): ChatRun {
	const principal = c.get("principal");
	return {
		env: c.env,
		config: loadConfig(c.env.GATEWAY_CONFIG),
		callerKeyId: callerKeyId(principal),
		principal,
		requestId: c.get("requestId"),
		clientSignal: c.req.raw.signal,
		waitUntil: (p) => c.executionCtx.waitUntil(p),
		log: c.get("log"),
	};
}

/** A route on the chat pipeline: read the body, authorize (the lane's own rules), run, answer. */
function chatLane(authorize: Authorize) {
	return async (c: Context<AppEnv>): Promise<Response> => {
		const run = runOf(c);
		const body = await readJsonBody(c.req.raw, run.config.max_body_bytes);
		run.log?.asked(body);
		return respond(c, await runAuthorized(run, await authorize(run, body)));
	};
}

function respond(c: Context<AppEnv>, result: ChatResult): Response {
	if (result.kind === "stream") {
		c.get("log")?.streaming();
		return new Response(result.stream, {
			headers: { ...result.headers, "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" },
		});
	}
	return c.json(result.body, 200, result.headers);
}

/** POST /v1/chat/completions */
export const chatCompletions = chatLane(authorizeChat);
/** POST /v1/completions (legacy) */
export const completions = chatLane(authorizeCompletion);

/** POST /v1/embeddings */
export async function embeddings(c: Context<AppEnv>): Promise<Response> {
	const run = runOf(c);
	const body = await readJsonBody(c.req.raw, run.config.max_body_bytes);
	run.log?.asked(body);
	const result = await runEmbeddings(run, body);
	return c.json(result.body, 200, result.headers);
}
