/**
 * The bodies of `POST /admin/keys` and `PATCH /admin/keys/{id}`, and the key columns they
 * write. The scope fields shared with `POST /v1/tokens` are in auth/scope-fields.ts.
 */
import { z } from "zod";
import { AlertRules } from "../alerts/rules";
import { AllowedModels, AllowedOrigins, KeyName, TokenCap } from "../auth/scope-fields";
import type { ApiKeyRow } from "../db/schema";
import { GatewayError } from "../errors";
import { usdToNanos } from "../money/pricing";
import { BalanceUsd, CreditUsd, SpendLimitUsd } from "../money/usd";

/** ISO 8601 string or unix seconds → unix seconds. */
const Timestamp = z.union([
	z.number().int().positive(),
	z.iso.datetime({ offset: true }).transform((s) => Math.floor(Date.parse(s) / 1000)),
]);

const ScopeFields = {
	name: KeyName,
	allowed_origins: AllowedOrigins.nullable().optional(),
	allowed_models: AllowedModels.nullable().optional(),
	rpm: TokenCap.nullable().optional(),
	tpm: TokenCap.nullable().optional(),
	spend_limit_usd: SpendLimitUsd.nullable().optional(),
	spend_limit_period: z.enum(["daily", "weekly", "monthly"]).nullable().optional(),
	max_tokens: TokenCap.nullable().optional(),
	max_concurrent: TokenCap.nullable().optional(),
	per_user_rpm: TokenCap.nullable().optional(),
	per_user_daily_usd: SpendLimitUsd.nullable().optional(),
	expires_at: Timestamp.nullable().optional(),
	metadata: z.record(z.string(), z.string()).nullable().optional(),
	/** Spend alerts (docs/operations.md, "Alerts"); null or [] removes them. */
	alerts: AlertRules.nullable().optional(),
};

export const CreateKey = z.strictObject({ ...ScopeFields, balance_usd: BalanceUsd.default(0) });
export const PatchKey = z.strictObject({ ...ScopeFields, name: ScopeFields.name.optional() });
export const Credit = z.strictObject({
	amount_usd: CreditUsd,
	note: z.string().max(500).optional(),
});

type PatchInput = z.infer<typeof PatchKey>;

/** The columns a create or PATCH body writes (only the fields it has). */
export function scopeColumns(input: PatchInput): Partial<ApiKeyRow> {
	const cols: Partial<ApiKeyRow> = {};
	if (input.name !== undefined) cols.name = input.name;
	if (input.allowed_origins !== undefined) cols.allowedOrigins = input.allowed_origins;
	if (input.allowed_models !== undefined) cols.allowedModels = input.allowed_models;
	if (input.rpm !== undefined) cols.rpm = input.rpm;
	if (input.tpm !== undefined) cols.tpm = input.tpm;
	if (input.spend_limit_usd !== undefined)
		cols.spendLimitNanos = input.spend_limit_usd === null ? null : usdToNanos(input.spend_limit_usd);
	if (input.spend_limit_period !== undefined) cols.spendLimitPeriod = input.spend_limit_period;
	if (input.max_tokens !== undefined) cols.maxTokens = input.max_tokens;
	if (input.max_concurrent !== undefined) cols.maxConcurrent = input.max_concurrent;
	if (input.per_user_rpm !== undefined) cols.perUserRpm = input.per_user_rpm;
	if (input.per_user_daily_usd !== undefined)
		cols.perUserDailyNanos = input.per_user_daily_usd === null ? null : usdToNanos(input.per_user_daily_usd);
	if (input.expires_at !== undefined) cols.expiresAt = input.expires_at;
	if (input.metadata !== undefined) cols.metadata = input.metadata;
	if (input.alerts !== undefined) cols.alerts = input.alerts?.length ? input.alerts : null;
	return cols;
}

/** The column each PATCH field writes (spend_limit_usd as nano-dollars). */
const COLUMN_OF: { [P in keyof PatchInput]-?: keyof ApiKeyRow } = {
	name: "name",
	allowed_origins: "allowedOrigins",
	allowed_models: "allowedModels",
	rpm: "rpm",
	tpm: "tpm",
	spend_limit_usd: "spendLimitNanos",
	spend_limit_period: "spendLimitPeriod",
	max_tokens: "maxTokens",
	max_concurrent: "maxConcurrent",
	per_user_rpm: "perUserRpm",
	per_user_daily_usd: "perUserDailyNanos",
	expires_at: "expiresAt",
	metadata: "metadata",
	alerts: "alerts",
};

/**
 * A token's scopes are checked against its parent's, and its lifetime capped at an hour, only
 * when it is minted: a PATCH could lift its spend limit, drop its origins (making it a
 * server-side key) or push its expiry out. So PATCH may rename a token and nothing else; a
 * field that restates the current value is not a change. `fields` are the body's keys, in order.
 */
export function assertTokenPatch(token: ApiKeyRow, fields: readonly string[], cols: Partial<ApiKeyRow>): void {
	for (const param of fields) {
		if (param === "name" || !Object.hasOwn(COLUMN_OF, param)) continue;
		const col = COLUMN_OF[param as keyof PatchInput];
		if (JSON.stringify(cols[col]) === JSON.stringify(token[col])) continue;
		throw new GatewayError(
			"invalid_request",
			`Invalid value for '${param}': '${token.id}' is a temporary token and its scopes are fixed when it is minted. Only its 'name' can be changed: mint a new token (POST /v1/tokens) for other scopes, or revoke this one.`,
			{ param },
		);
	}
}
