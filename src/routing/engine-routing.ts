/** What an engine call (engine/call-engine.ts) is given of routing: the settings, the fleet, the randomness. */
import type { RoutingConfig } from "../config";
import type { Fleet } from "./fleet";

export interface EngineRouting {
	settings: Pick<RoutingConfig, "cooldown_ms" | "max_attempts"> & Partial<Pick<RoutingConfig, "affinity_load_factor">>;
	/** Default: the isolate's fleet, shared by every request of the isolate. */
	fleet?: Fleet;
	/** Starts a refresh of the shared view when the isolate's copy is stale; never waited for. */
	refresh?: () => void;
	random?: () => number;
}
