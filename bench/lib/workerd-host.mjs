// Hosts the two workerd processes of the bench (forked by bench/run.mjs, so Miniflare's
// Node side never shares a core's scheduler slot with the load generator's event loop):
//   - the gateway: the bundle `wrangler deploy --dry-run --outdir` produced, with the
//     bindings wrangler.toml declares (D1 DB, Durable Objects LEDGER and RESPONSES, vars),
//     GATEWAY_CONFIG pointing at the bench engine and a bench ADMIN_TOKEN; plus a small
//     ledger driver worker bound to the gateway's KeyLedger class. Its entry module is
//     bench/workers/ledger-distance.mjs, which counts (and can delay) the Worker's ledger calls.
//     Each --variant is one more such instance, with its own GATEWAY_CONFIG;
//   - the floor: bench/workers/floor.mjs, a bare pass-through to the engine.
// Each is its own Miniflare instance, hence its own workerd process and /proc CPU account.
// Requests go straight to workerd's socket (mf.ready), never through wrangler dev.
import { createWriteStream, readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Log, LogLevel, Miniflare } from "miniflare-bench";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const BENCH = path.join(ROOT, "bench");

// `miniflare-bench` (package.json) is the Miniflare that wrangler itself depends on, and so runs
// the workerd that `wrangler deploy` pins. The top-level `miniflare` is the 5.x line that
// @cloudflare/vitest-pool-workers brings. A wrangler upgrade must bump the alias with it.
const require = createRequire(import.meta.url);
const wranglerWants = require("wrangler/package.json").dependencies.miniflare;
const miniflareVersion = require("miniflare-bench/package.json").version;
if (miniflareVersion !== wranglerWants) {
	throw new Error(
		`bench: miniflare-bench is ${miniflareVersion} but wrangler depends on miniflare ${wranglerWants}; set "miniflare-bench": "npm:miniflare@${wranglerWants}" in package.json and run npm install`,
	);
}
const workerdVersion = createRequire(require.resolve("miniflare-bench"))("workerd/package.json").version;
const wrangler = await import("wrangler");

function childWorkerdPids() {
	const out = [];
	for (const entry of readdirSync("/proc")) {
		if (!/^\d+$/.test(entry)) continue;
		try {
			const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
			const close = stat.lastIndexOf(")");
			const comm = stat.slice(stat.indexOf("(") + 1, close);
			const ppid = Number(stat.slice(close + 2).split(" ")[1]);
			if (ppid === process.pid && comm.startsWith("workerd")) out.push(Number(entry));
		} catch {
			// the process ended while we looked
		}
	}
	return out;
}

// Every instance pipes its workerd's stderr here: two per gateway in the split layout, more than Node's default 10 listeners.
process.stderr.setMaxListeners(64);

async function startInstance(options) {
	const before = new Set(childWorkerdPids());
	const mf = new Miniflare({
		host: "127.0.0.1",
		port: 0,
		// The default logs every request by calling back into Node from the entry worker:
		// a loopback HTTP request per request, which is not the platform's cost.
		logRequests: false,
		// No internet here, and no `cf` blob is needed.
		cf: {},
		log: new Log(LogLevel.WARN),
		// The gateway writes one JSON log line per request (docs/operations.md "Logs"): workerd still writes it
		// (that is the feature's cost, measured), the host drains it instead of printing thousands
		// of lines; stderr (errors) is still shown.
		handleRuntimeStdio(stdout, stderr) {
			// BENCH_WORKERD_LOG=<file>: keep what the Workers log (one JSON line a request, warnings) for a diagnosis.
			if (process.env.BENCH_WORKERD_LOG) stdout.pipe(createWriteStream(process.env.BENCH_WORKERD_LOG, { flags: "a" }));
			else stdout.resume();
			stderr.pipe(process.stderr);
		},
		...options,
	});
	const url = await mf.ready;
	const pid = childWorkerdPids().find((p) => !before.has(p));
	if (!pid) throw new Error("could not find the workerd process Miniflare started");
	return { mf, url: url.href.replace(/\/$/, ""), pid };
}

