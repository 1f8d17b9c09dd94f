/** Spend and node alerts in the admin API, as JSON Schema (hand-described: api/alert-views.ts builds the deliveries). */
import { int, type Json, list, nullable, num, obj, str } from "./json-schema";

/** A key's `alerts` as the admin views show them (the body's schema comes from zod). */
export const alertRules = {
	type: ["array", "null"],
	description: "Spend alerts (docs/operations.md, Alerts).",
	items: obj(
		{
			when: { type: "string", enum: ["balance_below_usd", "spent_pct_of_cap", "exhausted"] },
			at: num,
			webhook_url: str,
		},
		false,
		["when"],
	),
};

const delivery = obj({
	id: str,
	object: { const: "alert_delivery" },
	event: {
		type: "string",
		enum: ["balance_below_usd", "spent_pct_of_cap", "exhausted", "node_down", "node_back"],
	},
	key_id: { ...nullable("string"), description: "The key whose rule crossed; null for node alerts." },
	subject: { ...nullable("string"), description: "The key's name, or the node's masked URL." },
	target: { ...nullable("string"), description: "The webhook's origin (never its path or query); null when none is set." },
	status: { type: "string", enum: ["pending", "delivered", "failed"] },
	attempts: int,
	last_status_code: nullable("integer"),
	last_error: nullable("string"),
	created_at: { type: "integer", description: "Unix seconds." },
	next_attempt_at: { ...nullable("integer"), description: "Unix seconds; set while pending." },
	delivered_at: nullable("integer"),
	payload: { type: "object", additionalProperties: true, description: "The JSON body the webhook receives." },
});

export function alertSchemas(): Record<string, Json> {
	return {
		KeyAlertDeliveries: list(delivery),
		AlertDeliveryList: list(delivery, { next_cursor: nullable("string") }),
	};
}
