// Bench only, the production layout ("split", bench/README.md "Layouts"): the entry module of the
// second workerd process, which hosts the gateway's Durable Objects (KeyLedger, NodeHealth,
// ResponseStore) and the D1 database their alarms write to, so that their work never runs on the
// gateway's thread, as on Cloudflare. bench/lib/workerd-host.mjs loads it beside the bundle's
// `index.js` (as bench/workers/ledger-distance.mjs is loaded in the gateway's process): the
// classes are the bundle's own, unchanged.
//
// `DoGate` is exposed on its own socket (Miniflare `unsafeDirectSockets`, which speaks workerd's
// Cap'n Proto RPC), and the gateway's process reaches it through an `external` service binding:
// one JS RPC call across the two processes per Durable Object call, `relay(binding, name, method,
// args)`, which this side makes on a stub of the named object. The gateway's side
// (ledger-distance.mjs `remoteNamespace`) hands the gateway a namespace whose stubs make that call.
import { WorkerEntrypoint } from "cloudflare:workers";

export * from "./index.js";

export class DoGate extends WorkerEntrypoint {
	/** `env[binding].getByName(name)[method](...args)`: a Durable Object call made for the gateway's process. */
	async relay(binding, name, method, args) {
		// A stub per call: a stub belongs to the request that made it (workerd refuses I/O across requests).
		const ns = this.env[binding];
		if (!ns?.idFromName) throw new Error(`bench ledger host: no Durable Object binding ${binding}`);
		const stub = ns.get(ns.idFromName(name));
		// Reflect.apply: on an RPC stub every property, `apply` included, is a remote method. Awaited, so
		// the gateway gets the answer's data, not a pipelined promise whose capability it would have to
		// dispose ("An RPC result was not disposed properly").
		return await Reflect.apply(stub[method], stub, args);
	}
}

// The bundle's fetch and scheduled are not served here: requests reach the gateway's process.
export default {
	fetch: () => new Response("bench ledger host: requests go to the gateway's process", { status: 404 }),
};
