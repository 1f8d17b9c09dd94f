/**
 * Node down / node back alerts (docs/operations.md, "Alerts"), kept by the fleet's NodeHealth
 * object: each probe round's results are compared with the last state stored for each node, and
 * a change (or a node down when first seen) becomes one delivery to ALERT_WEBHOOK_URL in the
 * object's alert outbox (alerts/outbox.ts), sent by its alarm. Stored, so a new instance of the
 * object (which probes afresh) does not announce again what it announced before.
 */
import { AlertOutbox } from "../alerts/outbox";
import { webhookUrlProblem } from "../alerts/rules";
import { errorText, logEvent } from "../observability/log-event";
import { maskNodeUrl } from "./node-label";
import type { ProbeResult } from "./view-types";

export const NODE_STATUS_SQL =
	"CREATE TABLE IF NOT EXISTS node_status (url TEXT PRIMARY KEY, healthy INTEGER NOT NULL, changed_at INTEGER NOT NULL)";

export interface NodeAlertEnv {
	ALERT_WEBHOOK_URL?: string;
	ALERT_WEBHOOK_SECRET?: string;
	DB?: D1Database;
}

export class NodeAlerts {
	readonly #outbox: AlertOutbox;
	#known: Map<string, boolean> | undefined;

	constructor(
		private readonly sql: SqlStorage,
		private readonly env: NodeAlertEnv,
	) {
		this.#outbox = new AlertOutbox(sql);
	}

	/** After a probe round: one delivery per node whose health changed. True when any was written. */
	observe(results: ReadonlyMap<string, ProbeResult>, now: number): boolean {
		const target = this.env.ALERT_WEBHOOK_URL;
		const known = this.#states();
		let wrote = false;
		for (const [url, r] of results) {
			const was = known.get(url);
			if (was === r.healthy) continue;
			this.sql.exec(
				"INSERT INTO node_status (url, healthy, changed_at) VALUES (?, ?, ?) ON CONFLICT(url) DO UPDATE SET healthy = excluded.healthy, changed_at = excluded.changed_at",
				url,
				r.healthy ? 1 : 0,
				now,
			);
			known.set(url, r.healthy);
			// A node first seen healthy is no news; one first seen down is.
			if (was === undefined && r.healthy) continue;
			// Node alerts go to the operator's target only: without one, the state is kept and nothing is sent.
			if (!target || webhookUrlProblem(target) !== null) continue;
			const node = maskNodeUrl(url);
			const event = r.healthy ? "node_back" : "node_down";
			this.#outbox.enqueue(
				{
					event,
					keyId: null,
					subject: node,
					target,
					payload: {
						type: r.healthy ? "node.back" : "node.down",
						node: { url: node },
						error: r.error,
						checked_at: Math.floor(r.checked_at / 1000),
						created: Math.floor(now / 1000),
						time: new Date(now).toISOString(),
					},
				},
				now,
			);
			wrote = true;
		}
		return wrote;
	}

	/** Sends what is due; when it next has work (null: none). Never throws. */
	async run(now: number): Promise<number | null> {
		try {
			return await this.#outbox.run(now, {
				fetch: (req) => fetch(req),
				secret: this.env.ALERT_WEBHOOK_SECRET,
				d1: this.env.DB,
			});
		} catch (err) {
			logEvent("error", "node health: sending alerts failed, will retry", { error: errorText(err) });
			return now + 60_000;
		}
	}

	#states(): Map<string, boolean> {
		if (this.#known === undefined) {
			this.#known = new Map();
			for (const r of this.sql.exec<{ url: string; healthy: number }>("SELECT url, healthy FROM node_status")) {
				this.#known.set(r.url, r.healthy === 1);
			}
		}
		return this.#known;
	}
}
