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
import { readdirSync, readFileSync } from "node:fs";
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
			stdout.resume();
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
let floor;
let minimal;

/** The entry module: bench/workers/ledger-distance.mjs, loaded as if it sat beside the bundle's index.js. */
const wrapperSource = readFileSync(path.join(BENCH, "workers", "ledger-distance.mjs"), "utf8");

async function startGateway({ name, bundleDir, workerOptions, bindings, stateDir, inspectorPort }) {
	const instance = await startInstance({
		inspectorPort,
		d1Persist: path.join(stateDir, name, "d1"),
		durableObjectsPersist: path.join(stateDir, name, "do"),
		workers: [
			{
				...workerOptions,
				name: "gateway",
				modules: true,
				script: wrapperSource,
				scriptPath: path.join(bundleDir, "__bench_ledger_distance.mjs"),
				modulesRoot: bundleDir,
				// The bundle's index.js is an ES module (it was the entry, which is always one; imported, a .js is CommonJS by default).
				modulesRules: [...(workerOptions.modulesRules ?? []), { type: "ESModule", include: ["**/*.js"] }],
				bindings,
			},
			{
				name: "probe",
				modules: true,
				scriptPath: path.join(BENCH, "workers", "probe.mjs"),
				compatibilityDate: workerOptions.compatibilityDate,
				compatibilityFlags: workerOptions.compatibilityFlags,
				durableObjects: { LEDGER: { className: "KeyLedger", scriptName: "gateway", useSQLite: true } },
				d1Databases: workerOptions.d1Databases,
			},
		],
	});
	const db = await instance.mf.getD1Database("DB");
	await db.batch(migrationStatements().map((s) => db.prepare(s)));
	gateways.set(name, instance);
	return instance;
}

/**
 * `gateways`: [{name, gatewayConfig}], the first is the main "gateway". Each gets its own
 * Miniflare instance (workerd process, CPU account, D1 and Durable Object storage).
 */
async function start({ bundleDir, engineUrl, stateDir, adminToken, gateways: specs, inspectorPort, minimalBindings }) {
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
		});
		started.push({ name: spec.name, url: instance.url, pid: instance.pid });
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

/** A request to the probe worker (bench/workers/probe.mjs), inside the gateway's workerd. */
async function probe({ instance = "gateway", path: probePath, query = {}, method = "GET" }) {
	const worker = await gateways.get(instance).mf.getWorker("probe");
	const res = await worker.fetch(`http://probe${probePath}?${new URLSearchParams(query)}`, { method });
	const text = await res.text();
	if (!res.ok) throw new Error(`probe ${probePath}: ${res.status} ${text}`);
	return JSON.parse(text);
}

async function usageCount({ instance = "gateway", keyId }) {
	const db = await gateways.get(instance).mf.getD1Database("DB");
	const row = await db.prepare("SELECT COUNT(*) AS n FROM usage_records WHERE key_id = ?").bind(keyId).first();
	return { count: row?.n ?? 0 };
}

async function stop() {
	await Promise.allSettled([...[...gateways.values()].map((g) => g.mf.dispose()), floor?.mf.dispose(), minimal?.mf.dispose()]);
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