/** Drizzle's migration files, in order, split at its statement breakpoints. */
function migrationStatements() {
	const dir = path.join(ROOT, "drizzle");
	return readdirSync(dir)
		.filter((f) => f.endsWith(".sql"))
		.sort()
		.flatMap((f) => readFileSync(path.join(dir, f), "utf8").split("--> statement-breakpoint"))
		.map((s) => s.trim())
		.filter(Boolean);
}

/** The gateway instances by name ("gateway", then one per --variant), each its own workerd. */
const gateways = new Map();
/** Production layout ("split"): the second workerd of each gateway, hosting its Durable Objects and D1. */
const ledgers = new Map();
let floor;
let minimal;

/** The entry module: bench/workers/ledger-distance.mjs, loaded as if it sat beside the bundle's index.js. */
const wrapperSource = readFileSync(path.join(BENCH, "workers", "ledger-distance.mjs"), "utf8");
/** The second process's entry module (split layout): bench/workers/ledger-host.mjs, beside the bundle's index.js. */
const ledgerHostSource = readFileSync(path.join(BENCH, "workers", "ledger-host.mjs"), "utf8");

/**
 * The Durable Object bindings the split layout moves to the second process: every one the gateway
 * declares (KeyLedger, ResponseStore, NodeHealth). On Cloudflare none of them runs on the Worker's thread.
 */
const REMOTE_DO = ["LEDGER", "RESPONSES", "NODE_HEALTH"];

/** The bundle as a Worker of a Miniflare instance, `entrySource` its entry module (loaded beside index.js). */
function bundleWorker({ workerOptions, bundleDir, entrySource, entryName, bindings, ...more }) {
	return {
		...workerOptions,
		name: "gateway",
		modules: true,
		script: entrySource,
		scriptPath: path.join(bundleDir, entryName),
		modulesRoot: bundleDir,
		// The bundle's index.js is an ES module (it was the entry, which is always one; imported, a .js is CommonJS by default).
		modulesRules: [...(workerOptions.modulesRules ?? []), { type: "ESModule", include: ["**/*.js"] }],
		bindings,
		...more,
	};
}

/** The probe worker (bench/workers/probe.mjs), bound to the KeyLedger class and D1 of the instance it runs in. */
function probeWorker(workerOptions) {
	return {
		name: "probe",
		modules: true,
		scriptPath: path.join(BENCH, "workers", "probe.mjs"),
		compatibilityDate: workerOptions.compatibilityDate,
		compatibilityFlags: workerOptions.compatibilityFlags,
		durableObjects: { LEDGER: { className: "KeyLedger", scriptName: "gateway", useSQLite: true } },
		d1Databases: workerOptions.d1Databases,
	};
}

async function migrate(instance) {
	const db = await instance.mf.getD1Database("DB");
	await db.batch(migrationStatements().map((s) => db.prepare(s)));
}

/**
 * One gateway target. "single": one workerd runs the gateway, its Durable Objects and D1 (the
 * rig before issue 39). "split" (production): a first workerd hosts the Durable Objects and the D1
 * database their alarms flush to (bench/workers/ledger-host.mjs), a second the gateway, whose
 * Durable Object bindings reach the first through one cross-process JS RPC service binding
 * (bench/workers/ledger-distance.mjs). The gateway's own D1 binding stays in its process: it
 * serves key lookups, which the isolate's key memo keeps off the warm path, and admin calls.
 */
