/**
 * The settlement object (src/settlement/settlement.ts) attacked through every lane: clients that
 * leave at random points on /v1/messages, /v1/completions, /v1/embeddings and /v1/responses,
 * engines that fail at every point, an engine that keeps its stream open after `[DONE]`, and
 * background responses cancelled and deleted while they run. Held throughout: one usage record
 * per request that held money, the records add up to the debits, nothing stays held, and the
 * engine nodes' in-flight counts return to 0.
 */
import { createExecutionContext, env, runInDurableObject, waitOnExecutionContext } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import worker from "../../../src/index";
import type { ResponseStore } from "../../../src/responses/response-store";
import { isolateFleet } from "../../../src/routing/fleet";
import { callsWith, fleetConfig, gatewayWith, marker, model, nodeUrl, setNode, waitForNode } from "../../support/fleet";
import { BASE, createKey, gw, waitFor } from "../../support/gateway";
import { expectBooks, usageRows } from "../../support/ledger";

beforeAll(() => {
	vi.spyOn(console, "log").mockImplementation(() => {});
	vi.spyOn(console, "warn").mockImplementation(() => {});
	vi.spyOn(console, "error").mockImplementation(() => {});
});
afterAll(() => vi.restoreAllMocks());

const CREDIT = 50_000_000_000;
/** A scenario node of this file's engine tenant, as testGatewayConfig names it. */
const node = (scenario?: string) => (scenario ? `${env.ENGINE_URL}/s/${scenario}/v1` : `${env.ENGINE_URL}/v1`);

/** The worker with `config`, called with a client signal; the answer is not read here. */
function direct(config: unknown) {
	const bindings = { ...env, GATEWAY_CONFIG: JSON.stringify(config) };
	return (path: string, key: string, body: unknown, signal?: AbortSignal) => {
		const ctx = createExecutionContext();
		const req = new Request(`${BASE}${path}`, {
			method: "POST",
			headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
			body: JSON.stringify(body),
			signal,
		}) as Request<unknown, IncomingRequestCfProperties>;
		return { answer: Promise.resolve(worker.fetch(req, bindings, ctx)), ctx };
	};
}

async function expectNodesIdle(urls: string[]) {
	await waitFor(async () => urls.every((u) => isolateFleet.runtime(u).inFlight === 0), 3000).catch(() => null);
	expect(Object.fromEntries(urls.map((u) => [u, isolateFleet.runtime(u).inFlight]))).toEqual(
		Object.fromEntries(urls.map((u) => [u, 0])),
	);
}

describe("a client that leaves while the engine works on its request", () => {
	it("pays the prompt estimate on the embeddings lane, as it does on chat (the engine read the input)", async () => {
		const t = marker("eh");
		await setNode(`${t}e`, { scenario: "hang" });
		await setNode(`${t}c`, { scenario: "hang" });
		const config = fleetConfig([
			model("emb", [nodeUrl(`${t}e`)], {
				capabilities: ["embeddings"],
				max_output_tokens: undefined,
				pricing: { input_usd_per_mtok: 1 },
			}),
			model("chat", [nodeUrl(`${t}c`)]),
		]);
		// Long enough that the client leaves well within the first-byte timeout.
		const call = direct({ ...config, first_byte_timeout_ms: 5000 });
		const k = await createKey({ balance_usd: CREDIT / 1e9 });
		const text = `${t} ${"lorem ipsum ".repeat(200)}`;
		for (const [path, body] of [
			["/v1/embeddings", { model: "emb", input: [text, text] }],
			["/v1/chat/completions", { model: "chat", messages: [{ role: "user", content: text }], max_tokens: 4 }],
		] as const) {
			const client = new AbortController();
			const before = (await callsWith(t)).length;
			const { answer, ctx } = call(path, k.key, body, client.signal);
			// The engine has the request: it is working on it when the client goes.
			await waitFor(async () => (await callsWith(t)).length > before);
			client.abort();
			await answer.then((r) => r.body?.cancel()).catch(() => undefined);
			await waitOnExecutionContext(ctx);
		}
		const { rows } = await expectBooks(k.id, CREDIT);
		expect(rows.map((r) => r.status)).toEqual(["client_disconnected", "client_disconnected"]);
		// Each pays its prompt's estimate: the engine was asked, and may have done the work.
		for (const r of rows) expect(r.cost_nanos).toBeGreaterThan(0);
	});

	it("pays the prompt estimate on the embeddings lane when it leaves while the answer is read", async () => {
		const k = await createKey({ balance_usd: CREDIT / 1e9 });
		const call = direct(JSON.parse(env.GATEWAY_CONFIG));
		// Many inputs: the engine's answer is large enough to be read in pieces.
		const t = marker("er");
		const inputs = Array.from({ length: 1000 }, (_, i) => `${t} input ${i} ${"x".repeat(40)}`);
		let settledBeforeAnswer = 0;
		for (let i = 0; i < 12; i++) {
			const client = new AbortController();
			const { answer, ctx } = call(
				"/v1/embeddings",
				k.key,
				{ model: "test/embed", input: inputs, dimensions: 512 },
				client.signal,
			);
			setTimeout(() => client.abort(), 5 + i * 4);
			const res = await answer.catch(() => null);
			if (res) await res.body?.cancel().catch(() => undefined);
			await waitOnExecutionContext(ctx);
			if (res?.status !== 200) settledBeforeAnswer++;
		}
		const { rows } = await expectBooks(k.id, CREDIT);
		// Every request that reached the engine paid for its input (one that left before any engine was asked pays nothing).
		const calls = await callsWith(t);
		expect(calls.length).toBeGreaterThan(0);
		expect(rows.filter((r) => r.cost_nanos > 0).length).toBeGreaterThanOrEqual(calls.length);
		expect(settledBeforeAnswer).toBeGreaterThan(0);
	});
});

