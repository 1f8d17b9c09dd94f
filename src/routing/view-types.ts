/** The shared view of the fleet: what the NodeHealth Durable Object knows and isolates cache. */
import type { EngineLoad } from "./engine-load";

/** A node as the prober needs it: where to look, and the name of the secret to send (never the secret). */
export interface ProbeTarget {
	url: string;
	api_key_env?: string;
	health_url?: string;
	metrics_url?: string;
}

export interface ProbeResult {
	healthy: boolean;
	/** When the probe ran (ms). */
	checked_at: number;
	/** Why it failed ("status 503", "timeout", "connection failed"), null when healthy. */
	error: string | null;
	/** How long the health check took to answer. */
	latency_ms: number | null;
	/** The engine's load when it exposes one, null otherwise. */
	load: EngineLoad | null;
}

/** An operator's runtime setting for a node, kept until cleared (PATCH /admin/nodes). */
export interface NodeOverride {
	url: string;
	/** Only for this model; null: every model the node serves. */
	model: string | null;
	/** Replaces the configured weight; null keeps it. */
	weight: number | null;
	/** No new traffic, whatever the weight. */
	drained: boolean;
	updated_at: number;
}

/**
 * What the isolates' requests saw of a node, shared so that every isolate (and the admin view on
 * any of them) knows a node just failed: the newest error and success any isolate reported, and
 * the latest cooldown one gave it. Shown to operators; routing keeps to each isolate's own record.
 */
export interface NodeReport {
	/** Why it last failed (never an engine's text), null when no isolate saw it fail. */
	error: string | null;
	/** When (ms), 0 when never. */
	error_at: number;
	/** When a request last succeeded there (ms), 0 when never. */
	success_at: number;
	/** The latest cooldown an isolate gave it (ms), 0 when none. */
	cooling_until: number;
}

export interface SharedView {
	/** When the Durable Object answered (ms). */
	at: number;
	nodes: Record<string, ProbeResult>;
	overrides: NodeOverride[];
	/** The isolates' reports by node URL (absent from a Durable Object from before them). */
	reports?: Record<string, NodeReport>;
}

/** Two reports of one node as one: the newer error, the newer success, the later cooldown. */
export function mergeReports(a: NodeReport | undefined, b: NodeReport): NodeReport {
	if (!a) return { ...b };
	const newerError = b.error_at > a.error_at ? b : a;
	return {
		error: newerError.error,
		error_at: newerError.error_at,
		success_at: Math.max(a.success_at, b.success_at),
		cooling_until: Math.max(a.cooling_until, b.cooling_until),
	};
}
