/**
 * The shared view of the engine fleet: one Durable Object per deployment (named "fleet"). It
 * probes every node on its alarm, once per `health_check_interval_ms` for the whole deployment
 * (not per isolate), and only while isolates keep reading it, so an idle gateway sends nothing.
 * Isolates read it with a short cache under waitUntil (shared-view.ts), never on a request's
 * critical path. Probe results live in memory (a new instance probes at once); the operator's
 * overrides (PATCH /admin/nodes) are stored, until cleared.
 */
import { DurableObject } from "cloudflare:workers";
import { ALERT_OUTBOX_SQL } from "../alerts/outbox";
import { ROUTING_DEFAULTS } from "../config-schema";
import { errorText, logEvent } from "../observability/log-event";
import { type Migration, migrate } from "../storage/migrations";
import { NODE_STATUS_SQL, NodeAlerts } from "./node-alerts";
import { maskNodeUrl } from "./node-label";
import { newMemo, type ProbeMemo, probeNode } from "./probe";
import {
	mergeReports,
	type NodeOverride,
	type NodeReport,
	type ProbeResult,
	type ProbeTarget,
	type SharedView,
} from "./view-types";

const MIGRATIONS: readonly Migration[] = [
	{
		name: "operator overrides",
		up(sql) {
			sql.exec(`CREATE TABLE IF NOT EXISTS overrides (
				url TEXT NOT NULL, model TEXT NOT NULL, weight REAL, drained INTEGER NOT NULL, updated_at INTEGER NOT NULL,
				PRIMARY KEY (url, model))`);
		},
	},
	{
		// Node down / node back alerts (node-alerts.ts): each node's last announced health, and the deliveries.
		name: "node alerts",
		up(sql) {
			sql.exec(NODE_STATUS_SQL);
			sql.exec(ALERT_OUTBOX_SQL);
		},
	},
];

/** Probes at most this many nodes at once (a Durable Object has six outbound connections). */
const PROBE_CONCURRENCY = 5;
/** A node no isolate has named for this long (a config that changed) is no longer probed. */
const TARGET_TTL_MS = 10 * 60 * 1000;

/** Probing stops when no isolate has read the view for this long; the next read starts it again. */
export function idleAfterMs(intervalMs: number): number {
	return Math.max(60_000, 6 * intervalMs);
}

/** A probe's timeout: short, so a hung node costs a round little. */
export function probeTimeoutMs(intervalMs: number): number {
	return Math.min(2000, Math.max(500, Math.floor(intervalMs / 2)));
}

/** What PATCH /admin/nodes changes; `clear` removes the override. */
export interface OverrideInput {
	url: string;
	model: string | null;
	/** A new weight; null takes the weight override away. */
	weight?: number | null;
	drained?: boolean;
	clear?: boolean;
}

interface Known {
	target: ProbeTarget;
	seenAt: number;
}

export class NodeHealth extends DurableObject<Env> {
	readonly #sql: SqlStorage;
	readonly #targets = new Map<string, Known>();
	readonly #results = new Map<string, ProbeResult>();
	readonly #memos = new Map<string, ProbeMemo>();
	/** What the isolates reported of their requests to each node (in memory: news, not history). */
	readonly #reports = new Map<string, NodeReport>();
	#overrides: NodeOverride[];
	#intervalMs = ROUTING_DEFAULTS.health_check_interval_ms;
	#lastReadAt = 0;
	readonly #alerts: NodeAlerts;
	/** When the next alarm is due, as far as this instance knows (undefined: not known yet). */
	#alarmAt: number | null | undefined;

	constructor(ctx: DurableObjectState, env: Env) {
		super(ctx, env);
		this.#sql = ctx.storage.sql;
		migrate(ctx.storage, MIGRATIONS);
		this.#overrides = this.#loadOverrides();
		this.#alerts = new NodeAlerts(this.#sql, env);
	}