async function startGateway({ name, bundleDir, workerOptions, bindings, stateDir, inspectorPort, layout }) {
	if (layout === "split" || layout === "split-router") {
		const { assets, ...hostOptions } = workerOptions;
		// "split": the static-assets router (Miniflare's rpc-proxy and router workers, which every request
		// of a Worker with `[assets]` passes through before it) runs in the second process too, as on
		// Cloudflare, where it is the platform's and not the Worker's; the gateway's ASSETS binding reaches
		// a Worker there that serves the console. "split-router" keeps it in the gateway's process.
		const moveAssets = layout === "split" && assets;
		const ledger = await startInstance({
			d1Persist: path.join(stateDir, name, "ledger-d1"),
			durableObjectsPersist: path.join(stateDir, name, "ledger-do"),
			workers: [
				bundleWorker({
					workerOptions: hostOptions,
					bundleDir,
					entrySource: ledgerHostSource,
					entryName: "__bench_ledger_host.mjs",
					bindings,
					unsafeDirectSockets: [{ entrypoint: "DoGate" }],
				}),
				probeWorker(workerOptions),
				...(moveAssets
					? [
							{
								name: "assets",
								modules: true,
								script: "export default { fetch: (request, env) => env.ASSETS.fetch(request) };",
								compatibilityDate: workerOptions.compatibilityDate,
								compatibilityFlags: workerOptions.compatibilityFlags,
								assets,
								unsafeDirectSockets: [{}],
							},
						]
					: []),
			],
		});
		await migrate(ledger);
		const gate = await ledger.mf.unsafeGetDirectURL("gateway", "DoGate");
		const assetsAt = moveAssets ? await ledger.mf.unsafeGetDirectURL("assets") : null;
		ledgers.set(name, ledger);
		const durableObjects = Object.fromEntries(
			Object.entries(workerOptions.durableObjects ?? {}).filter(([b]) => !REMOTE_DO.includes(b)),
		);
		const instance = await startInstance({
			inspectorPort,
			d1Persist: path.join(stateDir, name, "d1"),
			durableObjectsPersist: path.join(stateDir, name, "do"),
			workers: [
				bundleWorker({
					workerOptions: { ...(moveAssets ? hostOptions : workerOptions), durableObjects },
					bundleDir,
					entrySource: wrapperSource,
					entryName: "__bench_ledger_distance.mjs",
					bindings: { ...bindings, __BENCH_REMOTE_DO: REMOTE_DO.join(",") },
					serviceBindings: {
						...workerOptions.serviceBindings,
						__BENCH_DO_GATE: { external: { address: gate.host, http: {} } },
						...(assetsAt ? { [assets.binding ?? "ASSETS"]: { external: { address: assetsAt.host, http: {} } } } : {}),
					},
				}),
			],
		});
		await migrate(instance);
		gateways.set(name, instance);
		return { ...instance, ledgerPid: ledger.pid };
	}
	const instance = await startInstance({
		inspectorPort,
		d1Persist: path.join(stateDir, name, "d1"),
		durableObjectsPersist: path.join(stateDir, name, "do"),
		workers: [
			bundleWorker({
				workerOptions,
				bundleDir,
				entrySource: wrapperSource,
				entryName: "__bench_ledger_distance.mjs",
				bindings,
			}),
			probeWorker(workerOptions),
		],
	});
	await migrate(instance);
	gateways.set(name, instance);
	return instance;
}

/**
 * `gateways`: [{name, gatewayConfig}], the first is the main "gateway". Each gets its own
 * Miniflare instance (workerd process, CPU account, D1 and Durable Object storage).
 */
