// Named nodes and the probe endpoints of the development engine, so one engine process can
// stand in for a fleet. A `/n/<name>` path prefix is a node of its own: its behaviour is a
// scenario chosen at runtime (default "ok"), and its `/metrics` report a queue set at runtime,
// so an operator (or a test) can make one node slow, failing or queued while the gateway routes.
//
//   POST /_engine/nodes/<name>  {"scenario": "hang", "queue": {"waiting": 20, "running": 8}, "kv_cache_usage": 0.5}
//                               sets what is given; {"reset": true} returns the node to "ok" with no queue
//   GET  /_engine/nodes         every node used so far: name, scenario, queue, in flight, requests, probes
//
// `GET /health` and `GET /metrics` (under any node or scenario prefix) are health checks: they
// are counted per node, not recorded with the requests, so a test listing its requests never
// sees the gateway's background probes.

import { sendJson, sendText } from "./engine-wire.mjs";

/** The probe routes: answered, counted, never recorded. */
export function isProbe(method, route) {
	return method === "GET" && (route === "/health" || route === "/metrics");
}

export function createNodes() {
	// name → { scenario, queue, kv, inFlight, requests, probes }, made on first use.
	const nodes = new Map();
	// Unnamed paths (`/s/<scenario>`, the root) keep counts too, so their /metrics report what runs.
	const others = new Map();
	const get = (name) => {
		if (!nodes.has(name)) nodes.set(name, { scenario: "ok", queue: null, kv: 0, inFlight: 0, requests: 0, probes: 0 });
		return nodes.get(name);
	};
	const counts = (key) => {
		if (!others.has(key)) others.set(key, { scenario: key, queue: null, kv: 0, inFlight: 0, requests: 0, probes: 0 });
		return others.get(key);
	};
	return {
		/** The node a path names (`/n/<name>/…`), else the counts of its scenario path. */
		entry: (name, scenario) => (name === null ? counts(`s:${scenario}`) : get(name)),
		scenarioOf: (name) => get(name).scenario,
		set(name, change) {
			const n = get(name);
			if (change.reset) Object.assign(n, { scenario: "ok", queue: null, kv: 0 });
			if (typeof change.scenario === "string") n.scenario = change.scenario;
			if (change.queue !== undefined) n.queue = change.queue;
			if (typeof change.kv_cache_usage === "number") n.kv = change.kv_cache_usage;
			return view(name, n);
		},
		list: () => [...nodes.entries()].map(([name, n]) => view(name, n)),
	};
}

function view(name, n) {
	return {
		name,
		scenario: n.scenario,
		queue: n.queue,
		kv_cache_usage: n.kv,
		in_flight: n.inFlight,
		requests: n.requests,
		probes: n.probes,
	};
}

/** `/n/<name>/rest` → { name, rest }, or null. */
export function splitNode(pathname) {
	const match = /^\/n\/([^/]+)(\/.*)$/.exec(pathname);
	return match ? { name: decodeURIComponent(match[1]), rest: match[2] } : null;
}

/** vLLM's gauges: the queue set for the node (or its scenario's `queue`), else what it is running now. */
export function metricsText(entry, behaviour) {
	const queue = entry.queue ?? behaviour.queue ?? {};
	const waiting = queue.waiting ?? 0;
	const running = queue.running ?? entry.inFlight;
	const kv = entry.kv || (behaviour.queue?.kv_cache_usage ?? 0);
	const label = '{engine="0",model_name="dev-echo"}';
	return [
		"# HELP vllm:num_requests_running Number of requests in model execution batches.",
		"# TYPE vllm:num_requests_running gauge",
		`vllm:num_requests_running${label} ${running.toFixed(1)}`,
		"# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
		"# TYPE vllm:num_requests_waiting gauge",
		`vllm:num_requests_waiting${label} ${waiting.toFixed(1)}`,
		"# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
		"# TYPE vllm:kv_cache_usage_perc gauge",
		`vllm:kv_cache_usage_perc${label} ${kv}`,
		"",
	].join("\n");
}

export function health(ctx) {
	sendJson(ctx.res, 200, { status: "ok" });
}

export function metrics(ctx) {
	sendText(ctx.res, 200, metricsText(ctx.nodeEntry, ctx.behaviour));
}

/** `/_engine/nodes` control routes; false when the route is not one of them. */
export function nodeControl(req, res, route, body, nodes) {
	if (req.method === "GET" && route === "/_engine/nodes") {
		sendJson(res, 200, nodes.list());
		return true;
	}
	const match = /^\/_engine\/nodes\/([^/]+)$/.exec(route);
	if (req.method === "POST" && match) {
		sendJson(res, 200, nodes.set(decodeURIComponent(match[1]), body ?? {}));
		return true;
	}
	return false;
}
