import { afterEach, describe, expect, it, vi } from "vitest";
import type { EngineNode } from "../../../src/config";
import { callEngine } from "../../../src/engine/call-engine";
import type { EngineCall, EngineTarget } from "../../../src/engine/call-types";
import { GatewayError, toErrorResponse } from "../../../src/errors";
import { Fleet } from "../../../src/routing/fleet";
import { EngineEventReader } from "../../../src/stream/engine-events";

type Behaviour = "ok" | "hang" | "drop" | number;

interface Call {
	url: string;
	body: string;
	auth: string | null;
}

/** A fake fetch: each node (by base URL) behaves as told; every call is recorded. */
function fakeFetch(behaviours: Record<string, Behaviour>, calls: Call[]): typeof fetch {
	return (async (input: RequestInfo | URL, init?: RequestInit) => {
		const url = String(input);
		const base = url.replace(/\/(chat\/completions|embeddings)$/, "");
		const headers = new Headers(init?.headers);
		calls.push({ url: base, body: String(init?.body), auth: headers.get("authorization") });
		const b = behaviours[base] ?? "ok";
		if (b === "drop") throw new TypeError("fetch failed: connection refused");
		if (b === "hang") {
			return new Promise<Response>((_, reject) => {
				init?.signal?.addEventListener("abort", () => reject(init.signal?.reason), { once: true });
			});
		}
		if (b === "ok") return new Response(JSON.stringify({ from: base }), { status: 200 });
		return new Response(JSON.stringify({ error: { message: `status ${b} from ${base}`, param: "messages" } }), { status: b });
	}) as typeof fetch;
}

function nodes(...urls: string[]): EngineNode[] {
	return urls.map((url) => ({ url, weight: 1 }));
}

afterEach(() => {
	vi.useRealTimers();
});

function setup(behaviours: Record<string, Behaviour>, settings = { cooldown_ms: 10_000, max_attempts: 3 }) {
	const calls: Call[] = [];
	const fleet = new Fleet();
	vi.useFakeTimers({ toFake: ["Date"], now: 1_000 });
	let seed = 0;
	const run = (targets: EngineTarget[], extra: Partial<EngineCall> = {}) =>
		callEngine({
			targets,
			path: "/chat/completions",
			secrets: { NODE_KEY: "secret-1" },
			firstByteTimeoutMs: 30,
			fetch: fakeFetch(behaviours, calls),
			routing: {
				settings,
				fleet,
				// Walks the nodes in order: 0, 0.34, 0.67, … so the first pick is predictable.
				random: () => ((seed++ % 3) / 3 + 0.01) % 1,
			},
			...extra,
		});
	return {
		calls,
		fleet,
		run,
		advance: (ms: number) => vi.setSystemTime(Date.now() + ms),
	};
}

async function failureOf(p: Promise<unknown>): Promise<{ status: number; code: string | null; headers: Record<string, string> }> {
	try {
		await p;
	} catch (err) {
		expect(err).toBeInstanceOf(GatewayError);
		const r = toErrorResponse(err);
		return { status: r.status, code: r.body.error.code, headers: r.headers };
	}
	throw new Error("expected the call to fail");
}

