/**
 * The engine fleet end to end: several nodes of the development engine over real HTTP, each a
 * named node whose behaviour and queue the test sets (dev/engine-nodes.mjs), behind a gateway
 * with the test's own config (test/support/fleet.ts). Spread, weights, hung and failing nodes,
 * recovery, engine load, affinity, max_attempts, the embeddings lane, and the operator's
 * /admin/nodes. Fallbacks across models are in fallbacks.test.ts.
 */
import { env } from "cloudflare:test";
import { beforeAll, describe, expect, it } from "vitest";
import {
	callsWith,
	errorOf,
	fleetConfig,
	gatewayWith,
	marker,
	model,
	type NodeRow,
	nodeUrl,
	perNode,
	rowsOf,
	setNode,
	waitForNode,
} from "../../support/fleet";
import { createKey, waitFor } from "../../support/gateway";
import { TEST_NODE_KEY } from "../../support/test-config";

let key: string;

beforeAll(async () => {
	key = (await createKey({ name: "routing", balance_usd: 100 })).key;
});

function user(text: string) {
	return [{ role: "user", content: text }];
}

/** `n` requests, `concurrency` at a time; every one must succeed. */
async function send(
	gw: ReturnType<typeof gatewayWith>,
	n: number,
	body: (i: number) => Record<string, unknown>,
	concurrency = 1,
) {
	for (let i = 0; i < n; i += concurrency) {
		const batch = Array.from({ length: Math.min(concurrency, n - i) }, (_, j) => gw.chat(key, body(i + j)));
		for (const a of await Promise.all(batch)) expect(a.res.status, a.text).toBe(200);
	}
}

describe("spread and weights", () => {
	it("spreads 60 requests over 3 equal nodes near 20 each", async () => {
		const t = marker("sp");
		const names = [`${t}a`, `${t}b`, `${t}c`];
		const gw = gatewayWith(fleetConfig([model("fleet", names.map(nodeUrl))]));
		const m = marker();
		// Distinct conversations: one conversation's turns share a node (prefix affinity).
		await send(gw, 60, (i) => ({ model: "fleet", messages: user(`${m} conversation ${i}`) }), 4);
		const c = perNode(await callsWith(m));
		expect(Object.values(c).reduce((a, b) => a + b, 0)).toBe(60);
		for (const n of names) {
			expect(c[n], JSON.stringify(c)).toBeGreaterThanOrEqual(8);
			expect(c[n], JSON.stringify(c)).toBeLessThanOrEqual(32);
		}
	});

	it("follows weights: 3:1 lands near 3:1", async () => {
		const t = marker("w");
		const gw = gatewayWith(fleetConfig([model("fleet", [{ url: nodeUrl(`${t}a`), weight: 3 }, nodeUrl(`${t}b`)])]));
		const m = marker();
		await send(gw, 80, (i) => ({ model: "fleet", messages: user(`${m} conversation ${i}`) }), 4);
		const c = perNode(await callsWith(m));
		expect(c[`${t}b`], JSON.stringify(c)).toBeGreaterThanOrEqual(8);
		expect(c[`${t}b`], JSON.stringify(c)).toBeLessThanOrEqual(32);
		expect(c[`${t}a`]).toBe(80 - (c[`${t}b`] ?? 0));
	});

	it("tries at most max_attempts nodes of a model", async () => {
		const t = marker("ma");
		const names = [`${t}a`, `${t}b`, `${t}c`, `${t}d`];
		// Connection failures are the nodes' own: each is tried (a 5xx would stop at the second).
		for (const n of names) await setNode(n, { scenario: "drop" });
		const gw = gatewayWith(fleetConfig([model("fleet", names.map(nodeUrl))]));
		const m = marker();
		const a = await gw.chat(key, { model: "fleet", messages: user(m) });
		expect(a.res.status).toBe(502);
		const calls = await callsWith(m);
		expect(calls).toHaveLength(3);
		expect(new Set(calls.map((c) => c.node)).size).toBe(3);
	});
});

