/**
 * A limit the ledger refused a request for, as the error the client gets (every lane maps it to
 * its own shape through errors.ts): 429 for rates, concurrency and an end user's caps, 403 for a
 * key's spend cap.
 */
import { GatewayError } from "../errors";
import { retryAfterHeaders } from "../http/retry-after";
import { nanosToUsd } from "../money/pricing";
import type { LimitRefusal } from "./durable/limits";

export function limitError(refusal: LimitRefusal, headers: Record<string, string>): GatewayError {
	if (refusal.refused === "concurrency_limited") {
		// Nothing was held or counted: the request may come back as soon as one in flight ends.
		return new GatewayError(
			"rate_limited",
			`Concurrency limit reached on this key: ${refusal.limit} requests in flight at once (max_concurrent). Please try again once one of them has finished.`,
			{
				code: "concurrency_limit_exceeded",
				headers: { ...headers, ...retryAfterHeaders(refusal.retryAfterMs) },
				extra: { max_concurrent: refusal.limit },
			},
		);
	}
	if (refusal.user) return userLimitError(refusal, headers);
	if (refusal.refused === "rate_limited") {
		const what = refusal.limit === "requests" ? "requests per minute (RPM)" : "tokens per minute (TPM)";
		if (refusal.tooLarge) {
			// Waiting never helps: the clients that honour x-should-retry stop here.
			const tpm = headers["x-ratelimit-limit-tokens"] ?? "its limit";
			return new GatewayError(
				"rate_limited",
				`Request too large for ${what} on this key: Limit ${tpm}, Requested ${refusal.tooLarge.requestedTokens} (the prompt estimate plus max_tokens × n). Lower max_tokens or the input to run it.`,
				{ headers: { ...headers, "x-should-retry": "false" } },
			);
		}
		const retry = retryAfterHeaders(refusal.retryAfterMs);
		return new GatewayError(
			"rate_limited",
			`Rate limit reached for ${what} on this key. Please try again in ${formatDuration(refusal.retryAfterMs)}.`,
			{ headers: { ...headers, ...retry } },
		);
	}
	const limit = nanosToUsd(refusal.limitNanos);
	const when = refusal.resetsAt === null ? "" : ` It resets at ${new Date(refusal.resetsAt).toISOString()}.`;
	const per = refusal.period === null ? "" : ` per ${{ daily: "day", weekly: "week", monthly: "month" }[refusal.period]}`;
	return new GatewayError("forbidden", `This key has reached its spend limit of $${limit}${per}.${when}`, {
		headers,
		extra: {
			spend_limit_usd: limit,
			spent_usd: nanosToUsd(refusal.spentNanos),
			period: refusal.period,
			resets_at: refusal.resetsAt === null ? null : Math.floor(refusal.resetsAt / 1000),
		},
	});
}

/** An end user's share of a key is used up (`per_user_rpm`, `per_user_daily_usd`): a 429 naming the limit. */
function userLimitError(refusal: LimitRefusal & { refused: "rate_limited" | "spend_limit" }, headers: Record<string, string>) {
	if (refusal.refused === "rate_limited") {
		return new GatewayError(
			"rate_limited",
			`Rate limit reached for this end user: per_user_rpm on this key. Please try again in ${formatDuration(refusal.retryAfterMs)}.`,
			{
				code: "per_user_rpm_exceeded",
				headers: { ...headers, ...retryAfterHeaders(refusal.retryAfterMs) },
				extra: { limit: "per_user_rpm" },
			},
		);
	}
	const limit = nanosToUsd(refusal.limitNanos);
	const resetsAt = refusal.resetsAt ?? Date.now();
	return new GatewayError(
		"rate_limited",
		`This end user has reached the key's per_user_daily_usd of $${limit}. It resets at ${new Date(resetsAt).toISOString()}.`,
		{
			code: "per_user_daily_usd_exceeded",
			headers: { ...headers, ...retryAfterHeaders(resetsAt - Date.now()) },
			extra: {
				limit: "per_user_daily_usd",
				per_user_daily_usd: limit,
				spent_usd: nanosToUsd(refusal.spentNanos),
				resets_at: Math.floor(resetsAt / 1000),
			},
		},
	);
}

/** OpenAI's duration style: "250ms", "1.5s", "6m0s". */
export function formatDuration(ms: number): string {
	const v = Math.max(0, Math.ceil(ms));
	if (v < 1000) return `${v}ms`;
	if (v < 60_000) return `${Number((v / 1000).toFixed(3))}s`;
	return `${Math.floor(v / 60_000)}m${Number(((v % 60_000) / 1000).toFixed(3))}s`;
}
