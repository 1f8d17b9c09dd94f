/**
 * Attack findings (session h9) on the merged issue 22/23 tree, against a gateway with a config of
 * its own in front of the development engine. Each test states the contract it expects and failed
 * on the tree it was written against (see the report for each reproduction).
 */
import { beforeAll, describe, expect, it } from "vitest";
import { fleetConfig, gatewayWith, marker, model, ownEngineUrl, requestIdOf, usageRecord } from "../support/fleet";
import { createKey } from "../support/gateway";

const engine = ownEngineUrl("attack-h9");
const node = (scenario?: string) => (scenario ? `${engine}/s/${scenario}/v1` : `${engine}/v1`);

type Json = Record<string, unknown>;
const TOOLS = [
	{ type: "function", function: { name: "lookup", parameters: { type: "object", properties: { query: { type: "string" } } } } },
];

let key: string;
beforeAll(async () => {
	key = (await createKey({ balance_usd: 10 })).key;
});

describe("attack: web search and tool-call repair on one non-stream answer", () => {
	const gateway = gatewayWith({
		...fleetConfig([model("broken", [node("brokentool")], { tool_call_repair: true, capabilities: ["tools", "web_search"] })]),
		web_search: { provider: "searxng", url: `${engine}/search`, price_usd_per_search: 0.005, timeout_ms: 1500 },
	});

	it("keeps venym.tool_calls_repaired next to venym.sources", async () => {
		// The answer step (chat/chat-answer.ts) sets body.venym = {tool_calls_repaired}, then attachSources() replaced body.venym
		// with {sources}: the repair count is lost whenever :online (or venym.web_search) ran.
		const a = await gateway.chat(key, {
			model: "broken:online",
			tools: TOOLS,
			messages: [{ role: "user", content: `find ${marker()}` }],
		});
		expect(a.res.status).toBe(200);
		const venym = a.json?.venym as Json | undefined;
		expect(Array.isArray(venym?.sources)).toBe(true);
		expect(venym?.tool_calls_repaired).toBe(1);
	});
});

describe("attack: an in-band error before the first token", () => {
	const gateway = gatewayWith(fleetConfig([model("e200", [node("error200"), node()])], { max_attempts: 2 }));

	for (const stream of [false, true]) {
		it(`fails over to the healthy node (${stream ? "stream" : "non-stream"}): nothing but headers reached the client`, async () => {
			// The error200 node answers 200 and an error body before any token (vLLM's "model is loading").
			// isFirstToken() counts any non-chunk event as the first token, so the node is taken, the
			// client gets a 502 (or an error frame), the node never cools and the next request picks it again.
			const statuses: string[] = [];
			for (let i = 0; i < 8; i++) {
				const a = await gateway.chat(key, {
					model: "e200",
					stream,
					user: `u${i}-${marker()}`,
					messages: [{ role: "user", content: `hi ${marker()}` }],
				});
				statuses.push(`${a.res.status}${a.text.includes('"error"') ? " error" : ""}`);
			}
			expect(statuses.join(",")).toBe(Array(8).fill("200").join(","));
		});
	}
});

describe("attack: a non-stream answer over the size cap", () => {
	const gateway = gatewayWith(fleetConfig([model("big", [node()], { context_length: 10_000_000, max_output_tokens: 10_000 })]));

	it("bills what the engine processed when the assembled answer outgrows MAX_ASSEMBLED_CHARS", async () => {
		// The dev engine echoes the prompt's words, in every one of n (≤ 8) choices: 1,100 words of
		// 1,000 characters × n = 8 is 8.8 M characters, over the 8 Mi cap. The gateway answers 502
		// and settles NO_USAGE: the ~275k-token prompt and 8,800 generated tokens cost nothing, so a
		// client can burn prefill and decode for free by asking for more than the cap (large n, long output).
		const word = "a".repeat(999);
		const prompt = `${marker()} ${Array(1100).fill(word).join(" ")}`;
		const a = await gateway.chat(key, { model: "big", n: 8, messages: [{ role: "user", content: prompt }] });
		expect(a.res.status).toBe(502);
		const record = await usageRecord(requestIdOf(a));
		expect(record.prompt_tokens).toBeGreaterThan(0);
		expect(record.cost_nanos).toBeGreaterThan(0);
	});
});

describe("attack: web search asked for on the embeddings lane", () => {
	const gateway = gatewayWith(fleetConfig([model("embed", [node()], { capabilities: ["embeddings"] })]));

	it("refuses venym.web_search as it refuses :online (no search runs, none is charged)", async () => {
		// `model: "embed:online"` is a 400, but `venym: {web_search: true}` is accepted and ignored.
		const a = await gateway.post(key, "/v1/embeddings", { model: "embed", input: "hi", venym: { web_search: true } });
		expect(a.res.status).toBe(400);
		expect((a.json?.error as Json | undefined)?.param).toMatch(/^venym/);
	});
});