describe("a client that leaves before any engine is asked", () => {
	it("pays nothing: no engine read its prompt (chat, Messages, embeddings)", async () => {
		const t = marker("nb");
		const call = direct(JSON.parse(env.GATEWAY_CONFIG));
		const k = await createKey({ balance_usd: CREDIT / 1e9 });
		const lanes = [
			[
				"/v1/chat/completions",
				(i: number) => ({ model: "test/ok", max_tokens: 4, messages: [{ role: "user", content: `${t} ${i}` }] }),
			],
			["/v1/messages", (i: number) => ({ model: "test/ok", max_tokens: 4, messages: [{ role: "user", content: `${t} ${i}` }] })],
			["/v1/embeddings", (i: number) => ({ model: "test/embed", input: `${t} ${i}` })],
		] as const;
		await Promise.all(
			Array.from({ length: 60 }, async (_, i) => {
				const [path, body] = lanes[i % lanes.length] as (typeof lanes)[number];
				const client = new AbortController();
				const { answer, ctx } = call(path, k.key, body(i), client.signal);
				// Gone at once, or a moment later: many while their hold is being placed.
				if (i % 4 === 0) client.abort();
				else setTimeout(() => client.abort(), i % 7);
				await answer.then((r) => r.body?.cancel()).catch(() => undefined);
				await waitOnExecutionContext(ctx);
			}),
		);
		const { rows } = await expectBooks(k.id, CREDIT);
		const charged = rows.filter((r) => r.cost_nanos > 0);
		// Each engine call is one request: a request charged without one paid for work nobody did.
		const calls = await callsWith(t);
		expect(rows.length).toBeGreaterThan(calls.length);
		expect(charged.length).toBeLessThanOrEqual(calls.length);
	});
});

describe("an engine that keeps its stream open after [DONE]", () => {
	for (const stream of [true, false]) {
		it(`answers, bills and frees the node (${stream ? "stream" : "non-stream"})`, async () => {
			const t = marker("do");
			await setNode(`${t}d`, { scenario: "doneopen" });
			const gateway = gatewayWith(fleetConfig([model("done", [nodeUrl(`${t}d`)])]));
			const k = await createKey({ balance_usd: 1 });
			const answers = await Promise.all(
				Array.from({ length: 4 }, () =>
					gateway.chat(k.key, { model: "done", stream, messages: [{ role: "user", content: "hi" }], max_tokens: 8 }),
				),
			);
			for (const a of answers) {
				expect(a.res.status, a.text).toBe(200);
				expect(a.text).toContain("Hello there");
				// The body's end is read for at most DRAIN_MS, not until the engine closes it.
				expect(a.ms).toBeLessThan(1500);
			}
			const { rows } = await expectBooks(k.id, 1e9);
			expect(rows.map((r) => r.status)).toEqual(["completed", "completed", "completed", "completed"]);
			await waitForNode(gateway, nodeUrl(`${t}d`), (r) => r.in_flight === 0, 3000);
		});
	}
});

type Leave = "never" | "headers" | "first" | number;

