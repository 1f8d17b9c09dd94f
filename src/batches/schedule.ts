/**
 * Where the next batch lines go (pure): only to a node with room, and each to the node that has
 * its prefix. A node has room when it is routable (not drained, cooling or failing its probe),
 * its engine reports no request waiting (nor a full KV cache or every slot busy: the next
 * request would queue), and fewer than `max_in_flight_per_node` requests run on it from this
 * dispatcher's isolate. Interactive requests never wait behind a line: a line never makes an
 * engine queue, and an engine with `priority: true` runs an interactive request first anyway.
 */

import { classify, type NodeView } from "../routing/picker";
import { prefixAffinityKey } from "../routing/prefix-affinity";
import { rendezvousOrder } from "../routing/rendezvous";

/** Free line slots on a node now (0: none). */
export function roomOn(n: NodeView, linesOnNode: number, maxInFlight: number, now: number): number {
	if (classify(n, now) !== "available") return 0;
	const full = n.kvCacheUsage >= 0.95 || (n.slots !== undefined && n.slots > 0 && (n.running ?? 0) >= n.slots);
	if (n.waiting > 0 || full) return 0;
	return Math.max(0, maxInFlight - Math.max(linesOnNode, n.inFlight));
}

/**
 * The group a line is dispatched with: its shared prefix (tools and system prompt, Responses'
 * instructions, a prompt's start), as llm-d's batch dispatcher sorts by system prompt. Lines of
 * a group run one after another, so the engine's prefix cache serves all but the first.
 */
export function prefixGroup(body: Record<string, unknown>): string {
	const system: unknown[] = [];
	if (Array.isArray(body.messages)) {
		for (const m of body.messages as Array<{ role?: unknown; content?: unknown }>) {
			if (m && (m.role === "system" || m.role === "developer")) system.push(m);
			else break;
		}
	}
	if (typeof body.instructions === "string") system.push({ role: "system", content: body.instructions });
	if (typeof body.system === "string" || Array.isArray(body.system)) system.push({ role: "system", content: body.system });
	if (system.length || body.tools !== undefined) {
		return prefixAffinityKey({ tools: body.tools, messages: [...system, { role: "user", content: "" }] }) ?? "";
	}
	const prompt = body.prompt ?? body.input;
	return prompt === undefined ? "" : (prefixAffinityKey({ prompt }) ?? "");
}

/** The group's home among the model's nodes (rendezvous order, as routing's affinity picks). */
export function homeNode<T extends { url: string; weight: number }>(group: string, nodes: readonly T[]): T | undefined {
	return group ? rendezvousOrder(group, nodes)[0] : undefined;
}
