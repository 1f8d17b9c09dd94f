/**
 * Prompt-cache economics (issue 26, billing): cached prompt tokens are read from every engine
 * (vLLM's `prompt_tokens_details.cached_tokens`, llama.cpp's `timings.cache_n`), bounded, billed
 * at `cached_input_usd_per_mtok`, shown to the client in each API's own field, kept on the usage
 * record and in the rollups, and per node in /admin/nodes.
 *
 * Prices: $1/Mtok in (1,000 nano$/token), $0.1/Mtok cached (100), $2/Mtok out (2,000). The message
 * below is 40 characters: the dev engine counts ceil(40/4) = 10 prompt tokens, half of them cached.
 */
import { env } from "cloudflare:test";
import { beforeAll, describe, expect, it } from "vitest";
import { fleetConfig, gatewayWith, marker, model, ownEngineUrl, requestIdOf } from "../../support/fleet";
import { createKey } from "../../support/gateway";
import { flushUsage, ledger } from "../../support/ledger";

const engine = ownEngineUrl("cached-tokens");
const node = (scenario: string) => `${engine}/s/${scenario}/v1`;
const PRICING = { input_usd_per_mtok: 1, output_usd_per_mtok: 2, cached_input_usd_per_mtok: 0.1 };
const gateway = gatewayWith(
	fleetConfig([
		model("vllm", [node("cached")], { pricing: PRICING, capabilities: ["reasoning"] }),
		model("llama", [node("cachedllama")], { pricing: PRICING }),
		model("liar", [node("overcached")], { pricing: PRICING }),
		model("full-price", [node("cached")]),
	]),
);

type Json = Record<string, unknown>;
let key: { id: string; key: string };

beforeAll(async () => {
	key = await createKey({ balance_usd: 10 });
});

/** 40 characters: 10 prompt tokens for the dev engine, 5 of them cached. */
function prompt(): string {
	return `cache ${marker()}`.padEnd(40, "x");
}

async function record(requestId: string) {
	const row = await env.DB.prepare(
		"SELECT prompt_tokens, completion_tokens, cached_tokens, cost_nanos, estimated FROM usage_records WHERE request_id = ?",
	)
		.bind(requestId)
		.first<{ prompt_tokens: number; completion_tokens: number; cached_tokens: number; cost_nanos: number; estimated: number }>();
	return row;
}

async function settledRecord(requestId: string) {
	await flushUsage(ledger(key.id));
	const row = await record(requestId);
	if (!row) throw new Error(`no usage record for ${requestId}`);
	return row;
}