/** One request on `path` whose client leaves as `leave` says. */
async function hostile(path: string, key: string, body: Record<string, unknown>, leave: Leave, i: number) {
	const client = new AbortController();
	const timer = typeof leave === "number" ? setTimeout(() => client.abort(), leave) : undefined;
	try {
		const res = await gw(path, {
			method: "POST",
			headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
			body: JSON.stringify(body),
			signal: client.signal,
		});
		if (leave === "headers") client.abort();
		else if (leave === "first" && res.body) {
			const reader = res.body.getReader();
			await reader.read();
			if (i % 2) await reader.cancel().catch(() => undefined);
			client.abort();
		} else await res.text();
		clearTimeout(timer);
		return res.status;
	} catch {
		return 0;
	}
}

describe("every lane, clients leaving at random points, engines failing at every point", () => {
	// The second key is large enough to be served from edge allowances (docs/allowances.md).
	for (const credit of [CREDIT, 300_000 * 1e9])
		it(`settles each held request once; the records add up to the debits; the nodes go idle ($${credit / 1e9})`, async () => {
			const k = await createKey({ balance_usd: credit / 1e9 });
			const msg = (model: string, stream: boolean, i: number) => ({
				model,
				stream,
				max_tokens: 8,
				messages: [{ role: "user", content: `lane walk ${i}` }],
			});
			const resp = (model: string, stream: boolean, i: number) => ({
				model,
				stream,
				store: i % 3 !== 0,
				input: `lane walk ${i}`,
				max_output_tokens: 16,
			});
			const legacy = (model: string, stream: boolean, i: number) => ({ model, stream, prompt: `lane walk ${i}`, max_tokens: 8 });
			const kinds: Array<[string, (i: number) => Record<string, unknown>, Leave]> = [
				["/v1/messages", (i) => msg("test/slow", true, i), "first"],
				["/v1/messages", (i) => msg("test/slow", false, i), 60],
				["/v1/messages", (i) => msg("test/midstream", true, i), "never"],
				["/v1/messages", (i) => msg("test/cut", false, i), "never"],
				["/v1/messages", (i) => msg("test/stall", true, i), "first"],
				["/v1/messages", (i) => msg("test/error200", true, i), "never"],
				["/v1/responses", (i) => resp("test/slow", true, i), "first"],
				["/v1/responses", (i) => resp("test/slow", false, i), 40],
				["/v1/responses", (i) => resp("test/midstream", true, i), "never"],
				["/v1/responses", (i) => resp("test/stall", false, i), 200],
				["/v1/responses", (i) => resp("test/failover", true, i), "headers"],
				["/v1/completions", (i) => legacy("test/slow", true, i), "first"],
				["/v1/completions", (i) => legacy("test/cut", true, i), "never"],
				["/v1/completions", (i) => legacy("test/slowbody", false, i), 150],
				["/v1/embeddings", (i) => ({ model: "test/embed", input: `lane walk ${i}` }), 3],
			];
			const statuses = await Promise.all(
				Array.from({ length: 90 }, (_, i) => {
					const [path, body, leave] = kinds[i % kinds.length] as (typeof kinds)[number];
					return hostile(path, k.key, body(i), leave, i);
				}),
			);
			expect(statuses.filter((s) => s === 200).length).toBeGreaterThan(20);
			const { rows } = await expectBooks(k.id, credit, 20_000);
			expect(rows.length).toBeGreaterThan(60);
			await expectNodesIdle(
				[
					"",
					"slow",
					"midstream",
					"cut",
					"stall",
					"error200",
					"slowbody",
					"fail500",
					"drop",
					"fail429",
					"hang",
					"fail503",
					"ok",
				].map((s) => node(s || undefined)),
			);
		});
});

function store(keyId: string): DurableObjectStub<ResponseStore> {
	return env.RESPONSES.get(env.RESPONSES.idFromName(keyId)) as DurableObjectStub<ResponseStore>;
}

async function statusOf(keyId: string, id: string): Promise<string | undefined> {
	return runInDurableObject(store(keyId), (instance) => (instance.get(id) as { status?: string } | null)?.status);
}