describe("remembering sick nodes", () => {
	it("skips a hung node after one first-byte timeout", async () => {
		const t = marker("hg");
		await setNode(`${t}hang`, { scenario: "hang" });
		// The hung node's weight makes it the first pick of the first request.
		const config = fleetConfig([model("fleet", [{ url: nodeUrl(`${t}hang`), weight: 1000 }, nodeUrl(`${t}ok`)])]);
		const timeout = config.first_byte_timeout_ms;
		const gw = gatewayWith(config);
		const m = marker();
		const first = await gw.chat(key, { model: "fleet", messages: user(m) });
		expect(first.res.status).toBe(200);
		expect(first.ms).toBeGreaterThanOrEqual(timeout - 50);
		for (let i = 0; i < 6; i++) {
			const a = await gw.chat(key, { model: "fleet", messages: user(m) });
			expect(a.res.status).toBe(200);
			// Under the first-byte timeout: the hung node was not waited on again.
			expect(a.ms).toBeLessThan(timeout);
		}
		expect(perNode(await callsWith(m))).toEqual({ [`${t}hang`]: 1, [`${t}ok`]: 7 });
	});

	it("cools down a node that answered 500 to two requests another node served, for every later request", async () => {
		const t = marker("c5");
		await setNode(`${t}bad`, { scenario: "fail500" });
		const gw = gatewayWith(fleetConfig([model("fleet", [{ url: nodeUrl(`${t}bad`), weight: 1000 }, nodeUrl(`${t}ok`)])]));
		const m = marker();
		await send(gw, 9, () => ({ model: "fleet", messages: user(m) }));
		expect(perNode(await callsWith(m))).toEqual({ [`${t}bad`]: 2, [`${t}ok`]: 9 });
		const row = await waitForNode(gw, nodeUrl(`${t}bad`), () => true);
		expect(row).toMatchObject({ healthy: false, last_error: "status 500", weight: 1000 });
		expect(row.cooling_until).toBeGreaterThan(Date.now() / 1000);
	});

	it("cools no node for a request whose input makes every node answer 500: it stops at the second (502)", async () => {
		const t = marker("po");
		const names = [`${t}a`, `${t}b`, `${t}c`];
		for (const n of names) await setNode(n, { scenario: "poison" });
		// A timeout on a busy host would cool a node for its own reason: this test is about 500s.
		const gw = gatewayWith({
			...fleetConfig([model("fleet", names.map(nodeUrl), { fallbacks: ["spare"] }), model("spare", [nodeUrl(`${t}d`)])]),
			first_byte_timeout_ms: 10_000,
		});
		await setNode(`${t}d`, { scenario: "poison" });
		for (let i = 0; i < 4; i++) {
			const m = marker();
			const a = await gw.chat(key, { model: "fleet", messages: user(`POISON ${m}`) });
			expect(a.res.status, a.text).toBe(502);
			expect((await callsWith(m)).length).toBe(2);
		}
		const m = marker();
		// Thirty conversations (each its own prefix, so its own affinity): every node still takes some.
		await send(gw, 30, (i) => ({ model: "fleet", messages: user(`${m} conversation ${i}`) }));
		expect(Object.keys(perNode(await callsWith(m))).sort()).toEqual(names.sort());
		for (const n of names) {
			const row = await waitForNode(gw, nodeUrl(n), () => true);
			expect(row.cooling_until, n).toBeNull();
		}
	});

	it("gives a dead node traffic back within about one health-check interval once it recovers", async () => {
		const t = marker("rc");
		const dead = `${t}dead`;
		await setNode(dead, { scenario: "fail500" });
		// Probed by a NodeHealth of its own: only these two nodes, every 300 ms.
		const gw = gatewayWith(
			fleetConfig([model("fleet", [{ url: nodeUrl(dead), weight: 10 }, nodeUrl(`${t}ok`)])]),
			{},
			{
				ownNodeHealth: true,
			},
		);
		const m = marker();
		await send(gw, 3, () => ({ model: "fleet", messages: user(m) }));
		// The prober saw it fail too (its /health answers 500).
		await waitForNode(gw, nodeUrl(dead), (r) => r.checked_at !== null && !r.healthy && r.last_error !== null);
		const before = perNode(await callsWith(m))[dead] ?? 0;
		// Until the probe fails it, it cools on its second request's 500.
		expect(before).toBeLessThanOrEqual(2);
		await send(gw, 5, () => ({ model: "fleet", messages: user(m) }));
		expect(perNode(await callsWith(m))[dead] ?? 0).toBe(before);

		await setNode(dead, { scenario: "ok" });
		const m2 = marker();
		// Traffic until the node gets some back: a passing probe ends its 60-second cooldown, which
		// the wait's bound (a failing test's only) is well below.
		// Each with a prompt of its own: one prompt's prefix has one home node, which may be the other
		// (1 time in 11 at these weights), and would never show the recovered node any traffic.
		await waitFor(async () => {
			await send(gw, 1, () => ({ model: "fleet", messages: user(`${marker()} ${m2}`) }));
			return (perNode(await callsWith(m2))[dead] ?? 0) > 0;
		}, 20_000);
		const row = await waitForNode(gw, nodeUrl(dead), (r) => r.healthy);
		expect(row.cooling_until).toBeNull();
	}, 30_000);
});

