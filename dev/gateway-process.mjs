// Runs the gateway under `wrangler dev` with local D1 and Durable Objects: used by `npm start`
// and by the end-to-end tests. Migrations are applied to the same persistence folder first.
import { spawn, spawnSync } from "node:child_process";

const WRANGLER_ENV = { ...process.env, WRANGLER_SEND_METRICS: "false", NO_COLOR: "1", FORCE_COLOR: "0" };

function wranglerArgs(args) {
	return ["wrangler", ...args];
}

export function applyMigrations({ persistTo, quiet = false } = {}) {
	const args = ["d1", "migrations", "apply", "DB", "--local"];
	if (persistTo) args.push("--persist-to", persistTo);
	const r = spawnSync("npx", wranglerArgs(args), { env: { ...WRANGLER_ENV, CI: "true" }, stdio: quiet ? "pipe" : "inherit" });
	if (r.status !== 0) throw new Error(`wrangler d1 migrations apply failed:\n${r.stdout ?? ""}${r.stderr ?? ""}`);
}

async function waitUntilUp(url, child, timeoutMs) {
	const start = Date.now();
	while (Date.now() - start < timeoutMs) {
		if (child.exitCode !== null) throw new Error(`wrangler dev exited with ${child.exitCode}`);
		try {
			const res = await fetch(`${url}/healthz`);
			if (res.ok) return;
		} catch {
			// not listening yet
		}
		await new Promise((r) => setTimeout(r, 200));
	}
	throw new Error(`gateway did not start on ${url} within ${timeoutMs} ms`);
}

/**
 * Starts `wrangler dev`. `vars` are passed with --var (they override wrangler.toml and .dev.vars).
 * Resolves once /healthz answers; `close()` stops it.
 */
/**
 * @param {{ port?: number, persistTo?: string, vars?: Record<string, string>, quiet?: boolean, echoLogs?: boolean, timeoutMs?: number }} [options]
 * `echoLogs`: with `quiet`, still print the worker's own JSON log lines (README "Logs"), one per
 * line as wrangler relays them, and nothing else of wrangler's output.
 */
export async function startGateway({
	port = 8787,
	persistTo,
	vars = {},
	quiet = true,
	echoLogs = false,
	timeoutMs = 60_000,
} = {}) {
	applyMigrations({ persistTo, quiet });
	const args = ["dev", "--port", String(port), "--ip", "127.0.0.1", "--show-interactive-dev-session=false"];
	if (persistTo) args.push("--persist-to", persistTo);
	for (const [k, v] of Object.entries(vars)) args.push("--var", `${k}:${v}`);
	const child = spawn("npx", wranglerArgs(args), { env: WRANGLER_ENV, stdio: ["ignore", "pipe", "pipe"], detached: true });
	let log = "";
	const collect = (d) => {
		log += d;
		if (log.length > 200_000) log = log.slice(-100_000);
		if (!quiet) process.stdout.write(d);
	};
	let partial = "";
	const echo = (d) => {
		const lines = (partial + d).split("\n");
		partial = lines.pop() ?? "";
		for (const line of lines) if (line.startsWith("{")) process.stdout.write(`${line}\n`);
	};
	child.stdout.on("data", (d) => {
		collect(d);
		if (quiet && echoLogs) echo(String(d));
	});
	child.stderr.on("data", collect);
	const url = `http://127.0.0.1:${port}`;
	try {
		await waitUntilUp(url, child, timeoutMs);
	} catch (err) {
		try {
			process.kill(-child.pid, "SIGTERM");
		} catch {}
		throw new Error(`${err.message}\n--- wrangler output ---\n${log}`);
	}
	return {
		url,
		/** wrangler's process id, which is also its process group's (tests find workerd under it). */
		pid: child.pid,
		log: () => log,
		close: () =>
			new Promise((resolve) => {
				if (child.exitCode !== null) return resolve();
				child.once("exit", () => resolve());
				try {
					process.kill(-child.pid, "SIGTERM");
				} catch {
					resolve();
				}
				setTimeout(() => {
					try {
						process.kill(-child.pid, "SIGKILL");
					} catch {}
				}, 3000).unref();
			}),
	};
}
