/**
 * The isolate's memory of the engine fleet: each node's runtime state (shared by every
 * request the isolate serves, so one request's failure spares the next) and the latest shared
 * view (probes, engine load, operator overrides). Synchronous and allocation-light: it runs
 * on every engine attempt.
 */
import type { EngineNode } from "../config";
import {
	applyProbe,
	type NodeRuntime,
	newRuntime,
	prefillRate,
	recordFailure,
	recordPrefill,
	recordServerError,
	recordSuccess,
	recordTimeout,
	reenable,
	reportOf,
} from "./node-state";
import { type NodeView, type Picked, pickRoute } from "./picker";
import type { NodeOverride, NodeReport, ProbeResult, SharedView } from "./view-types";

export interface RoutedNode extends NodeView {
	node: EngineNode;
}

export interface FleetPickOptions {
	now: number;
	random: () => number;
	tried: ReadonlySet<string>;
	affinityKey?: string;
	/** `routing.affinity_load_factor`. */
	loadFactor?: number;
}

function overrideKey(model: string | null, url: string): string {
	return `${model ?? ""}\n${url}`;
}

export class Fleet {
	private readonly runtimes = new Map<string, NodeRuntime>();
	private overrides = new Map<string, NodeOverride>();
	private view: SharedView | null = null;
	/** When this isolate last asked for the shared view (ms), and whether it is asking now. */
	viewRequestedAt = 0;
	refreshing = false;
	/** Nodes whose failure or success this isolate has not told the shared view yet. */
	private readonly unreported = new Set<string>();

	runtime(url: string): NodeRuntime {
		let rt = this.runtimes.get(url);
		if (!rt) {
			rt = newRuntime();
			this.runtimes.set(url, rt);
		}
		return rt;
	}

	/** The shared view, or null before the first one arrived (then every node counts as healthy). */
	sharedView(): SharedView | null {
		return this.view;
	}

	/** Takes a newer shared view: its overrides from now on, and probes that passed end cooldowns. */
	ingest(view: SharedView): void {
		if (this.view && view.at < this.view.at) return;
		this.view = view;
		this.overrides = new Map(view.overrides.map((o) => [overrideKey(o.model, o.url), o]));
		for (const [url, probe] of Object.entries(view.nodes)) {
			const rt = this.runtimes.get(url);
			if (rt) applyProbe(rt, probe);
		}
	}

	probe(url: string): ProbeResult | undefined {
		return this.view?.nodes[url];
	}

	/** The operator's override for this node of this model: the model's own first, then the node-wide one. */
	override(model: string, url: string): NodeOverride | undefined {
		if (this.overrides.size === 0) return undefined;
		return this.overrides.get(overrideKey(model, url)) ?? this.overrides.get(overrideKey(null, url));
	}

	weight(model: string, node: EngineNode): number {
		const o = this.override(model, node.url);
		if (!o) return node.weight;
		if (o.drained) return 0;
		return o.weight ?? node.weight;
	}

	/** The picker's view of one node. */
	nodeView(model: string, node: EngineNode): RoutedNode {
		const rt = this.runtime(node.url);
		const probe = this.probe(node.url);
		// A probe that failed counts until something newer succeeded: a request, or a later probe.
		const probeFailed = probe !== undefined && !probe.healthy && probe.checked_at > rt.lastSuccessAt;
		return {
			node,
			url: node.url,
			weight: this.weight(model, node),
			inFlight: rt.inFlight,
			coolingUntil: rt.coolingUntil,
			failedAt: Math.max(rt.lastFailureAt, probeFailed ? (probe?.checked_at ?? 0) : 0),
			healthy: !probeFailed,
			waiting: probe?.load?.waiting ?? 0,
			kvCacheUsage: probe?.load?.kv_cache_usage ?? 0,
			running: probe?.load?.running ?? 0,
			...(probe?.load?.slots ? { slots: probe.load.slots } : {}),
		};
	}

