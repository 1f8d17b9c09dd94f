// `node dev/gateway-host.mjs` (its options as JSON in $VENYM_GATEWAY_HOST): runs the gateway
// locally in workerd through the Miniflare API, as `wrangler dev` does but without its proxy:
// `wrangler dev` puts a second workerd (its ProxyWorker) in front of the Worker, which reads every response as fast as the
// Worker sends it, whether or not its client still reads, and keeps what a vanished client never
// took: 360 streaming clients that go away grow it by half a gigabyte and leave it unable to answer
// for minutes (issue 33). Here clients talk to the Worker's own workerd, as they do in production.
//
// The Worker is the bundle `wrangler deploy --dry-run` builds (what a deploy uploads), with
// wrangler.toml's bindings as wrangler reads them (D1, Durable Objects, the console's static
// assets, [vars]), the secrets of .dev.vars (else .env) over them and the caller's `vars` over
// those, and its local D1 and Durable Objects in <persistTo>/v3, where `wrangler dev` and
// `wrangler d1 migrations apply --local` keep them (default .wrangler/state). An edit under src/
// rebuilds the bundle and reloads the Worker. Like wrangler dev, the Cron Trigger does not fire by
// itself: `npm run maintenance` runs its job.
//
// The Worker's console output is written as wrangler dev writes it: logs on stdout, warnings and
// errors on stderr. "gateway ready on <url>" on stdout once it answers; SIGTERM, SIGINT or SIGHUP
// stop workerd and exit, and this process exits when workerd does. dev/gateway-process.mjs runs it.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, rmSync, watch } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseEnv } from "node:util";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const require = createRequire(import.meta.url);
// The Miniflare wrangler itself runs (and so the workerd `wrangler deploy` pins).
const { Log, LogLevel, Miniflare } = await import(createRequire(require.resolve("wrangler")).resolve("miniflare"));
const wrangler = await import("wrangler");

/** @type {{ port: number, persistTo?: string, vars?: Record<string, string>, watch?: boolean }} */
const options = JSON.parse(process.env.VENYM_GATEWAY_HOST ?? "{}");
const persistRoot = path.resolve(ROOT, options.persistTo ?? ".wrangler/state");
const bundleDir = path.join(ROOT, ".wrangler", "tmp", `gateway-${options.port}`);
const configPath = path.join(ROOT, "wrangler.toml");

/** `wrangler deploy --dry-run --outdir`: the bundle a deploy would upload. */
function bundle() {
	rmSync(bundleDir, { recursive: true, force: true });
	const r = spawnSync(
		process.execPath,
		[require.resolve("wrangler/bin/wrangler.js"), "deploy", "--dry-run", "--outdir", bundleDir],
		{ cwd: ROOT, encoding: "utf8", env: { ...process.env, WRANGLER_SEND_METRICS: "false", CI: "true" } },
	);
	if (r.status !== 0) throw new Error(`bundling the Worker failed:\n${r.stdout}${r.stderr}`);
}

/** The secrets `wrangler dev` reads: .dev.vars, else .env. */
function devVars() {
	for (const file of [".dev.vars", ".env"]) {
		const p = path.join(ROOT, file);
		if (existsSync(p)) return parseEnv(readFileSync(p, "utf8"));
	}
	return {};
}

function miniflareOptions() {
	const { workerOptions } = wrangler.unstable_getMiniflareWorkerOptions(configPath);
	const config = wrangler.unstable_readConfig({ config: configPath });
	return {
		host: "127.0.0.1",
		port: options.port,
		defaultPersistRoot: path.join(persistRoot, "v3"),
		// Miniflare's default logs each request by calling back into this process: wrangler dev turns it off too.
		logRequests: false,
		// No internet needed: the request's `cf` object is empty.
		cf: {},
		// /cdn-cgi/handler/scheduled, as under wrangler dev.
		unsafeTriggerHandlers: true,
		log: new Log(LogLevel.WARN),
		handleStructuredLogs({ level, message }) {
			(level === "warn" || level === "error" ? process.stderr : process.stdout).write(`${message}\n`);
		},
		workers: [
			{
				...workerOptions,
				name: config.name,
				modules: true,
				scriptPath: path.join(bundleDir, "index.js"),
				modulesRoot: bundleDir,
				// The bundle's index.js is an ES module (imported, a .js is CommonJS by default).
				modulesRules: [...(workerOptions.modulesRules ?? []), { type: "ESModule", include: ["**/*.js"] }],
				bindings: { ...workerOptions.bindings, ...devVars(), ...options.vars },
			},
		],
	};
}

/** This process's workerd children. */
function workerdPids() {
	const out = [];
	for (const entry of readdirSync("/proc")) {
		if (!/^\d+$/.test(entry)) continue;
		try {
			const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
			const close = stat.lastIndexOf(")");
			const [state, ppid] = stat.slice(close + 2).split(" ");
			if (Number(ppid) === process.pid && state !== "Z" && stat.slice(stat.indexOf("(") + 1, close).startsWith("workerd")) {
				out.push(Number(entry));
			}
		} catch {
			// exited while we looked
		}
	}
	return out;
}

let mf;
let stopping = false;
async function stop(code) {
	if (stopping) return;
	stopping = true;
	// The bundle first: the group's SIGKILL may come before dispose() is done.
	rmSync(bundleDir, { recursive: true, force: true });
	await mf?.dispose().catch(() => {});
	process.exit(code);
}
for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"]) process.on(signal, () => stop(0));

try {
	bundle();
	mf = new Miniflare(miniflareOptions());
	const url = await mf.ready;
	console.log(`gateway ready on ${url.href.replace(/\/$/, "")}`);
} catch (err) {
	console.error(err?.stack ?? String(err));
	await stop(1);
}

// Gone workerd (killed, crashed): this process goes too, so whoever started it sees the gateway stop.
let reloading = false;
if (existsSync("/proc")) {
	setInterval(() => {
		if (!stopping && !reloading && workerdPids().length === 0) {
			console.error("workerd exited: the gateway stopped");
			stop(1);
		}
	}, 500);
}

// An edit under src/ (or wrangler.toml, .dev.vars): rebuild and reload, as wrangler dev does.
if (options.watch) {
	let timer;
	const reload = async () => {
		if (stopping) return;
		reloading = true;
		try {
			process.stderr.write("change detected: rebuilding the gateway…\n");
			bundle();
			await mf.setOptions(miniflareOptions());
			process.stderr.write("gateway reloaded\n");
		} catch (err) {
			process.stderr.write(`reload failed (still serving the previous build): ${err?.message ?? err}\n`);
		} finally {
			reloading = false;
		}
	};
	const changed = () => {
		clearTimeout(timer);
		timer = setTimeout(reload, 300);
	};
	watch(path.join(ROOT, "src"), { recursive: true }, changed).unref();
	for (const file of ["wrangler.toml", ".dev.vars"]) {
		if (existsSync(path.join(ROOT, file))) watch(path.join(ROOT, file), changed).unref();
	}
}