describe("cached prompt tokens", () => {
	it("bills (prompt − cached) × input + cached × cached_input + completion × output, and shows them (vLLM)", async () => {
		const a = await gateway.chat(key.key, { model: "vllm", messages: [{ role: "user", content: prompt() }] });
		expect(a.res.status, a.text).toBe(200);
		const usage = a.json?.usage as Json;
		expect(usage).toMatchObject({ prompt_tokens: 10, prompt_tokens_details: { cached_tokens: 5 } });
		const completion = usage.completion_tokens as number;
		const cost = 5 * 1000 + 5 * 100 + completion * 2000;
		expect(a.res.headers.get("x-venym-cost-usd")).toBe(String(cost / 1e9));
		const row = await settledRecord(requestIdOf(a));
		expect(row).toMatchObject({ prompt_tokens: 10, cached_tokens: 5, cost_nanos: cost, estimated: 0 });
	});

	it("reads llama.cpp's timings.cache_n, on a stream too", async () => {
		const a = await gateway.chat(key.key, { model: "llama", stream: true, messages: [{ role: "user", content: prompt() }] });
		expect(a.res.status).toBe(200);
		const usageChunk = a.text
			.split("\n\n")
			.filter((f) => f.startsWith("data: {"))
			.map((f) => JSON.parse(f.slice(6)) as Json)
			.find((c) => c.usage && (c.choices as unknown[]).length === 0);
		expect(usageChunk?.usage).toMatchObject({ prompt_tokens: 10, prompt_tokens_details: { cached_tokens: 5 } });
		const row = await settledRecord(requestIdOf(a));
		expect(row.cached_tokens).toBe(5);
		expect(row.cost_nanos).toBe(5 * 1000 + 5 * 100 + row.completion_tokens * 2000);
	});

	it("bills the full input price without a cached price, and counts the hits all the same", async () => {
		const a = await gateway.chat(key.key, { model: "full-price", messages: [{ role: "user", content: prompt() }] });
		const row = await settledRecord(requestIdOf(a));
		expect(row).toMatchObject({ cached_tokens: 5, cost_nanos: 10 * 1000 + row.completion_tokens * 2000 });
	});

	it("takes an engine's cached count only within the prompt: more is 0 and marked estimated", async () => {
		const a = await gateway.chat(key.key, { model: "liar", messages: [{ role: "user", content: prompt() }] });
		expect(a.res.status).toBe(200);
		expect((a.json?.usage as Json | undefined)?.prompt_tokens_details).toMatchObject({ cached_tokens: 0 });
		const row = await settledRecord(requestIdOf(a));
		expect(row).toMatchObject({ cached_tokens: 0, estimated: 1, cost_nanos: 10 * 1000 + row.completion_tokens * 2000 });
	});

	it("shows them as Responses input_tokens_details and Anthropic cache_read_input_tokens", async () => {
		const r = await gateway.post(key.key, "/v1/responses", { model: "vllm", input: prompt(), store: false });
		expect(r.res.status, r.text).toBe(200);
		expect((r.json?.usage as Json | undefined)?.input_tokens_details).toMatchObject({ cached_tokens: 5 });
		const m = await gateway.post(key.key, "/v1/messages", {
			model: "vllm",
			max_tokens: 50,
			messages: [{ role: "user", content: prompt() }],
		});
		expect(m.res.status, m.text).toBe(200);
		expect(m.json?.usage).toMatchObject({ input_tokens: 5, cache_read_input_tokens: 5, cache_creation_input_tokens: 0 });
	});

	it("lists the cached-input price in /v1/models, the input price when none is set", async () => {
		const list = gatewayWith(
			fleetConfig([model("vllm", [node("cached")], { pricing: PRICING }), model("plain", [node("cached")])]),
		);
		const res = (await list.get(key.key, "/v1/models")).json as { data: Array<{ id: string; pricing: Json }> };
		const byId = Object.fromEntries(res.data.map((m) => [m.id, m.pricing]));
		expect(byId.vllm).toMatchObject({ input_usd_per_mtok: 1, cached_input_usd_per_mtok: 0.1 });
		expect(byId.plain).toMatchObject({ input_usd_per_mtok: 1, cached_input_usd_per_mtok: 1 });
	});

	it("rolls cached tokens up for the usage summary, with the hit rate", async () => {
		const k = await createKey({ balance_usd: 1 });
		for (let i = 0; i < 2; i++) {
			const a = await gateway.chat(k.key, { model: "vllm", messages: [{ role: "user", content: prompt() }] });
			expect(a.res.status).toBe(200);
		}
		await flushUsage(ledger(k.id));
		const s = await gateway.admin(`/usage/summary?key_id=${k.id}&group_by=model`, { method: "GET" });
		expect(s.res.status, s.text).toBe(200);
		const [row] = (s.json?.data ?? []) as Json[];
		expect(row).toMatchObject({ model: "vllm", prompt_tokens: 20, cached_tokens: 10, cache_hit_rate: 0.5 });
	});

	it("shows each node's cache hit rate in /admin/nodes", async () => {
		await gateway.chat(key.key, { model: "vllm", messages: [{ role: "user", content: prompt() }] });
		const nodes = await gateway.admin("/nodes", { method: "GET" });
		const rows = (nodes.json?.data ?? []) as Json[];
		const row = rows.find((r) => r.model === "vllm");
		expect(row?.cache_hit_rate).toBe(0.5);
	});
});