describe("engine load and cache affinity", () => {
	it("sends almost nothing to a node whose engine reports a long queue while a peer has none", async () => {
		const t = marker("q");
		const queued = `${t}queued`;
		await setNode(queued, { queue: { waiting: 30, running: 16 } });
		// Timeouts no busy machine reaches (the probe's is half its interval, at most 2 s): a free node
		// that timed out would cool down and leave the queued one as the only choice, which is
		// failover, not this test.
		const gw = gatewayWith(
			{
				...fleetConfig([model("fleet", [nodeUrl(queued), nodeUrl(`${t}free`)])], { health_check_interval_ms: 4000 }),
				first_byte_timeout_ms: 15_000,
				stream_idle_timeout_ms: 15_000,
			},
			{},
			{ ownNodeHealth: true },
		);
		await send(gw, 1, () => ({ model: "fleet", messages: user("warm up") }));
		const row = await waitForNode(gw, nodeUrl(queued), (r) => r.engine_load?.waiting === 30);
		expect(row.engine_load).toMatchObject({ source: "vllm", waiting: 30, running: 16 });
		const m = marker();
		await send(gw, 20, () => ({ model: "fleet", messages: user(m) }), 2);
		const c = perNode(await callsWith(m));
		expect(c[queued] ?? 0, JSON.stringify(c)).toBeLessThanOrEqual(2);
		expect(c[`${t}free`]).toBeGreaterThanOrEqual(18);
	});

	it("keeps a prompt_cache_key (else a user) on one node, and spreads distinct users", async () => {
		const t = marker("af");
		const names = [`${t}a`, `${t}b`, `${t}c`];
		const gw = gatewayWith(fleetConfig([model("fleet", names.map(nodeUrl))]));
		const m1 = marker();
		// One turn after another, as a conversation goes: a burst of one key would spill (bounded load).
		await send(gw, 12, () => ({ model: "fleet", prompt_cache_key: `conv-${t}`, messages: user(m1) }));
		const conv = await callsWith(m1);
		expect(Object.keys(perNode(conv))).toHaveLength(1);
		for (const c of conv) expect(c.body?.prompt_cache_key).toBe(`conv-${t}`);
		const m2 = marker();
		await send(gw, 12, () => ({ model: "fleet", user: `alice-${t}`, messages: user(m2) }));
		expect(Object.keys(perNode(await callsWith(m2)))).toHaveLength(1);
		const m3 = marker();
		await send(gw, 24, (i) => ({ model: "fleet", user: `user-${t}-${i}`, messages: user(m3) }), 3);
		expect(Object.keys(perNode(await callsWith(m3))).length).toBeGreaterThanOrEqual(2);
	});
});

