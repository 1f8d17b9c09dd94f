import type { MiddlewareHandler } from "hono";
import type { AppEnv, Principal } from "../app-env";
import { keyStore } from "../db/keys";
import { GatewayError } from "../errors";
import { hashSecret, isWellFormedSecret } from "./key-secret";

function unauthorized(message: string): GatewayError {
	return new GatewayError("invalid_api_key", message);
}

export function bearerToken(header: string | undefined | null): string | null {
	if (!header) return null;
	const m = /^Bearer\s+(.+)$/i.exec(header.trim());
	return m ? (m[1] as string).trim() : null;
}

/** Resolves a `vk-…` secret to its key, refusing unknown, revoked and expired keys. */
export async function authenticate(env: Env, secret: string | null, now: number): Promise<Principal> {
	if (!secret) {
		throw unauthorized(
			"You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
		);
	}
	if (!isWellFormedSecret(secret)) throw unauthorized("Incorrect API key provided.");
	const key = await keyStore(env.DB).byHash(await hashSecret(secret));
	if (!key) throw unauthorized("Incorrect API key provided.");
	if (key.revokedAt !== null) throw unauthorized("This API key has been revoked.");
	if (key.expiresAt !== null && key.expiresAt * 1000 <= now) throw unauthorized("This API key has expired.");
	return { keyId: key.id, key };
}

export const requireKey: MiddlewareHandler<AppEnv> = async (c, next) => {
	c.set("principal", await authenticate(c.env, bearerToken(c.req.header("authorization")), Date.now()));
	await next();
};
