// Runs the gateway locally with local D1 and Durable Objects: used by `npm start` and by the
// end-to-end tests. Migrations are applied to the persistence folder first (`wrangler d1
// migrations apply --local`), then dev/gateway-host.mjs serves the Worker from workerd through the
// Miniflare API: no `wrangler dev`, whose proxy in front of the Worker keeps what vanished clients
// never read (issue 33). The host runs in a process group of its own: close() stops the whole group
// (the host and its workerd), and a watchdog (dev/group-watchdog.mjs) stops it if this process dies first.
import { spawn, spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { stopGroup } from "./process-group.mjs";

const WRANGLER_ENV = { ...process.env, WRANGLER_SEND_METRICS: "false", NO_COLOR: "1", FORCE_COLOR: "0" };

// wrangler's own entry, run by this Node: `npx wrangler` costs seconds of npm's start on every call.
const WRANGLER = fileURLToPath(new URL("../node_modules/wrangler/bin/wrangler.js", import.meta.url));

export function applyMigrations({ persistTo, quiet = false } = {}) {
	const args = ["d1", "migrations", "apply", "DB", "--local"];
	if (persistTo) args.push("--persist-to", persistTo);
	const r = spawnSync(process.execPath, [WRANGLER, ...args], {
		env: { ...WRANGLER_ENV, CI: "true" },
		stdio: quiet ? "pipe" : "inherit",
	});
	if (r.status !== 0) throw new Error(`wrangler d1 migrations apply failed:\n${r.stdout ?? ""}${r.stderr ?? ""}`);
}

async function waitUntilUp(url, child, timeoutMs, signal) {
	const start = Date.now();
	while (Date.now() - start < timeoutMs) {
		if (signal?.aborted) throw new Error("stopped before the gateway was up");
		if (child.exitCode !== null) throw new Error(`the gateway host exited with ${child.exitCode}`);
		try {
			const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(5000) });
			if (res.ok) return;
		} catch {
			// not listening yet
		}
		await new Promise((r) => setTimeout(r, 200));
	}
	throw new Error(`gateway did not start on ${url} within ${timeoutMs} ms`);
}

/** Starts the watchdog that stops group `pgid` when this process is gone (dev/group-watchdog.mjs). */
function startWatchdog(pgid) {
	const script = fileURLToPath(new URL("./group-watchdog.mjs", import.meta.url));
	const watchdog = spawn(process.execPath, [script, String(pgid)], { stdio: ["pipe", "ignore", "ignore"], detached: true });
	watchdog.unref();
	// Its stdin pipe is how it learns this process is gone; close() releases it (until then the
	// pipe keeps this process running, as the gateway does).
	watchdog.stdin.on("error", () => {});
	return { release: () => watchdog.stdin.destroy() };
}

/**
 * Splits a stream into lines and hands each complete one to `onLine` (the last, partial one waits
 * for the rest).
 */
function lineSplitter(onLine) {
	let partial = "";
	return (d) => {
		const lines = (partial + d).split("\n");
		partial = lines.pop() ?? "";
		if (partial.length > 100_000) partial = "";
		for (const line of lines) onLine(line);
	};
}

const HOST = fileURLToPath(new URL("./gateway-host.mjs", import.meta.url));

/**
 * Starts the gateway (dev/gateway-host.mjs). `vars` override wrangler.toml's [vars] and .dev.vars.
 * Resolves once /healthz answers; `close()` stops it: every process of its group, SIGKILL for
 * what SIGTERM left after 2 s, resolved once none is left. `signal` aborts a start still waiting
 * for /healthz (the group is stopped and the promise rejects). `watch`: reload on edits under src/.
 * `onExit` is called if the gateway stops by itself (its workerd killed or crashed), not after close().
 * @param {{ port?: number, persistTo?: string, vars?: Record<string, string>, quiet?: boolean, echoLogs?: boolean, timeoutMs?: number, signal?: AbortSignal, watch?: boolean, onExit?: (code: number | null) => void }} [options]
 * `echoLogs`: with `quiet`, still print the worker's own JSON log lines (docs/operations.md "Logs")
 * on stdout, and its warnings and errors (and the host's own) on stderr, but not the rest.
 * @returns {Promise<{ url: string, pgid: number, log: () => string, close: () => Promise<void> }>}
 */
export async function startGateway({
	port = 8787,
	persistTo,
	vars = {},
	quiet = true,
	echoLogs = false,
	timeoutMs = 60_000,
	signal,
	watch = false,
	onExit,
} = {}) {
	applyMigrations({ persistTo, quiet });
	const spec = JSON.stringify({ port, persistTo, vars, watch });
	// Its own process group (detached): Ctrl-C in a terminal reaches only this process, which then
	// stops the whole group, so the host's own signal handling never decides what is left running.
	const child = spawn(process.execPath, [HOST], {
		env: { ...WRANGLER_ENV, VENYM_GATEWAY_HOST: spec },
		stdio: ["ignore", "pipe", "pipe"],
		detached: true,
	});
	const pgid = /** @type {number} */ (child.pid);
	// Decoded as streams: a character split between two reads stays whole.
	child.stdout.setEncoding("utf8");
	child.stderr.setEncoding("utf8");
	const watchdog = startWatchdog(pgid);
	let log = "";
	const collect = (d) => {
		log += d;
		if (log.length > 200_000) log = log.slice(-100_000);
		if (!quiet) process.stdout.write(d);
	};
	const echoJson = lineSplitter((line) => {
		if (line.startsWith("{")) process.stdout.write(`${line}\n`);
	});
	// Everything on the host's stderr is a warning or an error (the worker's console.warn/error
	// lines, Miniflare's and the host's own): all of it is shown.
	const echoErr = lineSplitter((line) => {
		if (line.trim()) process.stderr.write(`${line}\n`);
	});
	child.stdout.on("data", (d) => {
		collect(d);
		if (quiet && echoLogs) echoJson(String(d));
	});
	child.stderr.on("data", (d) => {
		collect(d);
		if (quiet && echoLogs) echoErr(String(d));
	});
	let closing;
	const close = () => {
		closing ??= stopGroup(pgid, { graceMs: 2000 }).then(() => watchdog.release());
		return closing;
	};
	child.once("exit", (code) => {
		if (!closing) onExit?.(code);
	});
	const url = `http://127.0.0.1:${port}`;
	try {
		await waitUntilUp(url, child, timeoutMs, signal);
	} catch (err) {
		await close();
		throw new Error(`${err.message}\n--- gateway output ---\n${log}`);
	}
	return { url, pgid, log: () => log, close };
}
