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

export interface SharedView {
	/** When the Durable Object answered (ms). */
	at: number;
	nodes: Record<string, ProbeResult>;
	overrides: NodeOverride[];
}
