/**
 * Secrets read by name: a node's or a search provider's `api_key_env` names a Worker secret. The
 * Worker's `Env` is passed as is (an interface, so not a `Record`); tests pass a plain object.
 */
export type Secrets = object;

/** The secret called `name`, or undefined. */
export function secretNamed(secrets: Secrets, name: string): unknown {
	return Reflect.get(secrets, name);
}
