/**
 * Engine calls with failover: the router picks the order (src/routing/picker.ts); 5xx, 429,
 * dropped connections and first-byte timeouts move on and are remembered, an engine's 4xx
 * refusal goes back to the client untouched and is never retried. A `prompt_cache_key` pins
 * the order here: with one, nodes are tried in their rendezvous order for that key.
 * (test/integration/routing/routing.test.ts covers spread, weights, recovery, load and fallbacks.)
 *
 * The first test needs nodes that have never failed, so the file routes the test catalog over an
 * engine tenant of its own: other files (in the same workerd under `npm run test:unit`) fail the
 * same scenarios on env.ENGINE_URL's nodes, and the isolate and the NodeHealth object remember.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { rendezvousScore } from "../../../src/routing/rendezvous";
import { errorOf, fleetConfig, gatewayWith, model, ownEngineUrl } from "../../support/fleet";
import { createKey, type EngineRequest, engineRequests, waitFor } from "../../support/gateway";
import { testGatewayConfig } from "../../support/test-config";

type Json = Record<string, unknown>;

const engineUrl = ownEngineUrl("failover");
const gateway = gatewayWith(testGatewayConfig(engineUrl));

let key: string;

beforeAll(async () => {
	key = (await createKey({ name: "failover", balance_usd: 100 })).key;
});

function marker(): string {
	return `m${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
}

/** This test's engine calls (found by a marker in the prompt), in the order they were made. */
async function callsWith(m: string): Promise<EngineRequest[]> {
	return (await engineRequests({ contains: m }, engineUrl))
		.filter((r) => r.path.endsWith("/chat/completions") && JSON.stringify(r.body).includes(m))
		.sort((a, b) => a.id - b.id);
}

function user(text: string) {
	return [{ role: "user", content: text }];
}

const FAILOVER_NODES = ["fail500", "drop", "fail429", "hang", "fail503", "ok"];

/** The order an affinity key tries a model's nodes in: highest rendezvous score first. */
function rendezvousOrder(key: string, scenarios: string[]): string[] {
	const score = (s: string) => rendezvousScore(key, `${engineUrl}/s/${s}/v1`, 1);
	return [...scenarios].sort((a, b) => score(b) - score(a));
}

/** A prompt_cache_key whose order satisfies `want`. */
function keyWhere(scenarios: string[], want: (order: string[]) => boolean): { key: string; order: string[] } {
	for (let i = 0; i < 10_000; i++) {
		const order = rendezvousOrder(`k${i}`, scenarios);
		if (want(order)) return { key: `k${i}`, order };
	}
	throw new Error("no such key");
}

