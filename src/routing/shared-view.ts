/**
 * The isolate's side of the shared view: a copy of the NodeHealth Durable Object's view, read
 * at most once per half health-check interval, under waitUntil, never awaited by a request.
 * Until the first copy arrives the isolate routes as if every node were healthy.
 */
import { type GatewayConfig, modelNodes } from "../config";
import type { EngineRouting } from "./engine-routing";
import { type Fleet, isolateFleet } from "./fleet";
import type { NodeHealth } from "./node-health";
import type { NodeReport, ProbeTarget, SharedView } from "./view-types";

/** The one NodeHealth object of a deployment. */
export const FLEET_OBJECT_NAME = "fleet";

/** How long an isolate's copy of the view is used before it asks again. */
export function viewTtlMs(intervalMs: number): number {
	return Math.min(30_000, Math.max(100, Math.floor(intervalMs / 2)));
}

/** A refresh still pending after this long no longer blocks the next (a lost promise must not stop refreshes). */
const REFRESH_STUCK_MS = 10_000;

const targetsOf = new WeakMap<GatewayConfig, ProbeTarget[]>();

/** Every node of the config, once per URL, as the prober needs it: where to look, and the secret's name. */
export function probeTargets(config: GatewayConfig): ProbeTarget[] {
	let targets = targetsOf.get(config);
	if (!targets) {
		const byUrl = new Map<string, ProbeTarget>();
		for (const model of config.models) {
			for (const n of modelNodes(model)) {
				if (byUrl.has(n.url)) continue;
				const t: ProbeTarget = { url: n.url };
				if (n.apiKeyEnv) t.api_key_env = n.apiKeyEnv;
				if (n.healthUrl) t.health_url = n.healthUrl;
				if (n.metricsUrl) t.metrics_url = n.metricsUrl;
				byUrl.set(n.url, t);
			}
		}
		targets = [...byUrl.values()];
		targetsOf.set(config, targets);
	}
	return targets;
}

export function nodeHealth(env: Env): DurableObjectStub<NodeHealth> {
	const ns = env.NODE_HEALTH as DurableObjectNamespace<NodeHealth>;
	return ns.get(ns.idFromName(FLEET_OBJECT_NAME));
}

/** Reads the view (registering the config's nodes for probing), telling it what this isolate saw of its nodes. */
export function readSharedView(env: Env, config: GatewayConfig, reports?: Record<string, NodeReport>): Promise<SharedView> {
	return nodeHealth(env).view(probeTargets(config), config.routing.health_check_interval_ms, reports);
}

/** Starts reading the view when this isolate's copy is stale; returns at once. */
export function refreshSharedView(
	env: Env,
	config: GatewayConfig,
	waitUntil: (p: Promise<unknown>) => void,
	fleet: Fleet = isolateFleet,
): void {
	const now = Date.now();
	if (!env.NODE_HEALTH) return;
	// A node that just failed (or recovered) here is told at once, not at the copy's expiry.
	const wait = fleet.refreshing ? REFRESH_STUCK_MS : fleet.hasReports() ? 0 : viewTtlMs(config.routing.health_check_interval_ms);
	if (now - fleet.viewRequestedAt < wait) return;
	fleet.viewRequestedAt = now;
	fleet.refreshing = true;
	waitUntil(
		readSharedView(env, config, fleet.takeReports())
			.then((view) => fleet.ingest(view))
			.catch((err) => console.warn("reading the fleet view failed", err))
			.finally(() => {
				fleet.refreshing = false;
			}),
	);
}

/** The routing an engine call of this request uses: the config's settings, the isolate's fleet, the shared view. */
export function engineRouting(env: Env, config: GatewayConfig, waitUntil: (p: Promise<unknown>) => void): EngineRouting {
	return { settings: config.routing, refresh: () => refreshSharedView(env, config, waitUntil) };
}
