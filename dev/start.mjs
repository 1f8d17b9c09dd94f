// `npm start`: the development engine on :8788, the gateway on :8787 (local D1 and Durable
// Objects under .wrangler/state, served by dev/gateway-host.mjs), and a ready-to-use key. Nothing outside this machine is needed.
// `npm start -- --nodes 3` (or `--nodes ok,slow,fail500`) serves the dev model from that many
// engine nodes (named nodes of the one engine, dev/engine-nodes.mjs), to watch routing locally.
// `--persist-to <dir>` keeps the local D1 and Durable Objects there instead of .wrangler/.
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { startEngine } from "./engine.mjs";
import { startGateway } from "./gateway-process.mjs";
import { readLocalCatalog } from "./local-catalog.mjs";
import { watchAncestors } from "./process-group.mjs";

const GATEWAY_PORT = Number(process.env.PORT ?? 8787);
const ENGINE_PORT = Number(process.env.ENGINE_PORT ?? 8788);
const { values: args } = parseArgs({ options: { nodes: { type: "string" }, "persist-to": { type: "string" } } });

// Ctrl-C, SIGTERM and SIGHUP stop everything this started, at any point: during the start too; so
// does the end of npm (`npm start`) or of whatever started this, however it ended (npm passes
// SIGTERM on to its shell only, and a SIGKILL nowhere), and so does the gateway stopping by itself.
const stopping = new AbortController();
/** @type {Awaited<ReturnType<typeof startEngine>> | undefined} */
let engine;
/** @type {ReturnType<typeof startGateway> | undefined} */
let gatewayStart;
async function stop(code = 0) {
	if (stopping.signal.aborted) return;
	stopping.abort();
	// The gateway first (a start under way gives up and stops its processes): it holds connections to the engine.
	const gateway = await gatewayStart?.catch(() => undefined);
	await gateway?.close();
	await engine?.close();
	process.exit(code);
}
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(signal, () => stop());
watchAncestors(() => {
	console.error("npm start: its parent process is gone; stopping");
	stop();
});

/** `--nodes 3` → three "ok" nodes; `--nodes ok,slow,fail500` → one node a scenario. */
function nodeScenarios(spec) {
	if (!spec) return [];
	if (/^\d+$/.test(spec)) return Array.from({ length: Math.max(1, Number(spec)) }, () => "ok");
	return spec.split(",").map((s) => s.trim() || "ok");
}

const LOCAL = /^http:\/\/(127\.0\.0\.1|localhost):\d+/;

/**
 * wrangler.toml's catalog pointed at this engine: local URLs get ENGINE_PORT, and with named nodes
 * (`--nodes`) every locally served model is spread over them.
 */
function localConfig(catalog, names) {
	const config = structuredClone(catalog);
	const here = (url) => url.replace(LOCAL, `http://127.0.0.1:${ENGINE_PORT}`);
	for (const model of config.models) {
		const urls = model.nodes.map((n) => (typeof n === "string" ? n : n.url));
		if (!urls.some((u) => LOCAL.test(u))) continue;
		model.nodes = names.length
			? names.map((n) => `http://127.0.0.1:${ENGINE_PORT}/n/${n}/v1`)
			: model.nodes.map((n) => (typeof n === "string" ? here(n) : { ...n, url: here(n.url) }));
	}
	if (config.web_search?.url) config.web_search.url = here(config.web_search.url);
	// Short enough to watch a node fail and recover.
	if (names.length) config.routing = { health_check_interval_ms: 2000, cooldown_ms: 10_000, ...config.routing };
	return config;
}

/** A secret from .dev.vars, generated into it on first start. */
function devVar(name, make) {
	const existing = existsSync(".dev.vars") ? readFileSync(".dev.vars", "utf8") : "";
	const m = new RegExp(`^${name}=(.+)$`, "m").exec(existing);
	if (m) return m[1].trim().replace(/^"|"$/g, "");
	const value = make();
	writeFileSync(".dev.vars", `${existing}${existing && !existing.endsWith("\n") ? "\n" : ""}${name}=${value}\n`);
	return value;
}

