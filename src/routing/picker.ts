/**
 * Which node of a model serves the next attempt. Pure: the nodes' state, the clock and the
 * random source come in as values, so every rule is tested with plain data.
 *
 * 1. Drained nodes (weight 0) and nodes already tried for this request are out.
 * 2. A node is *cooling* while its cooldown runs or the shared view's last probe failed it
 *    (and no request has succeeded on it since); *overloaded* when its engine reports a long
 *    queue; otherwise *available*.
 * 3. Among available nodes, with an affinity key: the first node in the key's rendezvous order
 *    whose load is under its bound (consistent hashing with bounded loads, Mirrokni, Thorup and
 *    Zadimoghaddam; HAProxy's `hash-balance-factor`): a burst spills to the next nodes in a fixed
 *    order, which warm the same prefix, and returns home when it ends. From 8 requests a node's
 *    fair share on, each key's bound on each node rises by its fixed share of a slack (at most 20
 *    requests), so the same keys of a hot node spill every time. Without a key: the better
 *    of two weighted random picks (the lower count of requests on it, in flight here or running in
 *    the engine, plus the engine's queue, per unit of weight).
 * 4. No available node: the overloaded ones the same way. None either: the cooling node that
 *    failed least recently, so a request is never refused without trying.
 */
import { ROUTING_DEFAULTS } from "../config-schema";
import { hash53, rendezvousOrder } from "./rendezvous";

export interface NodeView {
	url: string;
	/** The effective weight (configured, or the operator's override); 0 = drained. */
	weight: number;
	inFlight: number;
	coolingUntil: number;
	/** When it last failed, locally or by probe (ms; 0 never): the order among cooling nodes. */
	failedAt: number;
	/** False when the shared view's last probe failed and nothing succeeded on it since. */
	healthy: boolean;
	/** The engine's queue (0 when unknown). */
	waiting: number;
	/** KV cache in use, 0–1 (0 when unknown). */
	kvCacheUsage: number;
	/** Requests the engine reports running, from every gateway isolate (0 when unknown). */
	running?: number;
	/** How many requests the engine runs at once (llama.cpp's slots; absent when unknown). */
	slots?: number;
}

/** A queue this long marks a node overloaded: it gets new requests only when no peer is free. */
export const LONG_QUEUE = 4;

/** A KV cache this full makes the next request queue or preempt: counted as one request waiting. */
export const FULL_KV_CACHE = 0.95;

export interface PickOptions {
	now: number;
	/** Uniform in [0, 1). */
	random: () => number;
	/** `prompt_cache_key`, else `user`: the same key goes to the same node while it is available. */
	affinityKey?: string;
	/** Nodes this request has tried already. */
	tried?: ReadonlySet<string>;
	/** Bounded load: an affinity pick skips a node whose load reaches this × its fair share (the config's default when absent, ≥ 1). */
	loadFactor?: number;
	/** The most requests a key's slack adds to the bound (AFFINITY_SLACK when absent; 0: the plain bound; tests and the simulator vary it). */
	affinitySlack?: number;
}

/** How a node was chosen: the affinity key's own node, a later one of its order (the own was full), or by load. */
export type Route = "affinity" | "spill" | "balanced";

export interface Picked<T> {
	node: T;
	route: Route;
	/** On a spill, the key's own node that was full. */
	home?: T;
}

export const DEFAULT_AFFINITY_LOAD_FACTOR = ROUTING_DEFAULTS.affinity_load_factor;

/**
 * Per-key slack over the bounded-load bound. From AFFINITY_SLACK_FROM requests a node's fair
 * share on, a key may stay on a node until `floor(min(AFFINITY_SLACK, fair share) ×
 * keyShare(key, node))` requests past the plain bound. Which keys spill from a hot node is then
 * the same every time (those of lowest share), so the next node of their order stays warm for
 * them, instead of whichever key arrives while the node's count sits on its bound. A node's count
 * wanders by about √(its mean) under steady load, which the plain bound (25% over a fair share)
 * cannot absorb at tens of requests a node; below AFFINITY_SLACK_FROM the bound is the plain one.
 */
export const AFFINITY_SLACK = 20;
export const AFFINITY_SLACK_FROM = 8;

/** A key's share of a node's slack, in [0, 1): fixed for the pair, independent across nodes. */
export function keyShare(key: string, node: string): number {
	return hash53(`${key}\u0001${node}`) / 2 ** 53;
}

export type NodeClass = "drained" | "cooling" | "overloaded" | "available";

export function classify(n: NodeView, now: number): NodeClass {
	if (!(n.weight > 0)) return "drained";
	if (n.coolingUntil > now || !n.healthy) return "cooling";
	if (n.waiting >= LONG_QUEUE) return "overloaded";
	return "available";
}

/**
 * What waits on the engine before the next request runs: its queue, plus one when its KV cache is
 * nearly full or every slot it has is busy (the next request would queue or preempt).
 */
function engineQueue(n: NodeView): number {
	const full = n.kvCacheUsage >= FULL_KV_CACHE || (n.slots !== undefined && n.slots > 0 && (n.running ?? 0) >= n.slots);
	return n.waiting + (full ? 1 : 0);
}