describe("the other lanes", () => {
	it("routes embeddings the same way: a failed node is remembered", async () => {
		const t = marker("em");
		await setNode(`${t}bad`, { scenario: "fail500" });
		const embed = model("embed", [{ url: nodeUrl(`${t}bad`), weight: 1000 }, nodeUrl(`${t}ok`)], {
			capabilities: ["embeddings"],
			max_output_tokens: undefined,
			pricing: { input_usd_per_mtok: 1 },
		});
		const gw = gatewayWith(fleetConfig([embed]));
		const m = marker();
		for (let i = 0; i < 4; i++) {
			const a = await gw.post(key, "/v1/embeddings", { model: "embed", input: `text ${m}` });
			expect(a.res.status, a.text).toBe(200);
		}
		expect(perNode(await callsWith(m))).toEqual({ [`${t}bad`]: 2, [`${t}ok`]: 4 });
	});

	it("routes Responses the same way", async () => {
		const t = marker("rs");
		await setNode(`${t}bad`, { scenario: "fail503" });
		const gw = gatewayWith(fleetConfig([model("fleet", [{ url: nodeUrl(`${t}bad`), weight: 1000 }, nodeUrl(`${t}ok`)])]));
		const m = marker();
		for (let i = 0; i < 3; i++) {
			const a = await gw.post(key, "/v1/responses", { model: "fleet", input: `hi ${m}`, store: false });
			expect(a.res.status, a.text).toBe(200);
		}
		expect(perNode(await callsWith(m))).toEqual({ [`${t}bad`]: 1, [`${t}ok`]: 3 });
	});
});

