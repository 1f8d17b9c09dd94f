import type { Context } from "hono";
import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../app-env";
import { payerKeyId } from "../auth/scopes";
import { afterResponse } from "../http/after-response";
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
 * It also keeps the request alive until its handler is done: every inference lane places a ledger
 * hold before it registers the settlement that releases it (runHeld's waitUntil). A client that
 * leaves while the hold is on its way lets the runtime end a request that has nothing under
 * waitUntil, and then the hold is placed but never settled (open until it expires, the request
 * never logged). Under this waitUntil the handler runs on, settles and is logged.
 */
export const requestLog = createMiddleware<AppEnv>(async (c, next) => {
	const lane = laneOf(c.req.method, c.req.path);
	if (!lane) return next();
	const handled = keepAliveUntilHandled(c);
	try {
		await logged(c, next, new RequestLog(c.get("requestId"), lane));
	} finally {
		handled();
	}
});

async function logged(c: Context<AppEnv>, next: () => Promise<void>, log: RequestLog): Promise<void> {
	c.set("log", log);
	await next();
	const principal = c.get("principal");
	if (log.keyId === null && principal) log.keyId = payerKeyId(principal);
	const status = c.res.status;
	const ended = log.ended();
	// Written after the answer has gone out (a stream's when it ends): the client does not wait for it.
	const written = (ended ?? afterResponse()).then(() => log.write(status));
	try {
		c.executionCtx.waitUntil(written);
	} catch {
		// No ExecutionContext (app.request in a unit test): the line is written a moment later all the same.
	}
}

/** Registers a waitUntil that lasts until the returned function is called; registered before anything awaits. */
function keepAliveUntilHandled(c: Context<AppEnv>): () => void {
	let done!: () => void;
	const handled = new Promise<void>((resolve) => {
		done = resolve;
	});
	try {
		c.executionCtx.waitUntil(handled);
	} catch {
		// No ExecutionContext (app.request in a unit test): nothing ends the request early either.
	}
	return done;
}