/**
 * Load per unit of weight: lower is better. Requests on the node are the larger of this isolate's
 * in-flight count and the engine's running count (which sees every isolate's and every other
 * client's, but lags), as affinityLoad counts them.
 */
export function loadScore(n: NodeView): number {
	const running = Math.max(n.inFlight, Number.isFinite(n.running) ? (n.running ?? 0) : 0);
	return (running + engineQueue(n)) / n.weight;
}

/** One node at random, in proportion to weight, skipping `except`. */
function weightedPick<T extends NodeView>(pool: readonly T[], random: () => number, except?: T): T {
	let total = 0;
	for (const n of pool) if (n !== except) total += n.weight;
	let r = random() * total;
	let last = pool[0] as T;
	for (const n of pool) {
		if (n === except) continue;
		last = n;
		r -= n.weight;
		if (r < 0) return n;
	}
	return last;
}

/** The better of two distinct weighted random picks; a tie keeps the first, so weights hold when loads are equal. */
export function powerOfTwo<T extends NodeView>(pool: readonly T[], random: () => number): T | undefined {
	if (pool.length <= 1) return pool[0];
	const a = weightedPick(pool, random);
	const b = weightedPick(pool, random, a);
	return loadScore(b) < loadScore(a) ? b : a;
}

/**
 * A node's load for bounded-load affinity: requests on it. This isolate's in-flight count is
 * exact but sees only its own requests; the engine's gauges see every isolate's but lag dispatch
 * by seconds and read 0 at cold start. The larger wins, so a stale or zero reading never hides
 * a burst this isolate just sent.
 */
export function affinityLoad(n: NodeView): number {
	const engine = (n.running ?? 0) + engineQueue(n);
	return Math.max(n.inFlight, Number.isFinite(engine) ? engine : 0);
}

/**
 * The first node of the key's rendezvous order whose load is under its bound for the key:
 * `ceil(factor × fair)`, fair = (total load + 1) × weight / total weight (with equal weights,
 * `ceil(factor × (total + 1) / nodes)`), plus, once fair ≥ AFFINITY_SLACK_FROM, the key's slack
 * `floor(min(slack, fair) × keyShare(key, node))`. Some node always is: the loads sum to less
 * than total + 1.
 */
export function boundedAffinityPick<T extends NodeView>(
	key: string,
	pool: readonly T[],
	factor: number,
	slack = AFFINITY_SLACK,
): Picked<T> | undefined {
	const f = Number.isFinite(factor) && factor >= 1 ? factor : DEFAULT_AFFINITY_LOAD_FACTOR;
	const most = Number.isFinite(slack) && slack >= 0 ? slack : AFFINITY_SLACK;
	let total = 0;
	let weights = 0;
	for (const n of pool) {
		total += affinityLoad(n);
		weights += n.weight;
	}
	const order = rendezvousOrder(key, pool);
	const home = order[0];
	if (!home) return undefined;
	for (const n of order) {
		const fair = ((total + 1) * n.weight) / weights;
		const slackHere = fair >= AFFINITY_SLACK_FROM ? Math.floor(Math.min(most, fair) * keyShare(key, n.url)) : 0;
		const bound = Math.ceil(f * fair) + slackHere;
		if (affinityLoad(n) < bound) return n === home ? { node: n, route: "affinity" } : { node: n, route: "spill", home };
	}
	return { node: home, route: "affinity" };
}

export function pickNode<T extends NodeView>(nodes: readonly T[], opts: PickOptions): T | null {
	return pickRoute(nodes, opts)?.node ?? null;
}

/** `pickNode`, saying how the node was chosen (the request log's `route`, the spill counts). */
export function pickRoute<T extends NodeView>(nodes: readonly T[], opts: PickOptions): Picked<T> | null {
	const available: T[] = [];
	const overloaded: T[] = [];
	let leastRecentlyFailed: T | null = null;
	for (const n of nodes) {
		if (opts.tried?.has(n.url)) continue;
		switch (classify(n, opts.now)) {
			case "drained":
				break;
			case "cooling":
				if (!leastRecentlyFailed || n.failedAt < leastRecentlyFailed.failedAt) leastRecentlyFailed = n;
				break;
			case "overloaded":
				overloaded.push(n);
				break;
			case "available":
				available.push(n);
				break;
		}
	}
	if (available.length) {
		if (opts.affinityKey) {
			const picked = boundedAffinityPick(
				opts.affinityKey,
				available,
				opts.loadFactor ?? DEFAULT_AFFINITY_LOAD_FACTOR,
				opts.affinitySlack ?? AFFINITY_SLACK,
			);
			if (picked) return picked;
		}
		return balanced(powerOfTwo(available, opts.random));
	}
	if (overloaded.length) return balanced(powerOfTwo(overloaded, opts.random));
	return balanced(leastRecentlyFailed ?? undefined);
}

function balanced<T>(node: T | undefined): Picked<T> | null {
	return node ? { node, route: "balanced" } : null;
}