const token = devVar("ADMIN_TOKEN", () => `dev-admin-${randomBytes(12).toString("hex")}`);
// Seals reasoning for stateless Responses clients (Codex), so a local Codex session round-trips it.
devVar("REASONING_SEAL_SECRET", () => randomBytes(32).toString("hex"));
const catalog = readLocalCatalog();
engine = await startEngine({ port: ENGINE_PORT, quiet: true });
console.log(`development engine on ${engine.url}`);
const scenarios = nodeScenarios(args.nodes ?? process.env.VENYM_DEV_NODES);
const names = scenarios.map((_, i) => `node-${i + 1}`);
const vars = {};
for (const [i, name] of names.entries()) {
	await fetch(`${engine.url}/_engine/nodes/${name}`, { method: "POST", body: JSON.stringify({ scenario: scenarios[i] }) });
}
// VENYM_CLIENT_IDLE_TIMEOUT_MS: how long a stream whose client stopped reading keeps its hold (the
// config's client_idle_timeout_ms, 300 s by default). Local workerd never reports some vanished
// clients: their streams just stop being read, and end at this timeout (the tooling test's wave).
const idle = Number(process.env.VENYM_CLIENT_IDLE_TIMEOUT_MS);
if (names.length || ENGINE_PORT !== 8788 || idle > 0) {
	const config = localConfig(catalog, names);
	if (idle > 0) config.client_idle_timeout_ms = idle;
	vars.GATEWAY_CONFIG = JSON.stringify(config);
}
console.log("starting the gateway (workerd, local D1 and Durable Objects)…");
gatewayStart = startGateway({
	port: GATEWAY_PORT,
	persistTo: args["persist-to"],
	quiet: true,
	echoLogs: true,
	timeoutMs: 120_000,
	vars,
	signal: stopping.signal,
	watch: true,
	onExit: (code) => {
		console.error(`the gateway stopped (exit code ${code}); stopping the engine`);
		stop(1);
	},
});
const gateway = await gatewayStart.catch(async (err) => {
	if (!stopping.signal.aborted) {
		console.error(err.message);
		await stop(1);
	}
	return new Promise(() => {}); // stop() finishes and exits
});

const res = await fetch(`${gateway.url}/admin/keys`, {
	method: "POST",
	headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
	body: JSON.stringify({ name: `dev ${new Date().toISOString()}`, balance_usd: 10 }),
});
if (res.status !== 201) {
	console.error(`could not create a key: ${res.status} ${await res.text()}`);
	console.error(gateway.log());
	await stop(1);
}
const key = await res.json();

console.log(`
Venym gateway on http://localhost:${GATEWAY_PORT}  (admin token in .dev.vars)

  API key (balance $${key.balance_usd}): ${key.key}

  curl http://localhost:${GATEWAY_PORT}/v1/chat/completions \\
    -H "Authorization: Bearer ${key.key}" -H "Content-Type: application/json" \\
    -d '{"model":"venym/dev-echo","messages":[{"role":"user","content":"Hello!"}]}'

  OpenAI SDK: new OpenAI({ baseURL: "http://localhost:${GATEWAY_PORT}/v1", apiKey: "${key.key}" })

  Models (wrangler.toml): ${catalog.models.map((m) => m.id).join(", ")}

  The hourly Cron Trigger (usage retention) does not fire locally: \`npm run maintenance\` runs it.

Ctrl-C stops both.`);

// A model with a fallback on a named node of this engine: how to watch the fallback answer.
const withFallback = catalog.models.find((m) => m.fallbacks?.length && /\/n\/[^/]+\/v1$/.test(String(m.nodes[0])));
if (!names.length && withFallback) {
	const node = /\/n\/([^/]+)\/v1$/.exec(String(withFallback.nodes[0]))?.[1];
	console.log(`
  see a fallback:    curl -X POST ${engine.url}/_engine/nodes/${node} -d '{"scenario":"fail500"}'
                     (${withFallback.id}'s node fails, ${withFallback.fallbacks[0]} answers; undo: -d '{"reset":true}')`);
}

if (names.length) {
	const control = `${engine.url}/_engine/nodes`;
	console.log(`
Engine fleet: ${names.map((n, i) => `${n} (${scenarios[i]})`).join(", ")} at ${engine.url}/n/<name>/v1

  watch the router:  curl -H "Authorization: Bearer ${token}" http://localhost:${GATEWAY_PORT}/admin/nodes
  make one slow:     curl -X POST ${control}/node-1 -d '{"scenario":"slow"}'
  make one fail:     curl -X POST ${control}/node-1 -d '{"scenario":"fail500"}'   (or "hang", "fail503")
  give one a queue:  curl -X POST ${control}/node-1 -d '{"queue":{"waiting":20,"running":8}}'
  back to normal:    curl -X POST ${control}/node-1 -d '{"reset":true}'
  requests per node: curl ${control}
  drain one:         curl -X PATCH -H "Authorization: Bearer ${token}" http://localhost:${GATEWAY_PORT}/admin/nodes \\
                       -d '{"url":"${engine.url}/n/node-1/v1","drain":true}'`);
}
