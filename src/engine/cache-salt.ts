/**
 * Tenant-isolated prefix caches: a node with `cache_salt: true` gets, on every request, a
 * `cache_salt` (vLLM ≥ 0.9) derived from the paying key, so one tenant's prompts never hit (and
 * can never be timed against) another tenant's cached blocks. A token or child key pays through
 * its parent and so shares its parent's cache. The salt is an HMAC-SHA-256 under
 * `CACHE_SALT_SECRET`: it names no key and cannot be computed without the secret.
 */
import { GatewayError } from "../errors";

export const CACHE_SALT_SECRET = "CACHE_SALT_SECRET";
/** Shorter than this is guessable enough to recompute salts offline. */
export const MIN_SECRET_LENGTH = 16;
const MAX_REMEMBERED = 1024;

let keyFor: { secret: string; key: Promise<CryptoKey> } | undefined;
// Salts by payer under the current secret: most requests of an isolate come from few payers.
const remembered = new Map<string, string>();

function base64url(bytes: Uint8Array): string {
	let s = "";
	for (const b of bytes) s += String.fromCharCode(b);
	return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/**
 * The salt of `payerKeyId` (43 base64url characters). Without a usable secret it refuses with a
 * config error rather than sending a salt anyone could recompute, or none at all: an operator who
 * turned isolation on must not have it silently off.
 */
export async function cacheSaltFor(secret: unknown, payerKeyId: string): Promise<string> {
	if (typeof secret !== "string" || secret.length < MIN_SECRET_LENGTH) {
		throw new GatewayError(
			"config_invalid",
			`GATEWAY_CONFIG is invalid: a node sets cache_salt but the secret ${CACHE_SALT_SECRET} is ${
				typeof secret === "string" && secret ? `shorter than ${MIN_SECRET_LENGTH} characters` : "not set"
			}`,
		);
	}
	if (keyFor?.secret !== secret) {
		remembered.clear();
		const key = crypto.subtle.importKey("raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, [
			"sign",
		]);
		keyFor = { secret, key };
	}
	const known = remembered.get(payerKeyId);
	if (known) return known;
	const mac = await crypto.subtle.sign("HMAC", await keyFor.key, new TextEncoder().encode(`venym cache_salt\u0000${payerKeyId}`));
	const salt = base64url(new Uint8Array(mac));
	if (remembered.size >= MAX_REMEMBERED) remembered.clear();
	remembered.set(payerKeyId, salt);
	return salt;
}

/** The engine body with `cache_salt` set to `salt`, whatever the client sent in it. */
export function withCacheSalt(body: string, salt: string): string {
	const parsed = JSON.parse(body) as Record<string, unknown>;
	parsed.cache_salt = salt;
	return JSON.stringify(parsed);
}
