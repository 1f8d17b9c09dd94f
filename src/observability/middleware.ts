import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../app-env";
import { payerKeyId } from "../auth/scopes";
import { laneOf, RequestLog } from "./request-log";

/**
 * The request log of the inference routes: made before CORS and authentication, so a refusal
 * there is logged too; written when the response is ready, or for a stream when it ends (under
 * waitUntil, which settlement already keeps alive).
 */
export const requestLog = createMiddleware<AppEnv>(async (c, next) => {
	const lane = laneOf(c.req.method, c.req.path);
	if (!lane) return next();
	const log = new RequestLog(c.get("requestId"), lane);
	c.set("log", log);
	await next();
	const principal = c.get("principal");
	if (log.keyId === null && principal) log.keyId = payerKeyId(principal);
	const status = c.res.status;
	const ended = log.ended();
	if (ended === undefined) log.write(status);
	else c.executionCtx.waitUntil(ended.then(() => log.write(status)));
});
