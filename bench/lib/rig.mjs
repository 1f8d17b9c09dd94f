// Starts the targets the bench compares: the fake engine (own process), the floor and the
// gateway (own workerd processes, hosted by bench/lib/workerd-host.mjs), one more gateway per
// variant (--variant: its own workerd and GATEWAY_CONFIG), and Portkey's gateway (own Node
// process, bench/lib/portkey-process.mjs) unless it is left out.
import { fork, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
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
/** The `minimal` target's one key (bench/workers/minimal.mjs looks up its SHA-256 digest). */
const MINIMAL_KEY = "vk-bench-minimal-0123456789abcdef";

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

function startChild(file, { quiet = false } = {}) {
	const child = fork(file, [], { stdio: ["ignore", quiet ? "ignore" : "inherit", "inherit", "ipc"] });
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
 * Named variants for --variant <name> (without "=json"). `{engine}` stands for the engine's
 * base URL; `/n/<label>` is a path prefix the bench engine drops (several node URLs, one engine).
 */
export const VARIANT_PRESETS = {
	// Issue 16 "before": edge allowances off (GATEWAY_CONFIG ledger.allowance_ttl_ms 0), so every
	// request takes the synchronous hold from the ledger before the engine call.
	"gateway-sync": { ledger: { allowance_ttl_ms: 0 } },
	// Issue 13 A/B: the bench model routed over three weighted object nodes (the main gateway has one plain-string node).
	routed3: {
		models: [
			{
				id: GW_MODEL,
				nodes: [
					{ url: "{engine}/n/a/v1", weight: 1 },
					{ url: "{engine}/n/b/v1", weight: 2 },
					{ url: "{engine}/n/c/v1", weight: 3 },
				],
			},
		],
	},
};

/**
 * Where a gateway target's Durable Objects and D1 run (bench/README.md "Layouts"): "split", the
 * production layout, puts them in a second workerd process; "single" keeps them on the gateway's
 * one workerd thread (the rig before issue 39). "split-router" is "split" with the static-assets
 * router left in the gateway's process (to measure what moving it saves).
 */
export const LAYOUTS = ["split", "single", "split-router"];
export const DEFAULT_LAYOUT = "split";

/** Variant presets that change the layout, not the config: the same bundle and GATEWAY_CONFIG. */
const LAYOUT_PRESETS = { "gateway-single": "single", "gateway-split": "split", "gateway-split-router": "split-router" };

export function checkLayout(layout) {
	if (!LAYOUTS.includes(layout)) throw new Error(`layout ${layout}: one of ${LAYOUTS.join(", ")}`);
	return layout;
}

/** `name=<json>` or a preset name → {name, patch, layout?}. */
export function parseVariant(arg) {
	const eq = arg.indexOf("=");
	const name = eq < 0 ? arg : arg.slice(0, eq);
	if (!/^[a-z0-9][a-z0-9-]*$/i.test(name) || ["direct", "floor", "gateway", "portkey", "engine"].includes(name)) {
		throw new Error(`--variant ${arg}: the name must be [a-z0-9-]+ and not a target's name`);
	}
	if (eq < 0 && LAYOUT_PRESETS[name]) return { name, patch: {}, layout: LAYOUT_PRESETS[name] };
	if (eq < 0) {
		const patch = VARIANT_PRESETS[name];
		if (!patch)
			throw new Error(
				`--variant ${name}: no such preset (${[...Object.keys(VARIANT_PRESETS), ...Object.keys(LAYOUT_PRESETS)].join(", ")}); use name=<json>`,
			);
		return { name, patch };
	}
	return { name, patch: JSON.parse(arg.slice(eq + 1)) };
}

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

/**
 * The bench GATEWAY_CONFIG with a variant's patch merged in: objects merge key by key, arrays
 * and scalars replace, except `models`, whose entries merge into the model with the same `id`
 * (or are added). `{engine}` in any string becomes the engine's base URL.
 */
export function mergeConfig(base, patch, engineUrl) {
	const fill = (v) =>
		typeof v === "string"
			? v.replaceAll("{engine}", engineUrl)
			: Array.isArray(v)
				? v.map(fill)
				: isObject(v)
					? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, fill(x)]))
					: v;
	const merge = (a, b) => {
		if (!isObject(a) || !isObject(b)) return b;
		const out = { ...a };
		for (const [k, v] of Object.entries(b)) out[k] = k in a ? merge(a[k], v) : v;
		return out;
	};
	const p = fill(patch);
	const out = merge(base, { ...p, models: undefined });
	if (p.models === undefined) {
		out.models = base.models;
		return out;
	}
	out.models = base.models.map((m) => merge(m, p.models.find((pm) => pm.id === m.id) ?? {}));
	for (const pm of p.models) if (!base.models.some((m) => m.id === pm.id)) out.models.push(pm);
	return out;
}

/** The headers that point Portkey at the engine, per request (its "custom host"). */
const portkeyHeaders = (engineUrl) => ({ "x-portkey-provider": "openai", "x-portkey-custom-host": `${engineUrl}/v1` });

/**
 * Where the gateways' D1 and Durable Object storage live: a tmpfs (/dev/shm) when the host has
 * one. On a VM disk each ledger commit's SQLite write blocks workerd's one thread (about 1 ms p50
 * per request on the dev box, bench/HISTORY.md "Session 6"); on Cloudflare a Durable Object's
 * storage write does not stall the Worker's thread on a local disk, so a disk here measures the
 * host, not the gateway. `--state-dir <dir>` puts it elsewhere (`--state-dir /tmp` for the disk).
 */
function defaultStateRoot() {
	return existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir();
}