describe("callEngine", () => {
	it("tries at most max_attempts nodes of a model", async () => {
		const t = setup({ "http://a": 503, "http://b": 503, "http://c": 503, "http://d": 503, "http://e": 503 });
		const f = await failureOf(
			t.run([{ model: "m", nodes: nodes("http://a", "http://b", "http://c", "http://d", "http://e"), body: "{}" }]),
		);
		expect(f.status).toBe(503);
		expect(t.calls).toHaveLength(3);
		expect(new Set(t.calls.map((c) => c.url)).size).toBe(3);
	});

	it("stops a request at its second 5xx answer and cools neither node: the request may be the cause", async () => {
		const t = setup({ "http://a": 500, "http://b": 500, "http://c": 500, "http://d": 500 });
		const target = { model: "m", nodes: nodes("http://a", "http://b", "http://c"), body: "{}" };
		const fallback = { model: "f", nodes: nodes("http://d"), body: "{}" };
		for (let i = 0; i < 4; i++) {
			t.calls.length = 0;
			expect((await failureOf(t.run([target, fallback]))).status).toBe(502);
			expect(t.calls).toHaveLength(2);
		}
		for (const url of ["http://a", "http://b", "http://c", "http://d"]) expect(t.fleet.runtime(url).coolingUntil).toBe(0);
	});

	it("cools a node on 5xx answers to two different requests that other nodes served, not on one request's", async () => {
		const t = setup({ "http://a": 500 });
		const target = { model: "m", nodes: nodes("http://a", "http://b"), body: "{}" };
		const first = await t.run([target]);
		expect(first.node).toBe("http://b");
		await readToEnd(first);
		expect(t.fleet.runtime("http://a").coolingUntil).toBe(0);
		// The picker walks the nodes in order: the next request tries a first again.
		for (let i = 0; i < 5; i++) await readToEnd(await t.run([target]));
		expect(t.calls.filter((c) => c.url === "http://a")).toHaveLength(2);
		expect(t.fleet.runtime("http://a").coolingUntil).toBe(1_000 + 10_000);
	});

	it("never blames the node when the client left, even if the connection broke before the client's signal fired", async () => {
		const client = new AbortController();
		const t = setup({});
		const target = { model: "m", nodes: nodes("http://a", "http://b"), body: "{}" };
		// workerd's order when a client goes: the subrequest fails first, the request's signal fires after.
		const fetchLost = (async () => {
			setTimeout(() => client.abort(new Error("client gone")), 0);
			throw new Error("Network connection lost.");
		}) as typeof fetch;
		const f = await failureOf(t.run([target], { fetch: fetchLost, clientSignal: client.signal }));
		expect(f.status).toBe(499);
		expect(f.code).toBe("client_closed_request");
		for (const url of ["http://a", "http://b"]) {
			expect(t.fleet.runtime(url).coolingUntil).toBe(0);
			expect(t.fleet.runtime(url).inFlight).toBe(0);
		}
	});

	it("remembers a failed node: the next request skips it while it cools down", async () => {
		const t = setup({ "http://a": "drop" });
		const target = { model: "m", nodes: nodes("http://a", "http://b"), body: "{}" };
		for (let i = 0; i < 6; i++) {
			const answer = await t.run([target]);
			expect(answer.node).toBe("http://b");
			await readToEnd(answer);
		}
		expect(t.calls.filter((c) => c.url === "http://a")).toHaveLength(1);
		expect(t.fleet.runtime("http://a").lastError).toBe("connection failed");
		// After the cooldown it is tried again (and fails again: now cooled for twice as long).
		t.advance(10_001);
		t.calls.length = 0;
		for (let i = 0; i < 3; i++) await readToEnd(await t.run([target]));
		expect(t.calls.filter((c) => c.url === "http://a")).toHaveLength(1);
		expect(t.fleet.runtime("http://a").coolingUntil).toBe(1_000 + 10_001 + 20_000);
	});

	it("skips a hung node after one first-byte timeout", async () => {
		const t = setup({ "http://hang": "hang" });
		const target = { model: "m", nodes: nodes("http://hang", "http://ok"), body: "{}" };
		for (let i = 0; i < 5; i++) expect((await t.run([target])).node).toBe("http://ok");
		expect(t.calls.filter((c) => c.url === "http://hang").length).toBeLessThanOrEqual(1);
	});

	it("tries a cooling node rather than failing without trying", async () => {
		const t = setup({ "http://a": "drop" });
		const target = { model: "m", nodes: nodes("http://a"), body: "{}" };
		expect((await failureOf(t.run([target]))).status).toBe(502);
		expect((await failureOf(t.run([target]))).status).toBe(502);
		expect(t.calls).toHaveLength(2);
	});

	it("returns an engine's 4xx refusal without retrying, cooling or falling back", async () => {
		const t = setup({ "http://a": 400 });
		const fallback = vi_fn();
		const err = await failureOf(
			t.run([
				{ model: "m", nodes: nodes("http://a", "http://b"), body: "{}" },
				{ model: "f", nodes: nodes("http://f"), body: fallback.fn },
			]),
		);
		expect(err.status).toBe(400);
		expect(t.calls.map((c) => c.url)).toEqual(["http://a"]);
		expect(fallback.calls).toBe(0);
		expect(t.fleet.runtime("http://a").coolingUntil).toBe(0);
	});

	it("falls back to the next model when every attempt fails, building its body only then", async () => {
		const t = setup({ "http://a": 503, "http://b": "drop" });
		const fallback = vi_fn('{"model":"engine-f"}');
		const answer = await t.run([
			{ model: "m", nodes: nodes("http://a", "http://b"), body: '{"model":"engine-m"}' },
			{ model: "f", nodes: nodes("http://f"), body: fallback.fn },
		]);
		expect(answer.target).toBe(1);
		expect(answer.node).toBe("http://f");
		expect(fallback.calls).toBe(1);
		expect(t.calls.at(-1)?.body).toBe('{"model":"engine-f"}');
		const unused = vi_fn();
		await t.run([
			{ model: "f", nodes: nodes("http://f"), body: "{}" },
			{ model: "g", nodes: nodes("http://g"), body: unused.fn },
		]);
		expect(unused.calls).toBe(0);
	});

	it("answers 503 with Retry-After when every node of every candidate was busy", async () => {
		const t = setup({ "http://a": 429, "http://b": 503, "http://f": 503 });
		const f = await failureOf(
			t.run([
				{ model: "m", nodes: nodes("http://a", "http://b"), body: "{}" },
				{ model: "f", nodes: nodes("http://f"), body: "{}" },
			]),
		);
		expect(f).toMatchObject({ status: 503, code: "upstream_unavailable" });
		expect(f.headers["retry-after"]).toBe("1");
	});

	it("answers 504 when every node timed out, and 503 when every node is drained", async () => {
		const t = setup({ "http://a": "hang", "http://b": "hang" });
		expect((await failureOf(t.run([{ model: "m", nodes: nodes("http://a", "http://b"), body: "{}" }]))).status).toBe(504);
		const drained = await failureOf(t.run([{ model: "m", nodes: [{ url: "http://z", weight: 0 }], body: "{}" }]));
		expect(drained.status).toBe(503);
		expect(t.calls.map((c) => c.url)).not.toContain("http://z");
	});

	it("counts a node's request in flight until the stream reader has read the body's end or cancelled it", async () => {
		const t = setup({});
		const answer = await t.run([{ model: "m", nodes: nodes("http://a"), body: "{}" }]);
		expect(t.fleet.runtime("http://a").inFlight).toBe(1);
		const { body, done } = answer.takeBody();
		const reader = new EngineEventReader(body as ReadableStream<Uint8Array>, { onEnd: done });
		await untilEnding(reader);
		expect(t.fleet.runtime("http://a").inFlight).toBe(0);
		const cancelled = await t.run([{ model: "m", nodes: nodes("http://a"), body: "{}" }]);
		const taken = cancelled.takeBody();
		const second = new EngineEventReader(taken.body as ReadableStream<Uint8Array>, { onEnd: taken.done });
		expect(t.fleet.runtime("http://a").inFlight).toBe(1);
		await second.cancel();
		expect(t.fleet.runtime("http://a").inFlight).toBe(0);
		// `done` is idempotent: a second report does not count the node out twice.
		taken.done();
		expect(t.fleet.runtime("http://a").inFlight).toBe(0);
	});

	it("counts a non-stream answer in flight until readBody has read it, or given up on it", async () => {
		const t = setup({});
		const answer = await t.run([{ model: "m", nodes: nodes("http://a"), body: "{}" }]);
		expect(t.fleet.runtime("http://a").inFlight).toBe(1);
		const text = await answer.readBody({ idleTimeoutMs: 1_000, abort: () => {} });
		expect(text.length).toBeGreaterThan(0);
		expect(t.fleet.runtime("http://a").inFlight).toBe(0);
		const big = await t.run([{ model: "m", nodes: nodes("http://a"), body: "{}" }]);
		await expect(big.readBody({ idleTimeoutMs: 1_000, maxBytes: 1, abort: () => {} })).rejects.toMatchObject({
			kind: "upstream_unavailable",
			options: { status: 502 },
		});
		expect(t.fleet.runtime("http://a").inFlight).toBe(0);
	});

	it("sends a salted node the payer's cache_salt instead of the client's, and other nodes the client's", async () => {
		const t = setup({});
		const body = JSON.stringify({ model: "m", cache_salt: "client-salt", messages: [] });
		const secrets = { CACHE_SALT_SECRET: "0123456789abcdef0123" };
		const salted: EngineNode = { url: "http://salted", weight: 1, cacheSalt: true };
		const saltOf = async (payerKeyId: string, node: EngineNode) => {
			const answer = await t.run([{ model: "m", nodes: [node], body }], { secrets, payerKeyId });
			await answer.readBody({ idleTimeoutMs: 1_000, abort: () => {} });
			return (JSON.parse(t.calls.at(-1)?.body ?? "{}") as { cache_salt?: string }).cache_salt;
		};
		const parent = await saltOf("key_parent", salted);
		expect(parent).toMatch(/^[A-Za-z0-9_-]{43}$/);
		expect(await saltOf("key_parent", salted)).toBe(parent);
		expect(await saltOf("key_other", salted)).not.toBe(parent);
		expect(await saltOf("key_parent", nodes("http://plain")[0] as EngineNode)).toBe("client-salt");
	});

	it("refuses a salted node without CACHE_SALT_SECRET, naming it, before calling the node", async () => {
		const t = setup({});
		const salted: EngineNode = { url: "http://salted", weight: 1, cacheSalt: true };
		await expect(t.run([{ model: "m", nodes: [salted], body: "{}" }], { payerKeyId: "k" })).rejects.toMatchObject({
			kind: "config_invalid",
			message: expect.stringContaining("CACHE_SALT_SECRET"),
		});
		expect(t.calls).toHaveLength(0);
	});

	it("keeps a conversation on one node with an affinity key, and sends the node's key", async () => {
		const t = setup({});
		const target = {
			model: "m",
			nodes: [...nodes("http://a", "http://b", "http://c")].map((n) => ({ ...n, apiKeyEnv: "NODE_KEY" })),
			body: "{}",
		};
		const seen = new Set<string>();
		// One turn after another (each answer read before the next): bounded load never spills them.
		for (let i = 0; i < 8; i++) {
			const answer = await t.run([target], { affinityKey: "conv-1" });
			seen.add(answer.node);
			await answer.readBody({ idleTimeoutMs: 1_000, abort: () => {} });
		}
		expect(seen.size).toBe(1);
		expect(t.calls.every((c) => c.auth === "Bearer secret-1")).toBe(true);
	});

	it("gives a long prompt its prefill time, and cools no node for its timeout until a short prompt times out there", async () => {
		const t = setup({ "http://hang": "hang" });
		// 2,000 tokens at 100,000 a second: 20 ms on top of the 30 ms first-byte timeout, a long prompt.
		const target = {
			model: "m",
			nodes: [{ url: "http://hang", weight: 1000, prefillTokensPerS: 100_000 }, ...nodes("http://ok")],
			body: "{}",
		};
		const started = performance.now();
		expect((await t.run([target], { promptTokens: 2000 })).node).toBe("http://ok");
		expect(performance.now() - started).toBeGreaterThanOrEqual(45);
		expect(t.fleet.runtime("http://hang")).toMatchObject({ coolingUntil: 0, lastError: "timeout on a long prompt" });
		// Still in service: the next long prompt tries it again.
		expect((await t.run([target], { promptTokens: 2000 })).node).toBe("http://ok");
		expect(t.calls.filter((c) => c.url === "http://hang")).toHaveLength(2);
		// A short prompt times out there too: the node is mute, and cools.
		expect((await t.run([target], { promptTokens: 10 })).node).toBe("http://ok");
		expect(t.fleet.runtime("http://hang").coolingUntil).toBeGreaterThan(Date.now());
	});

	it("ends the request at its deadline as 504, blaming no node, and tries nothing once it has passed", async () => {
		const t = setup({ "http://a": "hang", "http://b": "hang" });
		const targets = [
			{ model: "m", nodes: nodes("http://a"), body: "{}" },
			{ model: "f", nodes: nodes("http://b"), body: "{}" },
		];
		const cut = await failureOf(t.run(targets, { firstByteTimeoutMs: 60_000, deadlineAt: Date.now() + 20 }));
		expect(cut).toMatchObject({ status: 504, code: "upstream_timeout" });
		expect(t.calls.map((c) => c.url)).toEqual(["http://a"]);
		expect(t.fleet.runtime("http://a")).toMatchObject({ coolingUntil: 0, failures: 0 });
		const late = await failureOf(t.run(targets, { deadlineAt: Date.now() }));
		expect(late).toMatchObject({ status: 504, code: "upstream_timeout" });
		expect(t.calls).toHaveLength(1);
	});

	it("stops when the client leaves, without cooling the node", async () => {
		const t = setup({ "http://a": "hang" });
		const controller = new AbortController();
		const p = t.run([{ model: "m", nodes: nodes("http://a", "http://b"), body: "{}" }], { clientSignal: controller.signal });
		controller.abort(new Error("gone"));
		await expect(p).rejects.toMatchObject({ kind: "client_closed" });
		expect(t.fleet.runtime("http://a").coolingUntil).toBe(0);
	});

	it("says which model's engine had the request when the client left (its price is the estimate's)", async () => {
		const t = setup({ "http://a": 503, "http://fb": "hang" });
		const controller = new AbortController();
		const targets = [
			{ model: "m", nodes: nodes("http://a"), body: "{}" },
			{ model: "fallback", nodes: nodes("http://fb"), body: "{}" },
		];
		const p = t.run(targets, { clientSignal: controller.signal, firstByteTimeoutMs: 60_000 });
		await vi.waitFor(() => expect(t.calls.map((c) => c.url)).toContain("http://fb"));
		controller.abort(new Error("gone"));
		const err = (await p.catch((e: unknown) => e)) as GatewayError;
		expect(err.kind).toBe("client_closed");
		expect(err.options).toMatchObject({ target: 1 });
		expect(err.options.beforeEngine).toBeUndefined();
		// Gone before any node was asked: nothing read the request.
		const early = new AbortController();
		early.abort(new Error("gone"));
		const before = (await t.run(targets, { clientSignal: early.signal }).catch((e: unknown) => e)) as GatewayError;
		expect(before.options).toMatchObject({ beforeEngine: true });
		expect(before.options.target).toBeUndefined();
	});
});

/** A counted body function. */
function vi_fn(value = "{}") {
	const state = {
		calls: 0,
		fn: () => {
			state.calls++;
			return value;
		},
	};
	return state;
}

/** Reads a stream answer to its end through the stream layer, as run-chat does. */
async function readToEnd(answer: Awaited<ReturnType<typeof callEngine>>): Promise<void> {
	const { body, done } = answer.takeBody();
	await untilEnding(new EngineEventReader(body as ReadableStream<Uint8Array>, { onEnd: done }));
}

/** Reads events until the ending one (done, error, closed), which always comes last. */
async function untilEnding(reader: EngineEventReader): Promise<void> {
	while (!(await reader.next()).some((e) => e.type !== "chunk"));
}
