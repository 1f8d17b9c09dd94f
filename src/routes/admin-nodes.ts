/**
 * `GET /admin/nodes`: every node of every model as the router sees it (the shared view's
 * probes and engine load, this isolate's in-flight count, cooldown and latency).
 * `PATCH /admin/nodes`: an operator's weight or drain for a node, kept in the shared view until
 * cleared, so a node can go out for maintenance without a redeploy. Mounted under the admin
 * routes (admin token). Node secrets never appear: URLs are shown masked (routing/node-label.ts).
 */
import { Hono } from "hono";
import { PatchNode } from "../api/node-input";
import type { AppEnv } from "../app-env";
import { type GatewayConfig, loadConfig, modelNodes } from "../config";
import { GatewayError } from "../errors";
import { jsonBody } from "../http/json-body";
import { type Fleet, isolateFleet } from "../routing/fleet";
import { maskNodeUrl } from "../routing/node-label";
import { reportOf, reportState } from "../routing/node-state";
import { classify } from "../routing/picker";
import { nodeHealth, readSharedView } from "../routing/shared-view";
import { mergeReports, type SharedView } from "../routing/view-types";

function seconds(ms: number): number {
	return Math.ceil(ms / 1000);
}

/** A node whose last request failed is `failing` for this long, unless one succeeds there first. */
export const FAILING_WINDOW_MS = 5 * 60 * 1000;

/**
 * The node's state for an operator: `drained` (the operator's), `cooling` (its failures earned a
 * cooldown: skipped), `failing` (its last request failed, recently, with no cooldown earned),
 * `unhealthy` (its health probe fails), else `healthy`.
 */
export type NodeState = "drained" | "cooling" | "failing" | "unhealthy" | "healthy";

function stateOf(drained: boolean, runtime: "cooling" | "failing" | "ok", probedHealthy: boolean): NodeState {
	if (drained) return "drained";
	if (runtime !== "ok") return runtime;
	return probedHealthy ? "healthy" : "unhealthy";
}

/** One row a node of a model. */
function nodeRows(config: GatewayConfig, fleet: Fleet, now: number, only?: (model: string, url: string) => boolean) {
	const rows = [];
	for (const model of config.models) {
		for (const node of modelNodes(model)) {
			if (only && !only(model.id, node.url)) continue;
			const rt = fleet.runtime(node.url);
			const probe = fleet.probe(node.url);
			const override = fleet.override(model.id, node.url);
			const view = fleet.nodeView(model.id, node);
			// What this isolate saw of the node, with what the others reported (routing/view-types.ts).
			const seen = mergeReports(fleet.report(node.url), reportOf(rt));
			const runtime = reportState(seen, probe, now, FAILING_WINDOW_MS);
			const cooling = runtime === "cooling";
			const drained = classify(view, now) === "drained";
			const probeErrorAt = probe !== undefined && !probe.healthy ? probe.checked_at : 0;
			rows.push({
				model: model.id,
				url: maskNodeUrl(node.url),
				weight: view.weight,
				configured_weight: node.weight,
				drained,
				state: stateOf(drained, runtime, view.healthy),
				override: override ? { weight: override.weight, drained: override.drained } : null,
				healthy: !cooling && view.healthy,
				cooling_until: cooling ? seconds(seen.cooling_until) : null,
				in_flight: rt.inFlight,
				// The newest of any isolate's last failure and a failed health probe.
				last_error: probeErrorAt > seen.error_at ? probe?.error : (seen.error ?? probe?.error ?? null),
				last_error_at: Math.max(seen.error_at, probeErrorAt) > 0 ? seconds(Math.max(seen.error_at, probeErrorAt)) : null,
				failures: rt.failures,
				latency_ms: rt.latencyMs === null ? null : Math.round(rt.latencyMs),
				checked_at: probe ? seconds(probe.checked_at) : null,
				engine_load: probe?.load ?? null,
				// This isolate's affinity picks whose own node this is: served here, or spilled on (this one was full).
				affinity_served: rt.affinityServed,
				affinity_spilled: rt.affinitySpilled,
				// The share of prompt tokens this isolate's requests found in the node's prefix cache.
				cache_hit_rate: rt.promptTokens > 0 ? Number((rt.cachedTokens / rt.promptTokens).toFixed(4)) : null,
			});
		}
	}
	return rows;
}

/** The view now (registering the config's nodes, so the prober knows them); the isolate takes it too. */
async function freshView(env: Env, config: GatewayConfig): Promise<SharedView | null> {
	try {
		// This isolate's news about its nodes goes with the read, so the rows show it and so do other isolates'.
		const view = await readSharedView(env, config, isolateFleet.takeReports());
		isolateFleet.ingest(view);
		return view;
	} catch (err) {
		// The shared view being down is no reason to hide the isolate's own view.
		console.warn("reading the fleet view failed", err);
		return null;
	}
}

/**
 * The configured URL a PATCH names (as configured, or as shown), checked against the model when
 * given. A shown URL that two configured nodes share once masked names neither: the configured
 * URL is asked for.
 */
function resolveTarget(config: GatewayConfig, url: string, modelId: string | undefined): string {
	const wanted = url.replace(/\/+$/, "");
	if (modelId !== undefined && !config.models.some((m) => m.id === modelId)) {
		throw new GatewayError("not_found", `No model with id '${modelId}'.`, { param: "model" });
	}
	const shownAs = new Set<string>();
	for (const model of config.models) {
		if (modelId !== undefined && model.id !== modelId) continue;
		for (const node of modelNodes(model)) {
			if (node.url === wanted) return node.url;
			if (maskNodeUrl(node.url) === wanted) shownAs.add(node.url);
		}
	}
	if (shownAs.size === 1) return [...shownAs][0] as string;
	if (shownAs.size > 1) {
		throw new GatewayError("invalid_request", `More than one node is shown as '${url}': send its configured url.`, {
			param: "url",
		});
	}
	const where = modelId === undefined ? "" : ` of model '${modelId}'`;
	throw new GatewayError("not_found", `No node${where} with url '${url}'.`, { param: "url" });
}

export const adminNodes = new Hono<AppEnv>()
	.get("/", async (c) => {
		const config = loadConfig(c.env.GATEWAY_CONFIG);
		await freshView(c.env, config);
		return c.json({ object: "list", data: nodeRows(config, isolateFleet, Date.now()) });
	})
	.patch("/", jsonBody(PatchNode), async (c) => {
		const config = loadConfig(c.env.GATEWAY_CONFIG);
		const input = c.req.valid("json");
		const url = resolveTarget(config, input.url, input.model);
		const drained = input.reenable ? false : input.drain;
		const view = await nodeHealth(c.env).setOverride({
			url,
			model: input.model ?? null,
			...(input.weight !== undefined ? { weight: input.weight } : {}),
			...(drained !== undefined ? { drained } : {}),
			...(input.clear ? { clear: true } : {}),
		});
		isolateFleet.ingest(view);
		if (input.reenable) {
			// Forgotten here, and told to the shared view (a success now), so no isolate's report keeps it out of view.
			isolateFleet.reenable(url, Date.now());
			isolateFleet.ingest(await readSharedView(c.env, config, isolateFleet.takeReports()));
		}
		return c.json({ object: "list", data: nodeRows(config, isolateFleet, Date.now(), (_m, u) => u === url) });
	});
