/**
 * The JSON shapes the API shows for keys, balances and usage records: pure functions of a row,
 * shared by the admin API and `GET /v1/key`. Never the secret or its hash.
 */
import type { ApiKeyRow, UsageRow } from "../db/schema";
import type { CreditEntry } from "../ledger/durable/credits";
import type { LedgerInfo } from "../ledger/durable/key-ledger";
import { nanosToUsd } from "../money/pricing";

/** The public view of a key (never the secret or its hash). */
export function keyView(k: ApiKeyRow) {
	return {
		id: k.id,
		object: "api_key" as const,
		name: k.name,
		prefix: k.prefix,
		created_at: Math.floor(k.createdAt / 1000),
		revoked: k.revokedAt !== null,
		revoked_at: k.revokedAt === null ? null : Math.floor(k.revokedAt / 1000),
		expires_at: k.expiresAt,
		allowed_origins: k.allowedOrigins ?? null,
		allowed_models: k.allowedModels ?? null,
		rpm: k.rpm,
		tpm: k.tpm,
		spend_limit_usd: k.spendLimitNanos === null ? null : nanosToUsd(k.spendLimitNanos),
		spend_limit_period: k.spendLimitPeriod,
		max_tokens: k.maxTokens,
		max_concurrent: k.maxConcurrent ?? null,
		per_user_rpm: k.perUserRpm ?? null,
		per_user_daily_usd: k.perUserDailyNanos == null ? null : nanosToUsd(k.perUserDailyNanos),
		metadata: k.metadata ?? null,
		parent_key_id: k.parentKeyId ?? null,
		alerts: k.alerts ?? null,
	};
}

/**
 * A ledger's money as the API shows it (USD): `held_usd` is what requests in flight hold, and
 * `reserved_usd` what edge allowances reserve ahead of need (docs/allowances.md), shown apart so a
 * burst's allowances do not read as requests still running.
 */
export function balanceView(info: LedgerInfo) {
	return {
		balance_usd: nanosToUsd(info.balanceNanos),
		spent_usd: nanosToUsd(info.spentNanos),
		held_usd: nanosToUsd(Math.max(0, info.heldNanos - info.reservedNanos)),
		reserved_usd: nanosToUsd(info.reservedNanos),
		open_holds: info.openHolds,
	};
}

export function usageView(r: UsageRow) {
	return {
		request_id: r.requestId,
		key_id: r.keyId,
		model: r.model,
		requested_model: r.requestedModel ?? r.model,
		node: r.node,
		prompt_tokens: r.promptTokens,
		completion_tokens: r.completionTokens,
		total_tokens: r.promptTokens + r.completionTokens,
		cost_usd: nanosToUsd(r.costNanos),
		cost_nanos: r.costNanos,
		status: r.status,
		estimated: r.estimated,
		search_count: r.searchCount,
		cached_tokens: r.cachedTokens ?? 0,
		tool_calls_repaired: r.toolCallsRepaired ?? 0,
		lane: r.lane ?? null,
		end_user: r.endUser ?? null,
		batch_id: r.batchId ?? null,
		custom_id: r.customId ?? null,
		created_at: Math.floor(r.createdAt / 1000),
	};
}

/** One line of a key's credit history (GET /admin/keys/{id}/credits). */
export function creditView(r: CreditEntry) {
	return {
		amount_usd: nanosToUsd(r.amount),
		balance_usd: nanosToUsd(r.balanceAfter),
		note: r.note,
		created_at: Math.floor(r.createdAt / 1000),
	};
}
