import type { MiddlewareHandler } from "hono";
import type { AppEnv } from "../app-env";
import { GatewayError } from "../errors";
import { bearerToken } from "./authenticate";
import { adminThrottle, throttledError } from "./fail-throttle";
import { timingSafeEqualStrings } from "./key-secret";

/**
 * Guards /admin/*: the bearer token must equal ADMIN_TOKEN (compared in constant time). Wrong
 * tokens are counted per client IP; an IP over its allowance gets 429 before its token is even
 * compared, so a guess made while throttled cannot succeed.
 */
export const requireAdmin: MiddlewareHandler<AppEnv> = async (c, next) => {
	const expected = c.env.ADMIN_TOKEN;
	if (!expected) throw new GatewayError("invalid_api_key", "The admin API is disabled: set the ADMIN_TOKEN secret.");
	const ip = c.req.header("cf-connecting-ip") ?? null;
	const throttle = adminThrottle(c.env);
	const waitMs = await throttle.check(ip);
	if (waitMs > 0) throw throttledError(waitMs);
	const token = bearerToken(c.req.header("authorization"));
	if (!token || !(await timingSafeEqualStrings(token, expected))) {
		// Only a presented token is a guess; a request without one is just unauthenticated.
		const ms = token ? await throttle.fail(ip) : 0;
		throw ms > 0 ? throttledError(ms) : new GatewayError("invalid_api_key", "Invalid admin token.");
	}
	await next();
};
