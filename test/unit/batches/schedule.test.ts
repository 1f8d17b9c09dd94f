// The batch lane's admission rule (src/batches/schedule.ts): how many lines a node may run, on
// which gauges, and how its interactive requests count against the limit.
import { describe, expect, it } from "vitest";
import {
	DEFAULT_LINES_PER_NODE,
	interactiveOn,
	LOAD_READ_MS,
	type LoadRead,
	lineLimit,
	loadIsStale,
	roomOn,
} from "../../../src/batches/schedule";
import { modelNodes, parseConfig } from "../../../src/config";
import type { NodeView } from "../../../src/routing/picker";

const node = (over: Partial<NodeView> = {}): NodeView => ({
	url: "http://n/v1",
	weight: 1,
	inFlight: 0,
	coolingUntil: 0,
	failedAt: 0,
	healthy: true,
	waiting: 0,
	kvCacheUsage: 0,
	...over,
});

const read = (over: Partial<LoadRead> = {}): LoadRead => ({
	at: 1000,
	waiting: 0,
	running: 0,
	kvCacheUsage: 0,
	lines: 0,
	...over,
});

describe("lineLimit", () => {
	it("is the configured limit whatever the engine's capacity", () => {
		expect(lineLimit(4, 256)).toBe(4);
		expect(lineLimit(200, 8)).toBe(200);
	});

	it("is a quarter of the engine's capacity when the config sets none, at least one", () => {
		expect(lineLimit(undefined, 256)).toBe(64);
		expect(lineLimit(undefined, 1024)).toBe(256);
		expect(lineLimit(undefined, 4)).toBe(1);
		expect(lineLimit(undefined, 1)).toBe(1);
	});

	it("is the old default of 4 when the capacity is not known", () => {
		expect(lineLimit(undefined, undefined)).toBe(DEFAULT_LINES_PER_NODE);
		expect(lineLimit(undefined, 0)).toBe(DEFAULT_LINES_PER_NODE);
		expect(DEFAULT_LINES_PER_NODE).toBe(4);
	});

	it("reads max_num_seqs from a node's config, and leaves max_in_flight_per_node unset by default", () => {
		const config = parseConfig({
			models: [
				{
					id: "m",
					engine_model: "m",
					max_output_tokens: 10,
					pricing: { input_usd_per_mtok: 1, output_usd_per_mtok: 1 },
					nodes: [{ url: "http://a/v1", max_num_seqs: 256 }, "http://b/v1"],
				},
			],
		});
		expect(config.batches.max_in_flight_per_node).toBeUndefined();
		const [a, b] = modelNodes(config.models[0] as never);
		expect(lineLimit(config.batches.max_in_flight_per_node, a?.maxNumSeqs)).toBe(64);
		expect(lineLimit(config.batches.max_in_flight_per_node, b?.maxNumSeqs)).toBe(4);
		expect(() => parseConfig({ ...config, batches: { max_in_flight_per_node: 0 }, models: config.models })).toThrow(
			/max_in_flight_per_node/,
		);
	});
});

describe("loadIsStale", () => {
	it("asks for a read when there is none or the last is LOAD_READ_MS old", () => {
		expect(loadIsStale(undefined, 5000)).toBe(true);
		expect(loadIsStale(read({ at: 5000 }), 5000 + LOAD_READ_MS - 1)).toBe(false);
		expect(loadIsStale(read({ at: 5000 }), 5000 + LOAD_READ_MS)).toBe(true);
	});
});

describe("roomOn", () => {
	it("keeps lines and interactive requests together under the limit", () => {
		// 64 lines a node: an idle engine takes 64, one running 50 interactive requests 14.
		expect(roomOn(node(), 0, 64, 1000, read())).toBe(64);
		expect(roomOn(node(), 0, 64, 1000, read({ running: 50 }))).toBe(14);
		// The lines the engine counted are not interactive: 10 lines and 50 interactive, 4 more.
		expect(roomOn(node(), 10, 64, 1000, read({ running: 60, lines: 10 }))).toBe(4);
		// A node as busy with interactive requests as the limit takes none.
		expect(roomOn(node(), 0, 64, 1000, read({ running: 70 }))).toBe(0);
	});

	it("places lines on the dispatcher's own read, not the health check's older gauges", () => {
		// The health check saw a queue; the engine, read since, has none: lines go.
		expect(roomOn(node({ waiting: 5, running: 60 }), 0, 8, 1000, read())).toBe(8);
		// The health check saw nothing waiting; the engine, read since, queues: no line.
		expect(roomOn(node(), 0, 8, 1000, read({ waiting: 1 }))).toBe(0);
		expect(roomOn(node(), 0, 8, 1000, read({ kvCacheUsage: 0.96 }))).toBe(0);
		expect(roomOn(node({ slots: 4 }), 0, 8, 1000, read({ running: 4 }))).toBe(0);
	});

	it("without a read of its own, counts the health check's running requests less its lines", () => {
		expect(roomOn(node({ running: 3 }), 0, 4, 1000)).toBe(1);
		expect(roomOn(node({ running: 3 }), 3, 4, 1000)).toBe(1);
		expect(interactiveOn(node({ running: 3 }), 3)).toBe(0);
		expect(interactiveOn(node({ running: 3 }), 0, read({ running: 9, lines: 2 }))).toBe(7);
	});

	it("gives an unroutable node nothing, whatever its gauges say", () => {
		expect(roomOn(node({ coolingUntil: 2000 }), 0, 4, 1000, read())).toBe(0);
		expect(roomOn(node({ weight: 0 }), 0, 4, 1000, read())).toBe(0);
		expect(roomOn(node({ healthy: false }), 0, 4, 1000, read())).toBe(0);
	});

	it("counts the lines this isolate has in flight on the node when more than the dispatcher's", () => {
		expect(roomOn(node({ inFlight: 3 }), 1, 4, 1000, read())).toBe(1);
	});
});