	/**
	 * The current view. `targets` are the nodes of the caller's config (never their secrets,
	 * only the names of them); reading keeps the probing going.
	 */
	async view(targets: ProbeTarget[], intervalMs: number, reports?: Record<string, NodeReport>): Promise<SharedView> {
		const now = Date.now();
		this.#lastReadAt = now;
		this.#intervalMs = intervalMs;
		for (const target of targets) this.#targets.set(target.url, { target, seenAt: now });
		// Only nodes it probes: an isolate cannot grow the map past the deployment's config.
		for (const [url, report] of Object.entries(reports ?? {})) {
			if (this.#targets.has(url)) this.#reports.set(url, mergeReports(this.#reports.get(url), report));
		}
		await this.#ensureAlarm(now);
		return this.#snapshot(now);
	}

	/** Sets or clears an operator override and returns the view with it. */
	async setOverride(input: OverrideInput): Promise<SharedView> {
		const now = Date.now();
		const model = input.model ?? "";
		const current = this.#overrides.find((o) => o.url === input.url && (o.model ?? "") === model);
		const weight = input.clear ? null : input.weight !== undefined ? input.weight : (current?.weight ?? null);
		const drained = input.clear ? false : (input.drained ?? current?.drained ?? false);
		if (weight === null && !drained) {
			this.#sql.exec("DELETE FROM overrides WHERE url = ? AND model = ?", input.url, model);
		} else {
			this.#sql.exec(
				"INSERT INTO overrides (url, model, weight, drained, updated_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (url, model) DO UPDATE SET weight = excluded.weight, drained = excluded.drained, updated_at = excluded.updated_at",
				input.url,
				model,
				weight,
				drained ? 1 : 0,
				now,
			);
		}
		this.#overrides = this.#loadOverrides();
		return this.#snapshot(now);
	}

	override async alarm(): Promise<void> {
		this.#alarmAt = null;
		const started = Date.now();
		// Alert retries go on while nobody routes (due an hour apart at most), beside the probes: a
		// slow receiver never holds a probe round back.
		const alerts = this.#alerts.run(started);
		// Nobody is routing: stop until the next read, so an idle deployment sends nodes nothing.
		if (started - this.#lastReadAt > idleAfterMs(this.#intervalMs)) {
			const alertsAt = await alerts;
			if (alertsAt !== null) await this.#schedule(alertsAt);
			return;
		}
		for (const [url, known] of this.#targets) {
			if (started - known.seenAt <= TARGET_TTL_MS) continue;
			this.#targets.delete(url);
			this.#results.delete(url);
			this.#memos.delete(url);
			this.#reports.delete(url);
		}
		await this.#probeAll();
		const alertsAt = await alerts;
		// A node that went down or came back is announced now, not a round later.
		const next = this.#alerts.observe(this.#results, Date.now()) ? await this.#alerts.run(Date.now()) : alertsAt;
		// The next round one interval after this one began, never two at once.
		const round = Math.max(Date.now(), started + this.#intervalMs);
		await this.#schedule(next === null ? round : Math.max(Date.now(), Math.min(round, next)));
	}

	async #probeAll(): Promise<void> {
		const queue = [...this.#targets.values()].map((k) => k.target);
		const deps = {
			fetch: (input: RequestInfo | URL, init?: RequestInit) => fetch(input, init),
			secrets: this.env,
			timeoutMs: probeTimeoutMs(this.#intervalMs),
			now: Date.now,
		};
		const worker = async () => {
			for (let target = queue.shift(); target; target = queue.shift()) {
				let memo = this.#memos.get(target.url);
				if (!memo) {
					memo = newMemo();
					this.#memos.set(target.url, memo);
				}
				try {
					this.#results.set(target.url, await probeNode(target, memo, deps));
				} catch (err) {
					logEvent("warn", "probing a node failed", { node: maskNodeUrl(target.url), error: errorText(err) });
				}
			}
		};
		await Promise.all(Array.from({ length: Math.min(PROBE_CONCURRENCY, queue.length) }, worker));
	}

	async #ensureAlarm(now: number): Promise<void> {
		if (this.#alarmAt === undefined) this.#alarmAt = await this.ctx.storage.getAlarm();
		// An alarm planned only for an alert retry (while idle) must not hold the first probe round back.
		if (this.#alarmAt === null || this.#alarmAt > now + this.#intervalMs) await this.#schedule(now);
	}

	async #schedule(at: number): Promise<void> {
		this.#alarmAt = at;
		await this.ctx.storage.setAlarm(at);
	}

	#snapshot(now: number): SharedView {
		return {
			at: now,
			nodes: Object.fromEntries(this.#results),
			overrides: this.#overrides,
			reports: Object.fromEntries(this.#reports),
		};
	}

	#loadOverrides(): NodeOverride[] {
		return this.#sql
			.exec<{ url: string; model: string; weight: number | null; drained: number; updated_at: number }>(
				"SELECT url, model, weight, drained, updated_at FROM overrides ORDER BY url, model",
			)
			.toArray()
			.map((r) => ({
				url: r.url,
				model: r.model === "" ? null : r.model,
				weight: r.weight,
				drained: r.drained === 1,
				updated_at: r.updated_at,
			}));
	}
}