/**
 * Builds the bundle, starts engine, floor, gateway (and its variants) and Portkey, and creates
 * a funded key on each gateway. `maxSockets` sizes each target's keep-alive pool;
 * `inspectorPort` opens the main gateway's DevTools inspector (bench/profile.mjs only: it slows
 * workerd down). `variants`: [{name, patch, bundleDir?, layout?}] (parseVariant; a bundleDir runs another build, bench/ablate.mjs). `portkey`: start Portkey's gateway.
 * `layout`: the gateways' layout ("split" or "single", LAYOUTS; a variant's own `layout` wins).
 *
 * Each target: {name, kind: "direct"|"floor"|"gateway"|"portkey", url, key, agent, headers,
 * stream (false: not in stream phases), instance (gateways: the workerd-host instance name)}.
 */
export async function startRig({
	paceMs,
	maxSockets,
	bundleDir,
	inspectorPort,
	variants = [],
	portkey = false,
	layout = DEFAULT_LAYOUT,
	stateRoot = defaultStateRoot(),
	log = () => {},
}) {
	const stateDir = mkdtempSync(path.join(stateRoot, "venym-bench-"));
	let engine;
	let host;
	let pk;
	const stop = async () => {
		await host?.rpc("stop").catch(() => {});
		engine?.child.send({ type: "stop" });
		pk?.child.send({ type: "stop" });
		rmSync(stateDir, { recursive: true, force: true });
	};
	try {
		log("building the bundle (wrangler deploy --dry-run --outdir)");
		const bundle = bundleDir ?? buildBundle(path.join(stateDir, "bundle"));
		engine = startChild(path.join(LIB, "engine-process.mjs"));
		const engineInfo = await engine.ready;
		// Portkey starts (about 2.5 s: its banner waits on a spinner) while workerd does.
		if (portkey) pk = startChild(path.join(LIB, "portkey-process.mjs"), { quiet: true });
		host = startChild(path.join(LIB, "workerd-host.mjs"));
		await host.ready;
		const base = gatewayConfig(engineInfo.url, paceMs);
		const specs = [
			{ name: "gateway", gatewayConfig: base },
			...variants.map((v) => ({
				name: v.name,
				gatewayConfig: mergeConfig(base, v.patch ?? {}, engineInfo.url),
				...(v.bundleDir ? { bundleDir: v.bundleDir } : {}),
				...(v.layout ? { layout: checkLayout(v.layout) } : {}),
			})),
		];
		const info = await host.rpc("start", {
			bundleDir: bundle,
			engineUrl: engineInfo.url,
			stateDir,
			adminToken: ADMIN_TOKEN,
			gateways: specs,
			inspectorPort,
			layout: checkLayout(layout),
			minimalBindings: { KEY: MINIMAL_KEY, GW_MODEL, GW_PACED_MODEL, ENGINE_MODEL, PACE_MS: String(paceMs) },
		});
		const pkInfo = pk ? await pk.ready : null;
		log(
			`engine ${engineInfo.url} (pid ${engineInfo.pid}); floor ${info.floorUrl} (workerd pid ${info.floorPid}); ` +
				[
					`minimal ${info.minimalUrl} (workerd pid ${info.minimalPid})`,
					...info.gateways.map(
						(g) =>
							`${g.name} ${g.url} (${g.layout}: workerd pid ${g.pid}${g.ledgerPid ? `, its Durable Objects and D1 pid ${g.ledgerPid}` : ""})`,
					),
				].join("; ") +
				(pkInfo ? `; portkey ${pkInfo.version} ${pkInfo.url} (node pid ${pkInfo.pid})` : ""),
		);
		const targets = [
			{ name: "direct", kind: "direct", url: engineInfo.url },
			{ name: "floor", kind: "floor", url: info.floorUrl },
			{ name: "minimal", kind: "minimal", url: info.minimalUrl, key: MINIMAL_KEY },
		];
		if (pkInfo)
			targets.push({ name: "portkey", kind: "portkey", url: pkInfo.url, headers: portkeyHeaders(engineInfo.url), stream: false });
		const keys = {};
		for (const g of info.gateways) {
			const created = await fetch(`${g.url}/admin/keys`, {
				method: "POST",
				headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
				body: JSON.stringify({ name: "bench", balance_usd: 1e6 }),
			});
			if (created.status !== 201) throw new Error(`${g.name}: POST /admin/keys: ${created.status} ${await created.text()}`);
			keys[g.name] = await created.json();
			targets.push({
				name: g.name,
				kind: "gateway",
				url: g.url,
				key: keys[g.name].key,
				instance: g.name,
				layout: g.layout,
				// The split layout's second process (Durable Objects, D1): its CPU is `pids[ledgerPidName]`.
				ledgerPidName: g.ledgerPid ? `${g.name}-ledger` : null,
				config: specs.find((s) => s.name === g.name).gatewayConfig,
			});
		}
		const key = keys.gateway;
		for (const t of targets) {
			t.key ??= key.key;
			t.agent = makeAgent(maxSockets);
			t.bodies = {};
			t.stream ??= true;
		}
		const pids = { floor: info.floorPid, minimal: info.minimalPid, engine: engineInfo.pid };
		for (const g of info.gateways) {
			pids[g.name] = g.pid;
			if (g.ledgerPid) pids[`${g.name}-ledger`] = g.ledgerPid;
		}
		if (pkInfo) pids.portkey = pkInfo.pid;
		return {
			targets,
			pids,
			key,
			keys,
			info: { ...info, portkeyVersion: pkInfo?.version ?? null, engineUrl: engineInfo.url },
			bundleDir: bundle,
			stateDir,
			rpc: host.rpc,
			stop,
		};
	} catch (err) {
		await stop();
		throw err;
	}
}
