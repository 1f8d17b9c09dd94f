import type { Context } from "hono";
import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../app-env";
import { payerKeyId } from "../auth/scopes";
import { afterResponse } from "../http/after-response";
import { recordRefusal } from "./refusals";
import { laneOf, RequestLog } from "./request-log";

declare module "hono" {
	interface ContextVariableMap {
		/** The request's log line: set on the inference routes only (their middleware, below). */
		log: RequestLog | undefined;
	}
}

/**
 * The request log of the inference routes: made before CORS and authentication, so a refusal
 * there is logged too; written under waitUntil just after the response has gone out, or for a
 * stream when it ends.
 *
 * It also keeps the request alive until its handler is done. A request's settlement registers its
 * own waitUntil before its hold is asked for (settlement/settlement.ts); this one covers what
 * comes before (reading the body, authentication) and the log line: a client that leaves while
 * anything is pending lets the runtime end a request that has nothing under waitUntil, and the
 * request would then never be logged. Under this waitUntil the handler runs on and is logged.
 */
export const requestLog = createMiddleware<AppEnv>(async (c, next) => {
	const lane = laneOf(c.req.method, c.req.path);
	if (!lane) return next();
	const handled = keepAliveUntilHandled(c);
	try {
		await logged(c, next, new RequestLog(c.get("requestId"), lane, c.get("clock")));
	} finally {
		handled();
	}
});

async function logged(c: Context<AppEnv>, next: () => Promise<void>, log: RequestLog): Promise<void> {
	c.set("log", log);
	await next();
	const principal = c.get("principal");
	if (log.payerKeyId === null && principal) log.payerKeyId = payerKeyId(principal);
	const status = c.res.status;
	const refusal = log.refusal(status);
	// The console's list of refused requests, bounded per isolate (refusals.ts).
	if (refusal) c.executionCtx.waitUntil(recordRefusal(c.env.DB, refusal));
	const ended = log.ended();
	// Written after the answer has gone out (a stream's when it ends): the client does not wait for it.
	c.executionCtx.waitUntil((ended ?? afterResponse()).then(() => log.write(status)));
}

/** Registers a waitUntil that lasts until the returned function is called; registered before anything awaits. */
function keepAliveUntilHandled(c: Context<AppEnv>): () => void {
	let done!: () => void;
	const handled = new Promise<void>((resolve) => {
		done = resolve;
	});
	c.executionCtx.waitUntil(handled);
	return done;
}
