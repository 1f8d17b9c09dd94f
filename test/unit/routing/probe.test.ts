import { describe, expect, it } from "vitest";
import { LOAD_RETRY_MS, newMemo, type ProbeDeps, probeNode, serverRoot } from "../../../src/routing/probe";

type Route = number | string | "hang" | "drop";

/** A fake node: path → status (empty body), text (200), "hang" or "drop"; every call recorded. */
function fakeNode(routes: Record<string, Route>) {
	const calls: Array<{ url: string; auth: string | null }> = [];
	let clock = 10_000;
	const deps: ProbeDeps = {
		secrets: { NODE_KEY: "s3cret" },
		timeoutMs: 20,
		now: () => clock,
		fetch: (async (input: RequestInfo | URL, init?: RequestInit) => {
			const url = String(input);
			calls.push({ url, auth: new Headers(init?.headers).get("authorization") });
			const route = routes[new URL(url).pathname] ?? 404;
			if (route === "drop") throw new TypeError("connection refused");
			if (route === "hang") {
				return new Promise<Response>((_, reject) =>
					init?.signal?.addEventListener("abort", () => reject(init.signal?.reason), { once: true }),
				);
			}
			if (typeof route === "number") return new Response(null, { status: route });
			return new Response(route, { status: 200 });
		}) as typeof fetch,
	};
	return { deps, calls, advance: (ms: number) => (clock += ms) };
}

const VLLM = 'vllm:num_requests_waiting{model_name="m"} 6\nvllm:num_requests_running{model_name="m"} 2\n';

describe("probeNode", () => {
	it("strips /v1 to find the server root", () => {
		expect(serverRoot("http://n:8000/v1")).toBe("http://n:8000");
		expect(serverRoot("http://n/prefix/v1/")).toBe("http://n/prefix");
		expect(serverRoot("http://n/openai")).toBe("http://n/openai");
	});

	it("checks /health and reads vLLM's queue from /metrics, sending the node's key", async () => {
		const n = fakeNode({ "/health": 200, "/metrics": VLLM });
		const memo = newMemo();
		const r = await probeNode({ url: "http://n/v1", api_key_env: "NODE_KEY" }, memo, n.deps);
		expect(r).toMatchObject({ healthy: true, error: null, load: { source: "vllm", waiting: 6, running: 2 } });
		expect(n.calls.map((c) => c.url)).toEqual(["http://n/health", "http://n/metrics"]);
		expect(n.calls.every((c) => c.auth === "Bearer s3cret")).toBe(true);
		// A steady round is the same two requests.
		n.calls.length = 0;
		await probeNode({ url: "http://n/v1" }, memo, n.deps);
		expect(n.calls.map((c) => c.url)).toEqual(["http://n/health", "http://n/metrics"]);
	});

	it("falls back to {url}/models where there is no /health (Ollama), and learns it", async () => {
		const n = fakeNode({ "/v1/models": 200, "/api/ps": JSON.stringify({ models: [{ name: "llama3" }] }) });
		const memo = newMemo();
		const r = await probeNode({ url: "http://n/v1" }, memo, n.deps);
		expect(r.healthy).toBe(true);
		expect(r.load).toMatchObject({ source: "ollama", models_loaded: ["llama3"] });
		n.calls.length = 0;
		await probeNode({ url: "http://n/v1" }, memo, n.deps);
		expect(n.calls.map((c) => new URL(c.url).pathname)).toEqual(["/v1/models", "/api/ps"]);
	});

	it("reads llama.cpp's queue from /metrics and its slot count from /slots, as the server at b9928 serves them", async () => {
		// llama-server --metrics --slots (b9928-81ff7abe5), four slots, all busy and two requests deferred.
		const metrics =
			"# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 4\n# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 2\n";
		const slots = JSON.stringify(Array.from({ length: 4 }, (_, id) => ({ id, n_ctx: 4096, is_processing: true })));
		const n = fakeNode({ "/health": 200, "/metrics": metrics, "/slots": slots });
		const memo = newMemo();
		const r = await probeNode({ url: "http://n/v1" }, memo, n.deps);
		expect(r.load).toEqual({ source: "llamacpp", waiting: 2, running: 4, kv_cache_usage: null, slots: 4 });
		expect(n.calls.map((c) => c.url)).toEqual(["http://n/health", "http://n/metrics", "http://n/slots"]);
	});

	it("stops asking a llama.cpp node for /slots once it refuses them (started without --slots)", async () => {
		const n = fakeNode({ "/health": 200, "/metrics": "llamacpp:requests_processing 1\n", "/slots": 501 });
		const memo = newMemo();
		const r = await probeNode({ url: "http://n/v1" }, memo, n.deps);
		expect(r.load).toMatchObject({ source: "llamacpp", running: 1, waiting: null });
		expect(r.load?.slots).toBeUndefined();
		n.calls.length = 0;
		await probeNode({ url: "http://n/v1" }, memo, n.deps);
		expect(n.calls.map((c) => c.url)).toEqual(["http://n/health", "http://n/metrics"]);
	});

	it("reads llama.cpp's /slots when there are no metrics", async () => {
		const n = fakeNode({ "/health": 200, "/slots": JSON.stringify([{ is_processing: true }, { is_processing: false }]) });
		const r = await probeNode({ url: "http://n/v1" }, newMemo(), n.deps);
		expect(r.load).toMatchObject({ source: "slots", running: 1, slots: 2 });
	});

	it("stops asking a node that exposes no load, for a while", async () => {
		const n = fakeNode({ "/health": 200 });
		const memo = newMemo();
		expect((await probeNode({ url: "http://n/v1" }, memo, n.deps)).load).toBeNull();
		n.calls.length = 0;
		await probeNode({ url: "http://n/v1" }, memo, n.deps);
		expect(n.calls.map((c) => new URL(c.url).pathname)).toEqual(["/health"]);
		n.advance(LOAD_RETRY_MS + 1);
		n.calls.length = 0;
		await probeNode({ url: "http://n/v1" }, memo, n.deps);
		expect(n.calls).toHaveLength(4);
	});

	it("marks a node unhealthy on an error status, a refused connection or a timeout, and skips its load", async () => {
		for (const [route, error] of [
			[503, "status 503"],
			["drop", "connection failed"],
			["hang", "timeout"],
		] as const) {
			const n = fakeNode({ "/health": route, "/metrics": VLLM });
			const r = await probeNode({ url: "http://n/v1" }, newMemo(), n.deps);
			expect(r).toMatchObject({ healthy: false, error, load: null });
			expect(n.calls).toHaveLength(1);
		}
	});

	it("uses the configured health and metrics URLs (a node behind a path prefix)", async () => {
		const n = fakeNode({ "/ops/ready": 200, "/ops/prom": "sglang:num_queue_reqs 3\n" });
		const r = await probeNode(
			{ url: "http://n/gpu1/v1", health_url: "http://n/ops/ready", metrics_url: "http://n/ops/prom" },
			newMemo(),
			n.deps,
		);
		expect(r.load).toMatchObject({ source: "sglang", waiting: 3 });
		expect(n.calls.map((c) => c.url)).toEqual(["http://n/ops/ready", "http://n/ops/prom"]);
	});
});
