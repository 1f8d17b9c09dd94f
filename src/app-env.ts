import type { ApiKeyRow } from "./db/schema";

/** The authenticated caller. */
export interface Principal {
	keyId: string;
	key: ApiKeyRow;
}

export interface AppEnv {
	Bindings: Env;
	Variables: {
		requestId: string;
		principal: Principal;
	};
}
