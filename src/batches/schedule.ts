/**
 * Where the next batch lines go (pure): only to a node with room, and each to the node that has
 * its prefix. A node has room when it is routable (not drained, cooling or failing its probe),
 * its engine reports no request waiting (nor a full KV cache or every slot busy: the next
 * request would queue), and its lines and interactive requests together are fewer than its limit. Interactive requests never wait
 * behind a line: a line never makes an engine queue, and an engine with `priority: true` runs an
 * interactive request first anyway.
 *
 * The engine's gauges are read fresh: the dispatcher reads each node's `/metrics` itself, at most
 * every LOAD_READ_MS while it has lines to place (`LoadRead`), rather than trusting the health
 * check's copy, which is up to `health_check_interval_ms` (10 s) old. The gateway's own in-flight
 * counts are per isolate and the dispatcher's object sees none of them; the engine's `running`
 * gauge counts every isolate's requests and the dispatcher's lines, so `running` less the lines
 * it had there when it read is the interactive load, as of the read.
 */

import { classify, FULL_KV_CACHE, type NodeView } from "../routing/picker";
import { prefixAffinityKey } from "../routing/prefix-affinity";
import { rendezvousOrder } from "../routing/rendezvous";

/** How often the dispatcher reads a node's engine gauges itself while it has lines for the node (ms). */
export const LOAD_READ_MS = 1000;

/** Lines a node runs by default when its engine's capacity is not known (the node sets no `max_num_seqs`, reports no slots). */
export const DEFAULT_LINES_PER_NODE = 4;

/** Lines a node runs by default as a share of the sequences its engine runs at once (vLLM's `max_num_seqs` 256: 64). */
export const LINE_SHARE_OF_CAPACITY = 0.25;

/** The engine's gauges as the dispatcher last read them itself, and how many of its lines ran there then. */
export interface LoadRead {
	/** When it was read (ms). */
	at: number;
	waiting: number;
	running: number;
	kvCacheUsage: number;
	/** The dispatcher's lines on the node when it read: the engine's `running` counts them. */
	lines: number;
}

/** Whether the node's gauges should be read again before lines are placed on it. */
export function loadIsStale(read: LoadRead | undefined, now: number): boolean {
	return read === undefined || now - read.at >= LOAD_READ_MS;
}

/**
 * How many lines a node may run: `batches.max_in_flight_per_node` when the config sets it, else a
 * quarter of the sequences its engine runs at once (`capacity`: the node's `max_num_seqs`, else
 * the slots llama.cpp reports), at least one, else DEFAULT_LINES_PER_NODE.
 */
export function lineLimit(configured: number | undefined, capacity: number | undefined): number {
	if (configured !== undefined) return configured;
	if (capacity !== undefined && capacity > 0) return Math.max(1, Math.floor(capacity * LINE_SHARE_OF_CAPACITY));
	return DEFAULT_LINES_PER_NODE;
}

/** The node's view with its engine's gauges replaced by a read fresher than the health check's. */
function withRead(n: NodeView, read: LoadRead | undefined): NodeView {
	if (!read) return n;
	return { ...n, waiting: read.waiting, running: read.running, kvCacheUsage: read.kvCacheUsage };
}

/**
 * Interactive requests the engine runs: its `running` gauge less the dispatcher's lines it counted
 * (those on the node when the gauge was read).
 */
export function interactiveOn(n: NodeView, lines: number, read?: LoadRead): number {
	return Math.max(0, (read ? read.running : (n.running ?? 0)) - (read ? read.lines : lines));
}

/**
 * Free line slots on a node now (0: none). `lines` are the dispatcher's lines on it, `limit` its
 * lineLimit, `read` the dispatcher's own read of its gauges when it has one (else the health
 * check's, in `n`). The limit counts the node's interactive requests too: lines and interactive
 * requests together stay under it, so a node busy with interactive traffic takes fewer lines
 * (every sequence in a step makes the step, and so every interactive first token, longer) and an
 * idle one up to `limit`.
 */
export function roomOn(n: NodeView, lines: number, limit: number, now: number, read?: LoadRead): number {
	const v = withRead(n, read);
	if (classify(v, now) !== "available") return 0;
	const full = v.kvCacheUsage >= FULL_KV_CACHE || (v.slots !== undefined && v.slots > 0 && (v.running ?? 0) >= v.slots);
	if (v.waiting > 0 || full) return 0;
	return Math.max(0, limit - Math.max(lines, n.inFlight) - interactiveOn(v, lines, read));
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
