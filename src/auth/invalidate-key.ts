import { keyStore } from "../db/keys";
import type { ApiKeyRow } from "../db/schema";
import { GatewayError } from "../errors";
import { ledgerFor } from "../ledger/ledger-client";
import { keyCache } from "./key-cache";

/** How long after a change the cached lookups are dropped a second time. */
const SECOND_PASS_MS = 1000;

/**
 * Drops the cached lookups of a key and of the tokens it minted (their cached records embed it),
 * after an admin change (PATCH, DELETE). A lookup that read D1 just before the change can write
 * the old record back: a second delete a moment later closes that window.
 */
export async function invalidateKey(env: Env, key: ApiKeyRow, waitUntil: (p: Promise<unknown>) => void): Promise<void> {
	const hashes = [key.hash, ...(await keyStore(env.DB).childHashes(key.id))];
	const cache = keyCache(env);
	try {
		await cache.invalidate(hashes);
	} catch (err) {
		console.error("key cache invalidation failed", err);
		throw new GatewayError(
			"upstream_unavailable",
			"The key was changed but its cached copy could not be cleared: retry the request.",
			{
				status: 503,
			},
		);
	}
	waitUntil(
		new Promise((r) => setTimeout(r, SECOND_PASS_MS))
			.then(() => cache.invalidate(hashes))
			.catch((err) => console.error("key cache invalidation (second pass) failed", err)),
	);
}

/**
 * Tells the paying key's ledger about an admin change (docs/allowances.md): isolates stop using
 * their allowances at their next ledger call, none is granted while cached lookups may still be
 * stale, and a revoked key (or token) gets no new hold, whatever an isolate's cached lookup says.
 */
export async function tellLedger(env: Env, key: ApiKeyRow, change: "revoked" | "changed"): Promise<void> {
	const payer = key.parentKeyId ?? key.id;
	try {
		await ledgerFor(env, payer).revoke({ change, scope: key.id });
	} catch (err) {
		console.error("telling the ledger about a key change failed", err);
		throw new GatewayError("upstream_unavailable", "The key was changed but its ledger could not be told: retry the request.", {
			status: 503,
		});
	}
}
