import type { ApiKeyRow } from "./db/schema";

/** The authenticated caller. */
export interface Principal {
	keyId: string;
	key: ApiKeyRow;
	/** For a short-lived `vk-tmp-` token: the key that minted it, whose balance it draws on and whose scopes also apply. */
	parent?: ApiKeyRow;
}

export interface AppEnv {
	Bindings: Env;
	Variables: {
		requestId: string;
		principal: Principal;
	};
}
