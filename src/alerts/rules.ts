/**
 * Spend alert rules (docs/operations.md, "Alerts"): what a key's `alerts` field and the config's
 * operator-wide `alerts` accept, and the webhook URLs they may name. Schemas only: the ledger
 * (ledger/durable/alerts.ts) decides when a rule crosses, alerts/outbox.ts delivers.
 */
import { z } from "zod";
import { MAX_USD } from "../money/usd";

export const ALERT_WHENS = ["balance_below_usd", "spent_pct_of_cap", "exhausted"] as const;
export type AlertWhen = (typeof ALERT_WHENS)[number];

/** A webhook URL's longest accepted length. */
export const MAX_WEBHOOK_URL_LENGTH = 2048;
/** Most rules one key (or the config) may set. */
export const MAX_ALERT_RULES = 10;

const LOOPBACK = new Set(["localhost", "127.0.0.1", "[::1]"]);

/**
 * Why `raw` may not be a webhook target, or null: https anywhere, http only to the loopback host
 * (a development receiver), no credentials in the authority, bounded length.
 */
export function webhookUrlProblem(raw: string): string | null {
	if (raw.length > MAX_WEBHOOK_URL_LENGTH) return `must be at most ${MAX_WEBHOOK_URL_LENGTH} characters`;
	let url: URL;
	try {
		url = new URL(raw);
	} catch {
		return "must be an absolute URL";
	}
	if (url.username || url.password) return "must not carry credentials (user:pass@)";
	if (url.protocol === "https:") return null;
	if (url.protocol === "http:" && LOOPBACK.has(url.hostname)) return null;
	return "must be https (http only to localhost, for development)";
}

export const WebhookUrl = z
	.string()
	.max(MAX_WEBHOOK_URL_LENGTH)
	.superRefine((s, ctx) => {
		const problem = webhookUrlProblem(s);
		if (problem) ctx.addIssue({ code: "custom", message: problem });
	});

/**
 * One rule. `at` is USD for `balance_below_usd` (fires when the balance drops below it), a
 * percentage of the key's spend limit for `spent_pct_of_cap` (fires when the spend in the limit's
 * period reaches it), and absent for `exhausted` (fires when the balance reaches zero).
 */
export const AlertRuleSchema = z
	.strictObject({
		when: z.enum(ALERT_WHENS),
		at: z.number().optional(),
		webhook_url: WebhookUrl.optional(),
	})
	.superRefine((r, ctx) => {
		const bad = (message: string) => ctx.addIssue({ code: "custom", path: ["at"], message });
		if (r.when === "balance_below_usd" && (r.at === undefined || !(r.at > 0 && r.at <= MAX_USD))) {
			bad(`balance_below_usd needs 'at': a USD amount above 0 and at most ${MAX_USD}`);
		} else if (r.when === "spent_pct_of_cap" && (r.at === undefined || !(r.at > 0 && r.at <= 1000))) {
			bad("spent_pct_of_cap needs 'at': a percentage of the key's spend limit, above 0 and at most 1000");
		} else if (r.when === "exhausted" && r.at !== undefined && r.at !== 0) {
			bad("exhausted takes no 'at' (it fires when the balance reaches 0)");
		}
	});

export type AlertRule = z.output<typeof AlertRuleSchema>;

export const AlertRules = z.array(AlertRuleSchema).max(MAX_ALERT_RULES);