describe("/admin/nodes", () => {
	it("lists every node of every model, without secrets", async () => {
		const t = marker("ad");
		const gw = gatewayWith(
			fleetConfig([
				model("fleet", [{ url: nodeUrl(`${t}a`), api_key_env: "NODE_KEY", weight: 2 }, nodeUrl(`${t}b`)]),
				model("other", [nodeUrl(`${t}b`)]),
			]),
			{},
			{ ownNodeHealth: true },
		);
		const m = marker();
		await send(gw, 2, () => ({ model: "fleet", messages: user(m) }));
		const row = await waitForNode(gw, nodeUrl(`${t}a`), (r) => r.checked_at !== null);
		expect(row).toMatchObject({
			model: "fleet",
			weight: 2,
			configured_weight: 2,
			drained: false,
			healthy: true,
			cooling_until: null,
			in_flight: 0,
			last_error: null,
			override: null,
		});
		expect(row.engine_load).toMatchObject({ source: "vllm", waiting: 0 });
		const { json, text } = await gw.admin("/nodes");
		const rows = json?.data as NodeRow[];
		expect(rows.map((r) => [r.model, r.url])).toEqual([
			["fleet", nodeUrl(`${t}a`)],
			["fleet", nodeUrl(`${t}b`)],
			["other", nodeUrl(`${t}b`)],
		]);
		expect(rows.some((r) => r.latency_ms !== null)).toBe(true);
		expect(text).not.toContain(TEST_NODE_KEY);
		expect(text).not.toContain("NODE_KEY");
		// The prober sends the node's key like a real request: the engine saw it (counted, not recorded).
		expect((await gw.admin("/nodes", { headers: { authorization: "Bearer wrong" } })).res.status).toBe(401);
	});

	it("masks a node URL's query, fragment and credential-shaped path segments, and PATCH takes the shown URL", async () => {
		const t = marker("mq");
		const secret = `nodesecret${crypto.randomUUID().replaceAll("-", "")}`;
		const withQuery = `${nodeUrl(`${t}q`)}?token=${secret}`;
		const withPathKey = `${env.ENGINE_URL}/key/${secret}/n/${t}p/v1`;
		const gw = gatewayWith(fleetConfig([model("fleet", [withQuery, withPathKey])]));
		const listed = await gw.admin("/nodes");
		expect(listed.res.status).toBe(200);
		expect(listed.text).not.toContain(secret);
		expect(rowsOf(listed).map((r) => r.url)).toEqual([`${nodeUrl(`${t}q`)}?***`, `${env.ENGINE_URL}/key/***/n/${t}p/v1`]);
		const drained = await gw.admin("/nodes", {
			method: "PATCH",
			body: JSON.stringify({ url: `${nodeUrl(`${t}q`)}?***`, drain: true }),
		});
		expect(drained.res.status, drained.text).toBe(200);
		expect(rowsOf(drained)[0]).toMatchObject({ url: `${nodeUrl(`${t}q`)}?***`, drained: true });
		expect(drained.text).not.toContain(secret);
	});

	it("drains a node at runtime until the operator clears it, and sets weights", async () => {
		const t = marker("dr");
		const a = nodeUrl(`${t}a`);
		const gw = gatewayWith(fleetConfig([model("fleet", [{ url: a, weight: 1000 }, nodeUrl(`${t}b`)])]));
		const drained = await gw.admin("/nodes", { method: "PATCH", body: JSON.stringify({ url: a, drain: true }) });
		expect(drained.res.status, drained.text).toBe(200);
		expect(rowsOf(drained)[0]).toMatchObject({
			url: a,
			weight: 0,
			drained: true,
			override: { weight: null, drained: true },
		});
		const m = marker();
		await send(gw, 6, () => ({ model: "fleet", messages: user(m) }));
		expect(perNode(await callsWith(m))).toEqual({ [`${t}b`]: 6 });

		// A node-wide weight keeps the drain; undraining uses it.
		const patch = async (body: Record<string, unknown>) => {
			const r = await gw.admin("/nodes", { method: "PATCH", body: JSON.stringify({ url: a, ...body }) });
			expect(r.res.status, r.text).toBe(200);
			return rowsOf(r)[0];
		};
		expect(await patch({ weight: 5 })).toMatchObject({ weight: 0, drained: true, override: { weight: 5, drained: true } });
		expect(await patch({ drain: false })).toMatchObject({ weight: 5, drained: false, override: { weight: 5, drained: false } });
		// A model's own override wins over the node-wide one; clearing it falls back to the node-wide one.
		expect(await patch({ model: "fleet", weight: 0 })).toMatchObject({ weight: 0, drained: true });
		expect(await patch({ model: "fleet", clear: true })).toMatchObject({ weight: 5, override: { weight: 5 } });
		expect(await patch({ clear: true })).toMatchObject({ weight: 1000, drained: false, override: null });
		const m2 = marker();
		await send(gw, 4, () => ({ model: "fleet", messages: user(m2) }));
		expect(perNode(await callsWith(m2))[`${t}a`]).toBeGreaterThanOrEqual(3);
	});

	it("refuses an unknown node or model, and a PATCH that changes nothing", async () => {
		const t = marker("ax");
		const gw = gatewayWith(fleetConfig([model("fleet", [nodeUrl(`${t}a`)])]));
		const patch = (body: unknown) => gw.admin("/nodes", { method: "PATCH", body: JSON.stringify(body) });
		const unknown = await patch({ url: "http://nowhere.example/v1", drain: true });
		expect(unknown.res.status).toBe(404);
		expect(errorOf(unknown).param).toBe("url");
		const noModel = await patch({ url: nodeUrl(`${t}a`), model: "nope", drain: true });
		expect(noModel.res.status).toBe(404);
		expect(errorOf(noModel).param).toBe("model");
		expect((await patch({ url: nodeUrl(`${t}a`) })).res.status).toBe(400);
		expect((await patch({ url: nodeUrl(`${t}a`), weight: -1 })).res.status).toBe(400);
		expect((await patch({ url: nodeUrl(`${t}a`), clear: true, drain: false })).res.status).toBe(400);
	});
});
