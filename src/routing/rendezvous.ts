/**
 * Weighted rendezvous (highest random weight) hashing: a key goes to the node whose hash with
 * the key scores highest. Adding or removing a node moves only the keys that node wins or
 * held; weights scale each node's share (Schindelhauer and Schomaker's logarithmic method).
 */

/** A 53-bit string hash (cyrb53), uniform enough to spread keys; not for security. */
export function hash53(text: string, seed = 0): number {
	let h1 = 0xdeadbeef ^ seed;
	let h2 = 0x41c6ce57 ^ seed;
	for (let i = 0; i < text.length; i++) {
		const ch = text.charCodeAt(i);
		h1 = Math.imul(h1 ^ ch, 2654435761);
		h2 = Math.imul(h2 ^ ch, 1597334677);
	}
	h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507);
	h1 ^= Math.imul(h2 ^ (h2 >>> 13), 3266489909);
	h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507);
	h2 ^= Math.imul(h1 ^ (h1 >>> 13), 3266489909);
	return 4294967296 * (2097151 & h2) + (h1 >>> 0);
}

/** The score of `node` for `key`: higher wins. */
export function rendezvousScore(key: string, node: string, weight: number): number {
	// A hash in (0, 1), never 0 or 1, so the logarithm is finite and negative.
	const u = (hash53(`${key}\u0000${node}`) + 0.5) / 2 ** 53;
	return -weight / Math.log(u);
}

/** The node `key` belongs to among `nodes` (weight > 0), or undefined when there are none. */
export function rendezvousPick<T extends { url: string; weight: number }>(key: string, nodes: readonly T[]): T | undefined {
	let best: T | undefined;
	let bestScore = Number.NEGATIVE_INFINITY;
	for (const n of nodes) {
		if (!(n.weight > 0)) continue;
		const score = rendezvousScore(key, n.url, n.weight);
		if (score > bestScore) {
			best = n;
			bestScore = score;
		}
	}
	return best;
}

/** Every node of weight > 0, best score for `key` first: where the key goes, then where it spills. */
export function rendezvousOrder<T extends { url: string; weight: number }>(key: string, nodes: readonly T[]): T[] {
	const scored: Array<{ n: T; s: number }> = [];
	for (const n of nodes) if (n.weight > 0) scored.push({ n, s: rendezvousScore(key, n.url, n.weight) });
	scored.sort((a, b) => b.s - a.s);
	return scored.map((x) => x.n);
}