describe("background responses cancelled and deleted while they wait or run", () => {
	it("hold nothing once the dust settles, and bill only what ran", async () => {
		const k = await createKey({ balance_usd: CREDIT / 1e9 });
		const auth = { authorization: `Bearer ${k.key}`, "content-type": "application/json" };
		const ids = await Promise.all(
			Array.from({ length: 8 }, async (_, i) => {
				const res = await gw("/v1/responses", {
					method: "POST",
					headers: auth,
					body: JSON.stringify({ model: "test/slow", input: `bg ${i}`, max_output_tokens: 20, background: true }),
				});
				expect(res.status).toBe(200);
				return ((await res.json()) as { id: string }).id;
			}),
		);
		// Cancel some, delete others, at once and again a moment later (some then run, some still wait).
		const hit = (id: string, i: number) =>
			i % 2
				? gw(`/v1/responses/${id}/cancel`, { method: "POST", headers: auth }).then((r) => r.text())
				: gw(`/v1/responses/${id}`, { method: "DELETE", headers: auth }).then((r) => r.text());
		await Promise.all(ids.slice(0, 4).map(hit));
		await new Promise((r) => setTimeout(r, 150));
		await Promise.all(ids.slice(4).map((id, i) => hit(id, i + 4)));
		await Promise.all(ids.map((id, i) => hit(id, i)));
		await waitFor(async () => {
			const s = await Promise.all(ids.map((id) => statusOf(k.id, id)));
			return s.every((x) => x !== "queued" && x !== "in_progress");
		}, 20_000);
		const { rows } = await expectBooks(k.id, CREDIT, 20_000);
		for (const r of rows) expect(["client_disconnected", "completed"]).toContain(r.status);
		expect(await usageRows(k.id)).toHaveLength(rows.length);
	});
});

describe("the node's in-flight count after every kind of ending", () => {
	it("returns to 0 after first-token failover, idle timeouts, mid-stream failures and clients leaving", async () => {
		const t = marker("if");
		const scenarios = { mute: "mute", e200: "error200", stall: "stall", mid: "midstream", cut: "cut", slow: "slow", ok: "ok" };
		for (const [name, scenario] of Object.entries(scenarios)) await setNode(`${t}${name}`, { scenario });
		const url = (name: string) => nodeUrl(`${t}${name}`);
		// The first node always tried first (weight), the next one serving.
		const first = (a: string, b: string) => [
			{ url: url(a), weight: 1000 },
			{ url: url(b), weight: 1 },
		];
		const config = fleetConfig([
			model("mute", first("mute", "ok")),
			model("e200", first("e200", "ok")),
			model("stall", [url("stall")]),
			model("mid", [url("mid")]),
			model("cut", [url("cut")]),
			model("slow", [url("slow")]),
		]);
		const call = direct({ ...config, first_byte_timeout_ms: 400, stream_idle_timeout_ms: 400 });
		const k = await createKey({ balance_usd: CREDIT / 1e9 });
		const runs = ["mute", "e200", "stall", "mid", "cut", "slow"].flatMap((m) =>
			[true, false].flatMap((stream) =>
				(["never", "first", 30] as Leave[]).map(async (leave, i) => {
					const client = new AbortController();
					const timer = typeof leave === "number" ? setTimeout(() => client.abort(), leave) : undefined;
					const body = { model: m, stream, max_tokens: 12, messages: [{ role: "user", content: `inflight ${i}` }] };
					const { answer, ctx } = call("/v1/chat/completions", k.key, body, client.signal);
					try {
						const res = await answer;
						if (leave === "first" && res.body) {
							const reader = res.body.getReader();
							await reader.read();
							client.abort();
							await reader.cancel().catch(() => undefined);
						} else await res.text();
					} catch {
						// The client left.
					}
					clearTimeout(timer);
					await waitOnExecutionContext(ctx);
				}),
			),
		);
		await Promise.all(runs);
		await expectBooks(k.id, CREDIT);
		await expectNodesIdle(Object.keys(scenarios).map(url));
	});
});

