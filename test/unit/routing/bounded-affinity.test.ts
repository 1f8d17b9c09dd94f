import { describe, expect, it } from "vitest";
import type { EngineNode } from "../../../src/config";
import { Fleet } from "../../../src/routing/fleet";
import { affinityLoad, type NodeView, pickRoute } from "../../../src/routing/picker";
import { rendezvousOrder } from "../../../src/routing/rendezvous";
import { seededRandom } from "../../support/seeded-random";

function node(url: string, extra: Partial<NodeView> = {}): NodeView {
	return { url, weight: 1, inFlight: 0, coolingUntil: 0, failedAt: 0, healthy: true, waiting: 0, kvCacheUsage: 0, ...extra };
}

const KEY = "conversation-1";
const random = seededRandom(7);

/** Four idle nodes in the order KEY ranks them: home first. */
function fleetOf(): NodeView[] {
	return rendezvousOrder(
		KEY,
		["a", "b", "c", "d"].map((u) => node(u)),
	);
}

describe("bounded-load affinity", () => {
	it("keeps the key on its own node while that node is under its bound", () => {
		const nodes = fleetOf();
		const home = nodes[0] as NodeView;
		for (let i = 0; i < 3; i++) {
			const picked = pickRoute(nodes, { now: 0, random, affinityKey: KEY });
			expect(picked?.node).toBe(home);
			expect(picked?.route).toBe("affinity");
		}
	});

	it("spills a burst to the next nodes of the key's order, never to a random one, and returns after", () => {
		const nodes = fleetOf();
		const sent: string[] = [];
		// A burst of 12 on one key, none finishing: every request counts in flight where it went.
		for (let i = 0; i < 12; i++) {
			const picked = pickRoute(nodes, { now: 0, random, affinityKey: KEY, loadFactor: 1.25 });
			if (!picked) throw new Error("no node");
			sent.push(`${picked.node.url}:${picked.route}`);
			picked.node.inFlight += 1;
		}
		const total = nodes.reduce((s, n) => s + n.inFlight, 0);
		for (const n of nodes) expect(n.inFlight).toBeLessThanOrEqual(Math.ceil((1.25 * total) / nodes.length));
		// The home node took the first ones, then the spill followed the fixed order.
		expect(sent[0]).toBe(`${nodes[0]?.url}:affinity`);
		const firstSpill = sent.find((s) => s.endsWith(":spill"));
		expect(firstSpill).toBe(`${nodes[1]?.url}:spill`);
		// The burst ends: the next request goes home again.
		for (const n of nodes) n.inFlight = 0;
		expect(pickRoute(nodes, { now: 0, random, affinityKey: KEY })).toMatchObject({ node: nodes[0], route: "affinity" });
	});

	it("counts the isolate's own in-flight requests when the engine's metrics read zero or stale", () => {
		const nodes = fleetOf();
		const home = nodes[0] as NodeView;
		// The engine's gauges lag: they still say idle while this isolate has 5 requests on the node.
		home.inFlight = 5;
		home.running = 0;
		home.waiting = 0;
		expect(affinityLoad(home)).toBe(5);
		expect(pickRoute(nodes, { now: 0, random, affinityKey: KEY })).toMatchObject({ node: nodes[1], route: "spill" });
		// And a busy engine (other isolates' requests) counts when it is the larger.
		home.inFlight = 0;
		home.running = 3;
		home.waiting = 2;
		expect(affinityLoad(home)).toBe(5);
		expect(pickRoute(nodes, { now: 0, random, affinityKey: KEY })?.route).toBe("spill");
	});

	it("takes a factor of 1 as the tightest bound and defaults a bad one to 1.25", () => {
		const nodes = fleetOf();
		(nodes[0] as NodeView).inFlight = 1;
		// total 1: bound ceil(1 × 2 / 4) = 1 → home is full; with 1.25: ceil(2.5 / 4) = 1 too; with 3: ceil(6/4) = 2.
		expect(pickRoute(nodes, { now: 0, random, affinityKey: KEY, loadFactor: 1 })?.route).toBe("spill");
		expect(pickRoute(nodes, { now: 0, random, affinityKey: KEY, loadFactor: 3 })?.route).toBe("affinity");
		expect(pickRoute(nodes, { now: 0, random, affinityKey: KEY, loadFactor: Number.NaN })?.route).toBe("spill");
	});

	it("is balanced without a key", () => {
		expect(pickRoute(fleetOf(), { now: 0, random })?.route).toBe("balanced");
	});
});

describe("Fleet: affinity counts per node", () => {
	it("counts served and spilled on the key's own node, and reads the engine's running count", () => {
		const fleet = new Fleet();
		const nodes: EngineNode[] = rendezvousOrder(
			KEY,
			["x", "y"].map((url) => ({ url, weight: 1 })),
		);
		const [home, next] = nodes as [EngineNode, EngineNode];
		expect(fleet.route("m", nodes, { now: 0, random, tried: new Set(), affinityKey: KEY })).toEqual({
			node: home,
			route: "affinity",
		});
		fleet.started(home.url);
		fleet.started(home.url);
		expect(fleet.route("m", nodes, { now: 0, random, tried: new Set(), affinityKey: KEY })).toEqual({
			node: next,
			route: "spill",
		});
		expect(fleet.runtime(home.url)).toMatchObject({ affinityServed: 1, affinitySpilled: 1 });
		expect(fleet.runtime(next.url)).toMatchObject({ affinityServed: 0, affinitySpilled: 0 });
	});
});
