/**
 * Which node of a model serves the next attempt. Pure: the nodes' state, the clock and the
 * random source come in as values, so every rule is tested with plain data.
 *
 * 1. Drained nodes (weight 0) and nodes already tried for this request are out.
 * 2. A node is *cooling* while its cooldown runs or the shared view's last probe failed it
 *    (and no request has succeeded on it since); *overloaded* when its engine reports a long
 *    queue; otherwise *available*.
 * 3. Among available nodes: the conversation's node by rendezvous hashing when the request
 *    carries an affinity key, else the better of two weighted random picks (the lower
 *    in-flight count plus engine queue, per unit of weight).
 * 4. No available node: the overloaded ones the same way. None either: the cooling node that
 *    failed least recently, so a request is never refused without trying.
 */
import { rendezvousPick } from "./rendezvous";

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
}

export type NodeClass = "drained" | "cooling" | "overloaded" | "available";

export function classify(n: NodeView, now: number): NodeClass {
	if (!(n.weight > 0)) return "drained";
	if (n.coolingUntil > now || !n.healthy) return "cooling";
	if (n.waiting >= LONG_QUEUE) return "overloaded";
	return "available";
}

/** Load per unit of weight: lower is better. */
export function loadScore(n: NodeView): number {
	const queue = n.waiting + (n.kvCacheUsage >= FULL_KV_CACHE ? 1 : 0);
	return (n.inFlight + queue) / n.weight;
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

export function pickNode<T extends NodeView>(nodes: readonly T[], opts: PickOptions): T | null {
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
		if (opts.affinityKey) return rendezvousPick(opts.affinityKey, available) ?? null;
		return powerOfTwo(available, opts.random) ?? null;
	}
	if (overloaded.length) return powerOfTwo(overloaded, opts.random) ?? null;
	return leastRecentlyFailed;
}