describe("a browser token's spend cap under concurrency on every lane", () => {
	it("holds within one request's hold, with clients leaving at random points", async () => {
		const APP = "https://app.example";
		const parent = await createKey({ balance_usd: CREDIT / 1e9 });
		const mint = await gw("/v1/tokens", {
			method: "POST",
			headers: { authorization: `Bearer ${parent.key}`, "content-type": "application/json" },
			body: JSON.stringify({ allowed_origins: [APP], spend_limit_usd: 0.004 }),
		});
		const token = ((await mint.json()) as { token: string }).token;
		const msg = { max_tokens: 8, messages: [{ role: "user", content: "capped" }] };
		const kinds: Array<[string, Record<string, unknown>, Leave]> = [
			["/v1/chat/completions", { model: "test/slow", stream: true, ...msg }, "first"],
			["/v1/messages", { model: "test/slow", ...msg }, 40],
			["/v1/responses", { model: "test/slow", input: "capped", max_output_tokens: 16, store: false }, "never"],
			["/v1/completions", { model: "test/slow", prompt: "capped", max_tokens: 8 }, "never"],
			["/v1/embeddings", { model: "test/embed", input: "capped" }, 2],
		];
		const statuses: number[] = [];
		for (let wave = 0; wave < 4; wave++) {
			statuses.push(
				...(await Promise.all(
					Array.from({ length: 15 }, (_, i) => {
						const [path, body, leave] = kinds[i % kinds.length] as (typeof kinds)[number];
						const client = new AbortController();
						const timer = typeof leave === "number" ? setTimeout(() => client.abort(), leave) : undefined;
						return gw(path, {
							method: "POST",
							headers: { authorization: `Bearer ${token}`, "content-type": "application/json", origin: APP },
							body: JSON.stringify(body),
							signal: client.signal,
						})
							.then(async (res) => {
								if (leave === "first" && res.body) {
									await res.body.getReader().read();
									client.abort();
								} else await res.text();
								clearTimeout(timer);
								return res.status;
							})
							.catch(() => 0);
					}),
				)),
			);
		}
		expect(statuses.filter((s) => s === 403).length).toBeGreaterThan(10);
		const { charged } = await expectBooks(parent.id, CREDIT);
		// The largest hold here: a chat prompt's billing bound (estimate + 1,024 template tokens) and 16 output tokens.
		const oneHold = 1_100_000;
		expect(charged).toBeLessThanOrEqual(4_000_000 + oneHold);
	});
});

describe("an embeddings answer over the size cap", () => {
	it("is a 502, and the input the engine embedded at the client's asking is billed (as chat bills an oversized answer)", async () => {
		const k = await createKey({ balance_usd: 1 });
		// 64 inputs of 16,384 dimensions each: about 9 MB of numbers, over the 8 MiB the gateway reads.
		const input = Array.from({ length: 64 }, (_, i) => `oversized ${i}`);
		const res = await gw("/v1/embeddings", {
			method: "POST",
			headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
			body: JSON.stringify({ model: "test/embed", input, dimensions: 16_384 }),
		});
		expect(res.status).toBe(502);
		await res.text();
		const { rows } = await expectBooks(k.id, 1e9);
		expect(rows).toHaveLength(1);
		expect(rows[0]?.status).toBe("engine_error");
		expect(rows[0]?.cost_nanos).toBeGreaterThan(0);
	});
});

describe("background responses on a balance they drain while queued", () => {
	it("admit what the balance holds, refuse the rest with 402, and settle every queued run exactly", async () => {
		const credit = 3_500_000;
		const k = await createKey({ balance_usd: credit / 1e9 });
		const auth = { authorization: `Bearer ${k.key}`, "content-type": "application/json" };
		const post = (body: Record<string, unknown>) =>
			gw("/v1/responses", { method: "POST", headers: auth, body: JSON.stringify(body) });
		const queued = await Promise.all(
			Array.from({ length: 8 }, (_, i) =>
				post({ model: "test/slow", input: `drain ${i}`, max_output_tokens: 20, background: true }),
			),
		);
		const statuses = queued.map((r) => r.status);
		expect(statuses.filter((s) => s === 200).length).toBeGreaterThan(0);
		expect(statuses.filter((s) => s === 402).length).toBeGreaterThan(0);
		const ids = await Promise.all(
			queued.map(async (r) => {
				if (r.status === 200) return ((await r.json()) as { id: string }).id;
				await r.text();
				return null;
			}),
		);
		// While they wait or run, the balance is held: a synchronous request is refused too.
		expect((await post({ model: "test/ok", input: "sync", max_output_tokens: 20, store: false })).status).toBe(402);
		const final = await waitFor(async () => {
			const s = await Promise.all(ids.filter((id) => id !== null).map((id) => statusOf(k.id, id as string)));
			return s.every((x) => x !== "queued" && x !== "in_progress") ? s : null;
		}, 8000).catch(async () => Promise.all(ids.filter((id) => id !== null).map((id) => statusOf(k.id, id as string))));
		// test/slow says more than 20 tokens: each run ends at its cap.
		for (const s of final) expect(["completed", "incomplete"]).toContain(s);
		const { rows, info } = await expectBooks(k.id, credit, 8000);
		expect(rows).toHaveLength(ids.filter((id) => id !== null).length);
		for (const r of rows) expect(r.status).toBe("completed");
		// Admission asks for a positive balance, not the whole hold: overspend is at most one hold.
		expect(info.balanceNanos).toBeGreaterThan(-1_100_000);
	});
});