	pick(model: string, nodes: readonly EngineNode[], opts: FleetPickOptions): EngineNode | null {
		return this.route(model, nodes, opts)?.node ?? null;
	}

	/** The node for the next attempt and how it was chosen; an affinity pick is counted on the key's own node. */
	route(model: string, nodes: readonly EngineNode[], opts: FleetPickOptions): Picked<EngineNode> | null {
		const views = nodes.map((n) => this.nodeView(model, n));
		const picked = pickRoute(views, opts);
		if (!picked) return null;
		if (picked.route === "affinity") this.runtime(picked.node.url).affinityServed += 1;
		else if (picked.route === "spill" && picked.home) this.runtime(picked.home.url).affinitySpilled += 1;
		return { node: picked.node.node, route: picked.route };
	}

	started(url: string): void {
		this.runtime(url).inFlight += 1;
	}

	/** The attempt is over (failed, refused, or its answer's body ended). */
	finished(url: string): void {
		const rt = this.runtime(url);
		rt.inFlight = Math.max(0, rt.inFlight - 1);
	}

	failed(url: string, reason: string, now: number, cooldownMs: number): void {
		recordFailure(this.runtime(url), reason, now, cooldownMs);
		this.unreported.add(url);
	}

	/** A first-token timeout: a long prompt's cools the node only when short prompts time out there too (node-state.ts). */
	timedOut(url: string, long: boolean, now: number, cooldownMs: number): boolean {
		this.unreported.add(url);
		return recordTimeout(this.runtime(url), long, now, cooldownMs);
	}

	/** A prefill the node reported (or that its time to first token shows): `tokens` in `ms`. */
	prefill(url: string, tokens: number, ms: number): void {
		recordPrefill(this.runtime(url), tokens, ms);
	}

	/** The prefill rate a prompt's first-token deadline is figured at on this node. */
	prefillRate(node: EngineNode): number {
		return prefillRate(this.runtime(node.url), node.prefillTokensPerS);
	}

	/** A 5xx a request got from the node: it cools once different requests got one (node-state.ts). */
	serverError(url: string, request: number, reason: string, now: number, cooldownMs: number): boolean {
		this.unreported.add(url);
		return recordServerError(this.runtime(url), request, reason, now, cooldownMs);
	}

	/** A request the node served was billed: its prompt tokens, and how many the engine had cached. */
	usage(url: string, promptTokens: number, cachedTokens: number): void {
		const rt = this.runtime(url);
		rt.promptTokens += promptTokens;
		rt.cachedTokens += cachedTokens;
	}

	succeeded(url: string, firstByteMs: number, now: number): void {
		const rt = this.runtime(url);
		// A node that failed here before: its recovery is news for the shared view too.
		if (rt.lastErrorAt > rt.lastSuccessAt) this.unreported.add(url);
		recordSuccess(rt, firstByteMs, now);
	}

	/** Whether this isolate has failures (or recoveries) the shared view has not heard of. */
	hasReports(): boolean {
		return this.unreported.size > 0;
	}

	/** The reports to send with the next read of the shared view; taken once. */
	takeReports(): Record<string, NodeReport> | undefined {
		if (this.unreported.size === 0) return undefined;
		const out: Record<string, NodeReport> = {};
		for (const url of this.unreported) {
			out[url] = reportOf(this.runtime(url));
		}
		this.unreported.clear();
		return out;
	}

	/** What every isolate reported of the node (the shared view's), if any did. */
	report(url: string): NodeReport | undefined {
		return this.view?.reports?.[url];
	}

	/** An operator re-enabled the node (PATCH /admin/nodes `reenable`): this isolate forgets its cooldown. */
	reenable(url: string, now: number): void {
		reenable(this.runtime(url), now);
		this.unreported.add(url);
	}
}

/** The isolate's fleet: every request of the isolate reads and updates this one. */
export const isolateFleet = new Fleet();
