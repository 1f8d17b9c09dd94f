// Bench only: the gateway bundle with its ledger binding wrapped. bench/lib/workerd-host.mjs
// loads this file as the gateway Worker's entry module, placed beside the bundle's `index.js`
// (Miniflare `script` + `scriptPath` in the bundle directory), so it runs in the same isolate as
// the unchanged bundle: the same module instance, Durable Object classes and module state.
//
// For `fetch` and `scheduled` it hands the gateway an env whose `LEDGER` namespace returns
// counting stubs: every method call on a KeyLedger stub (authorize, settle, info, …) is counted
// by name and, when a delay is set, waits that many ms before it is sent. That puts the ledger
// "at a distance" (one round trip of N ms, as from an edge location to the key's Durable
// Object far away) without touching the gateway's code. Calls made from inside Durable Objects
// (their own env) are neither counted nor delayed.
//
//   GET  /__bench/ledger                 {calls, byMethod, delayMs, delayedMs}
//   POST /__bench/ledger?delay_ms=N      set the delay (0: calls go straight through)
//   GET  /__bench/ledger/rtt?n=          time n info() calls through the wrapped binding (mechanism check)
// Nothing else under /__bench/ reaches the gateway.
//
// In the production layout ("split", bench/README.md "Layouts") the gateway's Durable Objects live
// in a second workerd process (bench/workers/ledger-host.mjs): the env then carries
// `__BENCH_DO_GATE`, a service binding to that process, and `__BENCH_REMOTE_DO`, the names of the
// bindings it serves. Each becomes a namespace whose stubs send every method call there as one JS
// RPC call, as a Durable Object stub's call leaves a Worker on Cloudflare.
import * as bundle from "./index.js";

export * from "./index.js";

const gateway = bundle.default;
const state = { calls: 0, byMethod: {}, delayMs: 0, delayedMs: 0 };

function wrapStub(stub) {
	return new Proxy(stub, {
		get(target, prop) {
			const value = Reflect.get(target, prop);
			// A stub is not thenable; keep it that way, and leave plain properties (id, name) alone.
			if (prop === "then" || typeof prop === "symbol" || typeof value !== "function") return value;
			return (...args) => {
				state.calls++;
				state.byMethod[prop] = (state.byMethod[prop] ?? 0) + 1;
				const delay = state.delayMs;
				// Reflect.apply, not value.apply: on an RPC stub every property, `apply` included, is a remote method.
				if (delay <= 0) return Reflect.apply(value, target, args);
				state.delayedMs += delay;
				return scheduler.wait(delay).then(() => Reflect.apply(value, target, args));
			};
		},
	});
}

function wrapNamespace(ns) {
	return new Proxy(ns, {
		get(target, prop) {
			const value = Reflect.get(target, prop);
			if (typeof value !== "function") return value;
			if (prop === "get" || prop === "getByName") return (...args) => wrapStub(Reflect.apply(value, target, args));
			return (...args) => Reflect.apply(value, target, args);
		},
	});
}

/** A stub whose every method call is `gate.relay(binding, name, method, args)` in the other process. */
function remoteStub(gate, binding, name, id) {
	return new Proxy(
		{},
		{
			get(_target, prop) {
				if (prop === "then" || typeof prop === "symbol") return undefined;
				if (prop === "id") return id;
				if (prop === "name") return name;
				return (...args) => gate.relay(binding, name, prop, args);
			},
		},
	);
}

/** The Durable Object namespace `binding` of the other process, as far as the gateway uses one: idFromName, get, getByName. */
function remoteNamespace(gate, binding) {
	const idFromName = (name) => ({ name, toString: () => name, equals: (other) => other?.name === name });
	return {
		idFromName,
		get: (id) => remoteStub(gate, binding, id.name, id),
		getByName: (name) => remoteStub(gate, binding, name, idFromName(name)),
	};
}

/** One wrapped env per original env object: the gateway may cache per env (WeakMap). */
const wrapped = new WeakMap();
function wrapEnv(env) {
	let w = wrapped.get(env);
	if (!w) {
		w = env;
		if (env.__BENCH_DO_GATE) {
			w = { ...env };
			for (const b of String(env.__BENCH_REMOTE_DO ?? "")
				.split(",")
				.filter(Boolean))
				w[b] = remoteNamespace(env.__BENCH_DO_GATE, b);
		}
		if (w.LEDGER) w = { ...w, LEDGER: wrapNamespace(w.LEDGER) };
		wrapped.set(env, w);
	}
	return w;
}

async function benchRoute(request, env, url) {
	if (url.pathname === "/__bench/ledger") {
		if (request.method === "POST") {
			const ms = Number(url.searchParams.get("delay_ms") ?? 0);
			state.delayMs = Number.isFinite(ms) && ms > 0 ? ms : 0;
		}
		return Response.json(state);
	}
	if (url.pathname === "/__bench/ledger/rtt") {
		const n = Number(url.searchParams.get("n") ?? 5);
		const ns = wrapEnv(env).LEDGER;
		const stub = ns.get(ns.idFromName("__bench_rtt"));
		const started = Date.now();
		for (let i = 0; i < n; i++) await stub.info();
		// Date.now() advances across I/O in workerd, so this spans the waits and the RPCs.
		return Response.json({ n, msEach: (Date.now() - started) / n, delayMs: state.delayMs });
	}
	return new Response("not found", { status: 404 });
}

const entry = { ...gateway };
if (gateway.fetch) {
	entry.fetch = (request, env, ctx) => {
		// Cheap test first: the gateway's own requests pay one string comparison.
		if (request.url.includes("/__bench/")) {
			const url = new URL(request.url);
			if (url.pathname.startsWith("/__bench/")) return benchRoute(request, env, url);
		}
		return gateway.fetch(request, wrapEnv(env), ctx);
	};
}
if (gateway.scheduled) entry.scheduled = (controller, env, ctx) => gateway.scheduled(controller, wrapEnv(env), ctx);

export default entry;