describe("failover", () => {
	it("reaches the healthy node after a 500, a dropped connection, a 429, a hang and a 503", async () => {
		// The healthy node last in this key's order: every broken node is tried once first.
		const pinned = keyWhere(FAILOVER_NODES, (o) => o.at(-1) === "ok");
		const m = marker();
		const { res, text, json, ms } = await gateway.chat(key, {
			model: "test/failover",
			prompt_cache_key: pinned.key,
			messages: user(`hi ${m}`),
		});
		expect(res.status, text).toBe(200);
		const body = json as Json;
		expect(body.model).toBe("test/failover");
		expect((body.choices as Array<{ message: { content: string } }>)[0]!.message.content).toBe(`Echo: hi ${m}`);
		// The hanging node costs the first-byte timeout (2000 ms in the test config), not more.
		expect(ms).toBeGreaterThanOrEqual(1900);
		expect(ms).toBeLessThan(10_000);

		const calls = await callsWith(m);
		expect(calls.map((c) => c.scenario)).toEqual(pinned.order);
		for (const c of calls) {
			expect(c.body?.model).toBe("engine-failover");
			// prompt_cache_key is OpenAI's own field: it reaches the engine (vLLM and SGLang cache prefixes by it).
			expect(c.body?.prompt_cache_key).toBe(pinned.key);
		}
		// The gateway walked away from the hanging node.
		const hang = await waitFor(async () => {
			const h = (await callsWith(m)).find((c) => c.scenario === "hang");
			return h?.aborted && h;
		});
		expect(hang.aborted).toBe(true);
	});

	it("remembers the broken nodes: the next requests, streams, go straight to the healthy one and end cleanly", async () => {
		// A 500 may be the request's: the 500 node cools on a second request's 500 (docs/fleet-routing.md "What cools
		// a node"), so it is tried on at most one of these; the others are out since the first request.
		let tried500 = 0;
		for (let i = 0; i < 4; i++) {
			const m = marker();
			const { res, text, ms } = await gateway.chat(key, { model: "test/failover", stream: true, messages: user(`hi ${m}`) });
			expect(res.status).toBe(200);
			expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true);
			expect(text).not.toContain('"error"');
			const calls = (await callsWith(m)).map((c) => c.scenario);
			tried500 += calls.filter((s) => s === "fail500").length;
			expect(calls.filter((s) => s !== "fail500")).toEqual(["ok"]);
			expect(ms).toBeLessThan(900);
		}
		expect(tried500).toBeLessThanOrEqual(1);
	});

	const bad400First = keyWhere(["bad400", "ok"], (o) => o[0] === "bad400").key;

	it("returns an engine's 400 with its message and param, without trying the next node", async () => {
		const m = marker();
		const a = await gateway.chat(key, { model: "test/bad400", prompt_cache_key: bad400First, messages: user(`hi ${m}`) });
		expect(a.res.status).toBe(400);
		const error = errorOf(a);
		expect(error.message).toBe("This model's maximum context length is 4096 tokens");
		expect(error.param).toBe("messages");
		expect(typeof error.type).toBe("string");
		expect(error).toHaveProperty("code");
		// The gateway answered without a retry; it makes no engine call after answering.
		expect((await callsWith(m)).map((c) => c.scenario)).toEqual(["bad400"]);
	});

	it("returns a streamed request's engine 400 as an HTTP 400 too, and a refusal does not cool the node", async () => {
		const m = marker();
		const a = await gateway.chat(key, {
			model: "test/bad400",
			stream: true,
			prompt_cache_key: bad400First,
			messages: user(`hi ${m}`),
		});
		expect(a.res.status).toBe(400);
		expect(errorOf(a).message).toBe("This model's maximum context length is 4096 tokens");
		expect((await callsWith(m)).map((c) => c.scenario)).toEqual(["bad400"]);
	});

	it("passes a flat (vLLM-shaped) 400's message through", async () => {
		const m = marker();
		const a = await gateway.chat(key, { model: "test/flat400", messages: user(`hi ${m}`) });
		expect(a.res.status).toBe(400);
		const error = errorOf(a);
		expect(error.message).toBe("flat: bad temperature");
		expect(Object.keys(error).sort()).toEqual(["code", "message", "param", "type"]);
	});

	it("answers 502 upstream_unavailable when every node is broken, trying each (cooling or not) once", async () => {
		const m = marker();
		const a = await gateway.chat(key, { model: "test/all-down", messages: user(`hi ${m}`) });
		expect(a.res.status).toBe(502);
		const error = errorOf(a);
		expect(error.code).toBe("upstream_unavailable");
		expect(error.type).toBe("server_error");
		expect(typeof error.message).toBe("string");
		// The engine's own error text stays out of the client's answer.
		expect(error.message).not.toContain("engine exploded");
		expect((await callsWith(m)).map((c) => c.scenario).sort()).toEqual(["drop", "fail500"]);
	});

	it("answers 503 upstream_unavailable with Retry-After when every node is busy", async () => {
		const m = marker();
		const a = await gateway.chat(key, { model: "test/all-busy", messages: user(`hi ${m}`) });
		expect(a.res.status).toBe(503);
		expect(a.res.headers.get("retry-after")).toBe("1");
		expect(errorOf(a).code).toBe("upstream_unavailable");
		expect((await callsWith(m)).map((c) => c.scenario).sort()).toEqual(["fail429", "fail503"]);
	});

	it("answers a stream whose nodes all fail with an HTTP error, not an event stream", async () => {
		const m = marker();
		const a = await gateway.chat(key, { model: "test/all-down", stream: true, messages: user(`hi ${m}`) });
		expect(a.res.status).toBe(502);
		expect(a.res.headers.get("content-type")).toMatch(/application\/json/);
		expect(errorOf(a).code).toBe("upstream_unavailable");
	});

	it("never sends the client's key to any node it tries", async () => {
		const m = marker();
		await gateway.chat(key, { model: "test/all-down", messages: user(`hi ${m}`) });
		await gateway.chat(key, { model: "test/failover", messages: user(`hi ${m}`) });
		const calls = await callsWith(m);
		expect(calls.length).toBeGreaterThanOrEqual(3);
		for (const c of calls) {
			expect(JSON.stringify(c.headers)).not.toContain(key);
			expect(c.headers.authorization).toBeUndefined();
		}
	});
});

describe("an in-band error before the first token", () => {
	const engine = ownEngineUrl("failover-error200");
	const node = (scenario?: string) => (scenario ? `${engine}/s/${scenario}/v1` : `${engine}/v1`);
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
