// What scripts/check-claude-code.mjs and scripts/check-codex.mjs share: a gateway to point an
// agent CLI at (a running one, or the development engine and `wrangler dev` with a catalog and a
// funded key), and running the CLI with a timeout.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startEngine } from "../dev/engine.mjs";
import { startGateway } from "../dev/gateway-process.mjs";

/**
 * `url` and `key` given: that gateway. Otherwise the development engine on ENGINE_PORT (default
 * `enginePort`) and `wrangler dev` on PORT (default `gatewayPort`) with `catalog(engineUrl)` as
 * GATEWAY_CONFIG, `vars` besides, and a $5 key named `name`. `close()` stops what was started.
 */
export async function checkGateway({ url, key, catalog, enginePort, gatewayPort, name, vars = {} }) {
	if (url && key) return { url: url.replace(/\/+$/, ""), key, close: async () => {} };
	const engine = await startEngine({ port: Number(process.env.ENGINE_PORT ?? enginePort) });
	const persistTo = await mkdtemp(join(tmpdir(), "venym-check-"));
	const adminToken = `check-${randomBytes(12).toString("hex")}`;
	const cleanUp = async () => {
		await engine.close();
		await rm(persistTo, { recursive: true, force: true });
	};
	let gw;
	try {
		gw = await startGateway({
			port: Number(process.env.PORT ?? gatewayPort),
			persistTo,
			timeoutMs: 120_000,
			vars: { GATEWAY_CONFIG: JSON.stringify(catalog(engine.url)), ADMIN_TOKEN: adminToken, ...vars },
		});
	} catch (err) {
		await cleanUp();
		throw err;
	}
	const close = async () => {
		await gw.close();
		await cleanUp();
	};
	const res = await fetch(`${gw.url}/admin/keys`, {
		method: "POST",
		headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
		body: JSON.stringify({ name, balance_usd: 5 }),
	});
	if (res.status !== 201) {
		const text = await res.text();
		await close();
		throw new Error(`creating a key failed: ${res.status} ${text}`);
	}
	return { url: gw.url, key: (await res.json()).key, close, adminToken };
}

/**
 * Runs `bin args…` with `env` (and `cwd`); resolves with its output (stdout and stderr), rejects
 * on a non-zero exit, a failure to start (`binEnv` names the variable that points at it) or after
 * `timeoutMs`.
 */
export function runCli({ bin, binEnv, args, env, cwd, timeoutMs = 180_000 }) {
	const label = `${bin} ${args.join(" ")}`;
	return new Promise((resolve, reject) => {
		const child = spawn(bin, args, { env, cwd, stdio: ["ignore", "pipe", "pipe"] });
		let out = "";
		const take = (d) => {
			out += d;
		};
		child.stdout.on("data", take);
		child.stderr.on("data", take);
		const timer = setTimeout(() => {
			child.kill("SIGKILL");
			reject(new Error(`${label} timed out after ${timeoutMs} ms:\n${out}`));
		}, timeoutMs);
		child.on("error", (err) => {
			clearTimeout(timer);
			reject(new Error(`could not run ${bin} (set ${binEnv}): ${err.message}`));
		});
		child.on("exit", (code) => {
			clearTimeout(timer);
			if (code === 0) resolve(out.trim());
			else reject(new Error(`${label} exited with ${code}:\n${out}`));
		});
	});
}
