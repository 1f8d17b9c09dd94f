import type { ApiKeyRow } from "./db/schema";

/**
 * The authenticated caller. Three ids, three names: the caller key id (`callerKeyId(p)`,
 * `key.id`) owns the request, its stored responses and its scopes; the payer key id
 * (`payerKeyId(p)`) is the key whose ledger pays: a `vk-tmp-` token's parent, else the caller.
 * Both are in auth/scopes.ts.
 */
export interface Principal {
	/** The key that authenticated: for a `vk-tmp-` token, the token's own row. */
	key: ApiKeyRow;
	/** For a short-lived `vk-tmp-` token: the key that minted it, whose balance it draws on and whose scopes also apply. */
	parent?: ApiKeyRow;
}

export interface AppEnv {
	Bindings: Env;
	Variables: {
		requestId: string;
		principal: Principal;
		// `log`, the request's log line, is declared by its middleware (observability/middleware.ts).
	};
}