async function start({ bundleDir, engineUrl, stateDir, adminToken, gateways: specs, inspectorPort, minimalBindings, layout }) {
	const configPath = path.join(ROOT, "wrangler.toml");
	const { workerOptions } = wrangler.unstable_getMiniflareWorkerOptions(configPath);
	const config = wrangler.unstable_readConfig({ config: configPath });
	const started = [];
	let bindings;
	// One at a time: a new instance's workerd pid is the child process that was not there before.
	for (const [i, spec] of specs.entries()) {
		// Vars from wrangler.toml (not a developer's .dev.vars), then the bench's own values.
		bindings = { ...(config.vars ?? {}), GATEWAY_CONFIG: JSON.stringify(spec.gatewayConfig), ADMIN_TOKEN: adminToken };
		const instance = await startGateway({
			name: spec.name,
			bundleDir: spec.bundleDir ?? bundleDir,
			workerOptions,
			bindings,
			stateDir,
			inspectorPort: i === 0 ? inspectorPort : undefined,
			layout: spec.layout ?? layout,
		});
		started.push({
			name: spec.name,
			url: instance.url,
			pid: instance.pid,
			ledgerPid: instance.ledgerPid ?? null,
			layout: spec.layout ?? layout,
		});
	}
	floor = await startInstance({
		name: "floor",
		modules: true,
		scriptPath: path.join(BENCH, "workers", "floor.mjs"),
		compatibilityDate: workerOptions.compatibilityDate,
		compatibilityFlags: workerOptions.compatibilityFlags,
		bindings: { ENGINE_URL: engineUrl },
	});
	// issue 27's reference: key lookup, body rewrite, CORS, request id, a log line (bench/workers/minimal.mjs).
	minimal = await startInstance({
		name: "minimal",
		modules: true,
		scriptPath: path.join(BENCH, "workers", "minimal.mjs"),
		compatibilityDate: workerOptions.compatibilityDate,
		compatibilityFlags: workerOptions.compatibilityFlags,
		bindings: { ENGINE_URL: engineUrl, ...minimalBindings },
	});
	return {
		gateways: started,
		gatewayUrl: started[0].url,
		gatewayPid: started[0].pid,
		floorUrl: floor.url,
		floorPid: floor.pid,
		minimalUrl: minimal.url,
		minimalPid: minimal.pid,
		compatibilityDate: workerOptions.compatibilityDate,
		compatibilityFlags: workerOptions.compatibilityFlags,
		bindings: Object.keys(workerOptions.durableObjects ?? {})
			.map((b) => `DO ${b}`)
			.concat(
				Object.keys(workerOptions.d1Databases ?? {}).map((b) => `D1 ${b}`),
				Object.keys(bindings),
			),
		miniflareVersion,
		workerdVersion,
	};
}

/** The workerd that holds a gateway's Durable Objects and usage records: its second process in the split layout. */
const stateOf = (instance) => ledgers.get(instance) ?? gateways.get(instance);

/** A request to the probe worker (bench/workers/probe.mjs), inside the workerd that hosts the gateway's KeyLedger. */
async function probe({ instance = "gateway", path: probePath, query = {}, method = "GET" }) {
	const worker = await stateOf(instance).mf.getWorker("probe");
	const res = await worker.fetch(`http://probe${probePath}?${new URLSearchParams(query)}`, { method });
	const text = await res.text();
	if (!res.ok) throw new Error(`probe ${probePath}: ${res.status} ${text}`);
	return JSON.parse(text);
}

async function usageCount({ instance = "gateway", keyId }) {
	const db = await stateOf(instance).mf.getD1Database("DB");
	const row = await db.prepare("SELECT COUNT(*) AS n FROM usage_records WHERE key_id = ?").bind(keyId).first();
	return { count: row?.n ?? 0 };
}

async function stop() {
	await Promise.allSettled([
		...[...gateways.values(), ...ledgers.values()].map((g) => g.mf.dispose()),
		floor?.mf.dispose(),
		minimal?.mf.dispose(),
	]);
	return {};
}

const handlers = { start, probe, usageCount, stop };

process.on("message", async (msg) => {
	const handler = handlers[msg?.type];
	if (!handler) return;
	try {
		process.send?.({ id: msg.id, ok: true, value: await handler(msg.args ?? {}) });
	} catch (err) {
		process.send?.({ id: msg.id, ok: false, error: err?.stack ?? String(err) });
	}
	if (msg.type === "stop") process.exit(0);
});
process.on("disconnect", async () => {
	await stop();
	process.exit(0);
});
process.send?.({ type: "ready" });
