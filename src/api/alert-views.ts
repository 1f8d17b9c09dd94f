/** The JSON shape of an alert delivery in the admin API (`GET /admin/alert-deliveries`, per key). */
import type { AlertDeliveryRow } from "../db/alert-deliveries";
import type { AlertDeliveryRecord } from "../db/schema";

const seconds = (ms: number | null) => (ms === null ? null : Math.floor(ms / 1000));

function parsed(text: string): unknown {
	try {
		return JSON.parse(text);
	} catch {
		return null;
	}
}

/** A delivery as a Durable Object keeps it (snake_case) or as D1 lists it (drizzle's row). */
export function alertDeliveryView(r: AlertDeliveryRow | AlertDeliveryRecord) {
	const row: AlertDeliveryRow =
		"key_id" in r
			? r
			: {
					id: r.id,
					event: r.event,
					key_id: r.keyId,
					subject: r.subject,
					target: r.target,
					status: r.status,
					attempts: r.attempts,
					last_code: r.lastCode,
					last_error: r.lastError,
					payload: r.payload,
					created_at: r.createdAt,
					next_at: r.nextAttemptAt,
					delivered_at: r.deliveredAt,
					updated_at: r.updatedAt,
				};
	return {
		id: row.id,
		object: "alert_delivery" as const,
		/** The rule's `when`, or node_down / node_back. */
		event: row.event,
		key_id: row.key_id,
		/** The key's name, or the node's masked URL. */
		subject: row.subject,
		/** The webhook's origin (never its path or query). */
		target: row.target,
		status: row.status,
		attempts: row.attempts,
		last_status_code: row.last_code,
		last_error: row.last_error,
		created_at: seconds(row.created_at),
		next_attempt_at: seconds(row.next_at),
		delivered_at: seconds(row.delivered_at),
		/** The JSON body the webhook receives. */
		payload: parsed(row.payload),
	};
}
