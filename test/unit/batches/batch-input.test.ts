import { describe, expect, it } from "vitest";
import { BatchInputCheck } from "../../../src/batches/input";
import { jsonlLines, LineTooLong } from "../../../src/batches/jsonl";
import { batchPricedConfig } from "../../../src/batches/price";
import { prefixGroup, roomOn } from "../../../src/batches/schedule";
import { parseConfig } from "../../../src/config";
import { costNanos } from "../../../src/money/pricing";
import type { NodeView } from "../../../src/routing/picker";

function streamOf(...chunks: string[]): ReadableStream<Uint8Array> {
	const enc = new TextEncoder();
	return new ReadableStream({
		start(ctl) {
			for (const c of chunks) ctl.enqueue(enc.encode(c));
			ctl.close();
		},
	});
}

async function collect(stream: ReadableStream<Uint8Array>, max = 1000) {
	const out: Array<[number, string]> = [];
	for await (const { text, n } of jsonlLines(stream, max)) out.push([n, text]);
	return out;
}

describe("jsonlLines", () => {
	it("splits lines across chunks, CRLF and a multibyte character split mid-chunk, the last line without a newline", async () => {
		const euro = new TextEncoder().encode("€");
		const raw = new ReadableStream<Uint8Array>({
			start(ctl) {
				ctl.enqueue(new TextEncoder().encode('{"a":1}\r\n{"b":"'));
				ctl.enqueue(euro.slice(0, 1));
				ctl.enqueue(euro.slice(1));
				ctl.enqueue(new TextEncoder().encode('"}\n\n{"c":3}'));
				ctl.close();
			},
		});
		expect(await collect(raw)).toEqual([
			[1, '{"a":1}'],
			[2, '{"b":"€"}'],
			[3, ""],
			[4, '{"c":3}'],
		]);
	});

	it("stops at a line over the bound, naming it", async () => {
		await expect(collect(streamOf("short\n", "x".repeat(50), "y".repeat(60), "\n"), 100)).rejects.toEqual(
			new LineTooLong(2, 100),
		);
	});
});

describe("BatchInputCheck", () => {
	const line = (custom_id: string, body: Record<string, unknown>, url = "/v1/chat/completions") =>
		JSON.stringify({ custom_id, method: "POST", url, body });

	it("accepts lines of one model and names each fault by its line number", () => {
		const check = new BatchInputCheck("/v1/chat/completions");
		const lines = [
			line("a", { model: "m", messages: [] }),
			"{oops",
			line("a", { model: "m" }),
			line("b", { model: "m" }, "/v1/embeddings"),
			line("c", { model: "other" }),
			"",
			line("d", { messages: [] }),
			line("e", { model: "m" }),
		];
		const ok = lines.map((t, i) => check.line(t, i + 1)).filter(Boolean);
		expect(ok.map((l) => l?.customId)).toEqual(["a", "e"]);
		expect(check.end().map((e) => [e.line, e.code])).toEqual([
			[2, "invalid_json_line"],
			[3, "duplicate_custom_id"],
			[4, "mismatched_endpoint"],
			[5, "mismatched_model"],
			[7, "missing_required_parameter"],
		]);
		expect(check.model).toBe("m");
	});

	it("refuses an empty file", () => {
		const check = new BatchInputCheck("/v1/embeddings");
		check.line("  ", 1);
		expect(check.end()).toEqual([expect.objectContaining({ code: "empty_file" })]);
	});
});

describe("batchPricedConfig", () => {
	const config = parseConfig({
		models: [
			{
				id: "a",
				engine_model: "a",
				nodes: ["http://n/v1"],
				max_output_tokens: 10,
				pricing: { input_usd_per_mtok: 1, output_usd_per_mtok: 3 },
			},
			{
				id: "b",
				engine_model: "b",
				nodes: ["http://n/v1"],
				max_output_tokens: 10,
				pricing: { input_usd_per_mtok: 2, output_usd_per_mtok: 4, batch_multiplier: 0.25 },
			},
		],
		batches: { price_multiplier: 0.5 },
	});

	it("prices each model at its batch multiplier, the config's default otherwise", () => {
		const priced = batchPricedConfig(config);
		expect(priced.models.map((m) => m.pricing)).toEqual([
			{ input_usd_per_mtok: 0.5, output_usd_per_mtok: 1.5 },
			{ input_usd_per_mtok: 0.5, output_usd_per_mtok: 1, batch_multiplier: 0.25 },
		]);
		// The same nano-dollars as the interactive price times the multiplier.
		const [a] = priced.models;
		expect(costNanos(a?.pricing as never, 1234, 567)).toBe(Math.round((1234 * 1000 + 567 * 3000) / 2));
		expect(batchPricedConfig(config)).toBe(priced);
	});

	it("defaults the batches block", () => {
		expect(config.batches).toEqual({
			enabled: true,
			price_multiplier: 0.5,
			max_file_bytes: 100 * 1024 * 1024,
			retention_days: 30,
		});
	});
});

describe("schedule", () => {
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

	it("gives a node room only while its engine queues nothing and it runs fewer lines than the cap", () => {
		expect(roomOn(node(), 0, 4, 1000)).toBe(4);
		expect(roomOn(node(), 3, 4, 1000)).toBe(1);
		expect(roomOn(node({ inFlight: 4 }), 0, 4, 1000)).toBe(0);
		expect(roomOn(node({ waiting: 1 }), 0, 4, 1000)).toBe(0);
		expect(roomOn(node({ kvCacheUsage: 0.97 }), 0, 4, 1000)).toBe(0);
		expect(roomOn(node({ slots: 2, running: 2 }), 0, 4, 1000)).toBe(0);
		expect(roomOn(node({ coolingUntil: 2000 }), 0, 4, 1000)).toBe(0);
		expect(roomOn(node({ weight: 0 }), 0, 4, 1000)).toBe(0);
	});

	it("groups lines by their system prompt and tools, not their user message", () => {
		const sys = (s: string, u: string) => ({
			messages: [
				{ role: "system", content: s },
				{ role: "user", content: u },
			],
		});
		expect(prefixGroup(sys("grade this", "essay 1"))).toBe(prefixGroup(sys("grade this", "essay 2")));
		expect(prefixGroup(sys("grade this", "essay 1"))).not.toBe(prefixGroup(sys("summarize", "essay 1")));
		expect(prefixGroup({ input: "a", instructions: "x" })).toBe(prefixGroup({ input: "b", instructions: "x" }));
		expect(prefixGroup({ input: "embed me" })).not.toBe("");
	});
});
