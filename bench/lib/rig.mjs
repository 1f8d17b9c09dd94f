// Starts the three targets the bench compares: the fake engine (own process), the floor
// and the gateway (own workerd processes, hosted by bench/lib/workerd-host.mjs).
import { fork, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { makeAgent } from "./http.mjs";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const LIB = fileURLToPath(new URL(".", import.meta.url));

export const ADMIN_TOKEN = "bench-admin-token";
export const GW_MODEL = "venym/bench";
export const GW_PACED_MODEL = "venym/bench-paced";
export const ENGINE_MODEL = "bench-echo";

const children = [];
export function killChildren() {
	for (const child of children) {
		if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
	}
}
process.on("exit", killChildren);
process.on("SIGINT", () => {
	killChildren();
	process.exit(130);
});

function startChild(file) {
	const child = fork(file, [], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
	children.push(child);
	let nextId = 1;
	const pending = new Map();
	child.on("message", (msg) => {
		const p = msg?.id && pending.get(msg.id);
		if (!p) return;
		pending.delete(msg.id);
		if (msg.ok) p.resolve(msg.value);
		else p.reject(new Error(msg.error));
	});
	child.on("exit", (code) => {
		for (const p of pending.values()) p.reject(new Error(`${path.basename(file)} exited with ${code}`));
	});
	const ready = new Promise((resolve, reject) => {
		child.once("message", resolve);
		child.once("exit", (code) => reject(new Error(`${path.basename(file)} exited with ${code} before it was ready`)));
	});
	const rpc = (type, args) =>
		new Promise((resolve, reject) => {
			const id = nextId++;
			pending.set(id, { resolve, reject });
			child.send({ type, id, args });
		});
	return { child, ready, rpc };
}

/** `wrangler deploy --dry-run --outdir <outdir>`: the exact bundle a deploy would upload. */
export function buildBundle(outdir) {
	const wranglerBin = createRequire(import.meta.url).resolve("wrangler/bin/wrangler.js");
	const r = spawnSync(process.execPath, [wranglerBin, "deploy", "--dry-run", "--outdir", outdir], {
		cwd: ROOT,
		env: { ...process.env, WRANGLER_SEND_METRICS: "false", NO_COLOR: "1", CI: "true" },
		encoding: "utf8",
	});
	if (r.status !== 0) throw new Error(`wrangler deploy --dry-run failed:\n${r.stdout}\n${r.stderr}`);
	return outdir;
}

function gatewayConfig(engineUrl, paceMs) {
	const model = (id, node) => ({
		id,
		engine_model: ENGINE_MODEL,
		nodes: [node],
		max_output_tokens: 8192,
		context_length: 131072,
		pricing: { input_usd_per_mtok: 0.3, output_usd_per_mtok: 1.2 },
		capabilities: ["json", "tools"],
	});
	return { models: [model(GW_MODEL, `${engineUrl}/v1`), model(GW_PACED_MODEL, `${engineUrl}/p/${paceMs}/v1`)] };
}

/**
 * Builds the bundle, starts engine, floor and gateway, and creates a funded key.
 * `maxSockets` sizes each target's keep-alive pool; `inspectorPort` opens the gateway's
 * DevTools inspector (bench/profile.mjs only: it slows workerd down).
 */
export async function startRig({ paceMs, maxSockets, bundleDir, inspectorPort, log = () => {} }) {
	const stateDir = mkdtempSync(path.join(os.tmpdir(), "venym-bench-"));
	let engine;
	let host;
	const stop = async () => {
		await host?.rpc("stop").catch(() => {});
		engine?.child.send({ type: "stop" });
		rmSync(stateDir, { recursive: true, force: true });
	};
	try {
		log("building the bundle (wrangler deploy --dry-run --outdir)");
		const bundle = bundleDir ?? buildBundle(path.join(stateDir, "bundle"));
		engine = startChild(path.join(LIB, "engine-process.mjs"));
		const engineInfo = await engine.ready;
		host = startChild(path.join(LIB, "workerd-host.mjs"));
		await host.ready;
		const info = await host.rpc("start", {
			bundleDir: bundle,
			engineUrl: engineInfo.url,
			stateDir,
			adminToken: ADMIN_TOKEN,
			gatewayConfig: gatewayConfig(engineInfo.url, paceMs),
			inspectorPort,
		});
		log(
			`engine ${engineInfo.url} (pid ${engineInfo.pid}); floor ${info.floorUrl} (workerd pid ${info.floorPid}); ` +
				`gateway ${info.gatewayUrl} (workerd pid ${info.gatewayPid})`,
		);
		const created = await fetch(`${info.gatewayUrl}/admin/keys`, {
			method: "POST",
			headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
			body: JSON.stringify({ name: "bench", balance_usd: 1e6 }),
		});
		if (created.status !== 201) throw new Error(`POST /admin/keys: ${created.status} ${await created.text()}`);
		const key = await created.json();
		const mk = (name, url) => ({ name, url, key: key.key, agent: makeAgent(maxSockets), bodies: {} });
		return {
			targets: [mk("direct", engineInfo.url), mk("floor", info.floorUrl), mk("gateway", info.gatewayUrl)],
			pids: { floor: info.floorPid, gateway: info.gatewayPid, engine: engineInfo.pid },
			key,
			info,
			bundleDir: bundle,
			rpc: host.rpc,
			stop,
		};
	} catch (err) {
		await stop();
		throw err;
	}
}
