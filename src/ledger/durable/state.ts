/**
 * The KeyLedger's in-memory state (LedgerState), read from its storage once per object life:
 * the RPC methods then keep it equal to storage as they write, so the hot ones read nothing.
 */
import type { LedgerAllowances } from "./allowance-grants";
import type { LedgerLimits } from "./limits";
import type { LedgerState } from "./rpc-types";

export function loadLedgerState(sql: SqlStorage, allowances: LedgerAllowances, limits: LedgerLimits): LedgerState {
	const meta = new Map<string, unknown>();
	for (const row of sql.exec<{ k: string; v: SqlStorageValue }>("SELECT k, v FROM meta")) meta.set(row.k, row.v);
	const holds = sql.exec<{ t: number; n: number }>("SELECT COALESCE(SUM(amount), 0) AS t, COUNT(*) AS n FROM holds").one();
	const revoked = new Set<string>();
	for (const r of sql.exec<{ scope: string }>("SELECT scope FROM revoked_scopes")) revoked.add(r.scope);
	return {
		balance: Number(meta.get("balance") ?? 0),
		spent: Number(meta.get("spent") ?? 0),
		// Allowances count as held, like holds.
		held: holds.t + allowances.totals().amount,
		openHolds: holds.n,
		limitedHolds: limits.openLimitedHolds(),
		keyId: (meta.get("key_id") as string | undefined) ?? null,
		revoked,
		grantsPausedUntil: Number(meta.get("grants_paused_until") ?? 0),
	};
}

/** Stores the key this ledger belongs to, on its first call that names it. */
export function rememberKey(sql: SqlStorage, st: LedgerState, keyId: string): void {
	if (st.keyId !== null) return;
	sql.exec("INSERT OR IGNORE INTO meta (k, v) VALUES ('key_id', ?)", keyId);
	st.keyId = keyId;
}
