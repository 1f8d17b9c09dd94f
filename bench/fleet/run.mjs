/**
 * npm run bench:fleet: the fleet simulator (issue 26). Simulated engines (bench/fleet/sim.mjs)
 * on a virtual clock, routed by the gateway's shipped routing code (src/routing/picker.ts,
 * rendezvous.ts, prefix-affinity.ts, bundled here with esbuild) and by three baselines.
 *
 *   npm run bench:fleet                       the defaults below, table on stdout
 *   npm run bench:fleet -- --write            also writes the table into bench/README.md
 *   npm run bench:fleet -- --nodes 16 --loads 0.8 --factor 1.5 --duration 600
 */
import { readFileSync, writeFileSync } from "node:fs";
import { build } from "esbuild";
import { prng, simulate } from "./sim.mjs";

const DEFAULTS = {
	nodes: 8,
	loads: "0.5,0.8,0.95",
	durationS: 600,
	warmupS: 120,
	seed: 26,
	// Engine: tokens/s of prefill, tokens/s of decode per sequence, sequences batched, prefix cache size.
	prefillTps: 20_000,
	decodeTps: 60,
	batch: 128,
	cacheTokens: 1_000_000,
	// Workload.
	turnsMin: 4,
	turnsMax: 12,
	answerMin: 50,
	answerMax: 800,
	userMin: 20,
	userMax: 400,
	apps: 5,
	appMin: 1000,
	appMax: 4000,
	sharedShare: 0.6,
	ownMin: 200,
	ownMax: 2000,
	keyShare: 0.2,
	thinkS: 5,
	// The gateway: routing.affinity_load_factor, and how often engine metrics refresh (health_check_interval_ms).
	factor: 1.25,
	metricsS: 10,
};

function parseArgs(argv) {
	const opts = { ...DEFAULTS, write: false };
	const camel = (s) => s.replace(/-([a-z])/g, (_, c) => c.toUpperCase());
	for (let i = 0; i < argv.length; i++) {
		const a = argv[i];
		if (a === "--write") opts.write = true;
		else if (a === "--help") {
			console.log(
				`flags (defaults): ${Object.entries(DEFAULTS)
					.map(([k, v]) => `--${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} ${v}`)
					.join(" ")} --write`,
			);
			process.exit(0);
		} else if (a.startsWith("--")) {
			let key = camel(a.slice(2));
			if (key === "duration" || key === "warmup" || key === "think" || key === "metrics") key = `${key}S`;
			if (!(key in DEFAULTS)) throw new Error(`unknown flag ${a}`);
			const v = argv[++i];
			opts[key] = key === "loads" ? v : Number(v);
		}
	}
	return opts;
}

async function load(relative) {
	const out = await build({
		entryPoints: [new URL(relative, import.meta.url).pathname],
		bundle: true,
		format: "esm",
		write: false,
		platform: "neutral",
	});
	return import(`data:text/javascript;base64,${Buffer.from(out.outputFiles[0].text).toString("base64")}`);
}

const routing = await load("./routing-entry.ts");

/** Mean prompt tokens and turns of the workload, by drawing sessions as the simulator does. */
function workloadMeans(o) {
	const r = prng(o.seed + 1);
	const apps = Array.from({ length: o.apps }, () => o.appMin + r() * (o.appMax - o.appMin));
	let prompts = 0;
	let requests = 0;
	let sessions = 0;
	for (let s = 0; s < 20_000; s++) {
		const sys = r() < o.sharedShare ? apps[Math.floor(r() * apps.length)] : o.ownMin + r() * (o.ownMax - o.ownMin);
		const turns = o.turnsMin + Math.floor(r() * (o.turnsMax - o.turnsMin + 1));
		let tokens = sys;
		for (let k = 0; k < turns; k++) {
			tokens += o.userMin + r() * (o.userMax - o.userMin);
			prompts += tokens;
			requests++;
			tokens += o.answerMin + r() * (o.answerMax - o.answerMin);
		}
		sessions++;
	}
	return { prompt: prompts / requests, turns: requests / sessions };
}

/**
 * The fleet's capacity in requests/s with no prefix cache: each node is bound by its prefill
 * (prefillTps / mean prompt) or by its decode slots (batch / mean decode time), whichever is less.
 */
function capacity(o, means) {
	const prefill = o.prefillTps / means.prompt;
	const slots = o.batch / ((o.answerMin + o.answerMax) / 2 / o.decodeTps);
	return o.nodes * Math.min(prefill, slots);
}

function views(nodes, metrics) {
	return nodes.map((n) => ({
		url: `node-${n.index}`,
		index: n.index,
		weight: 1,
		// The gateway's own count: what it sent and has not seen end.
		inFlight: n.load,
		coolingUntil: 0,
		failedAt: 0,
		healthy: true,
		// The engine's gauges, as last scraped.
		waiting: metrics ? n.reportedWaiting : 0,
		running: metrics ? n.reportedRunning : 0,
		kvCacheUsage: 0,
	}));
}

const keyOf = (req) => req.cacheKey ?? routing.prefixAffinityKey(req.body);

function policies(o) {
	let rr = 0;
	const random = prng(o.seed + 99);
	return {
		"round-robin": { pick: (nodes) => rr++ % nodes.length },
		"power of two": { pick: (nodes) => routing.powerOfTwo(views(nodes, false), random).index },
		"consistent hash": { pick: (nodes, req) => routing.rendezvousPick(keyOf(req), views(nodes, false)).index },
		gateway: {
			pick: (nodes, req, now) =>
				routing.pickRoute(views(nodes, true), { now, random, affinityKey: keyOf(req), loadFactor: o.factor }).node.index,
		},
	};
}

function percentile(sorted, p) {
	if (!sorted.length) return Number.NaN;
	return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
}

function summarize(result, o) {
	const inWindow = result.records.filter((r) => r.arrival >= o.warmupS && r.arrival < o.durationS);
	const ttft = inWindow.map((r) => r.ttft).sort((a, b) => a - b);
	const prompt = inWindow.reduce((s, r) => s + r.prompt, 0);
	const cached = inWindow.reduce((s, r) => s + r.cached, 0);
	const perNode = new Array(o.nodes).fill(0);
	for (const r of inWindow) perNode[r.node]++;
	const lastDone = Math.max(o.durationS, ...inWindow.map((r) => r.done));
	return {
		hit: cached / prompt,
		p50: percentile(ttft, 0.5),
		p99: percentile(ttft, 0.99),
		// Requests of the window per second of the time they took to be served.
		throughput: inWindow.length / (lastDone - o.warmupS),
		busiest: Math.max(...perNode) / (inWindow.length / o.nodes),
		requests: inWindow.length,
	};
}

const o = parseArgs(process.argv.slice(2));
const means = workloadMeans(o);
const cap = capacity(o, means);
const loads = o.loads.split(",").map(Number);
const rows = [];
for (const load of loads) {
	const sessionRate = (load * cap) / means.turns;
	for (const [name, policy] of Object.entries(policies(o))) {
		const started = Date.now();
		const result = simulate(policy, { ...o, sessionRate });
		rows.push({ load, policy: name, ...summarize(result, o), wallMs: Date.now() - started });
		const r = rows.at(-1);
		console.error(`load ${load} ${name}: ${r.requests} requests, ${r.wallMs} ms`);
	}
}

const fmt = (v, d = 2) => (Number.isFinite(v) ? v.toFixed(d) : "—");
const lines = [
	`Capacity (no prefix cache): ${cap.toFixed(1)} requests/s over ${o.nodes} nodes (mean prompt ${Math.round(means.prompt)} tokens, ${means.turns.toFixed(1)} turns a session).`,
	`Virtual ${o.durationS} s, first ${o.warmupS} s not counted, seed ${o.seed}, affinity_load_factor ${o.factor}, ${Math.round(o.keyShare * 100)}% of sessions with prompt_cache_key.`,
	"",
	"| load | policy | cache hit rate | TTFT p50 (s) | TTFT p99 (s) | throughput (req/s) | busiest node (× fair share) |",
	"|---|---|---|---|---|---|---|",
	...rows.map(
		(r) =>
			`| ${Math.round(r.load * 100)}% | ${r.policy} | ${(r.hit * 100).toFixed(1)}% | ${fmt(r.p50)} | ${fmt(r.p99)} | ${fmt(r.throughput, 1)} | ${fmt(r.busiest)} |`,
	),
];

const get = (load, policy) => rows.find((r) => r.load === load && r.policy === policy);
const checks = [];
const at80 = loads.includes(0.8);
if (at80) {
	const g = get(0.8, "gateway");
	const rr = get(0.8, "round-robin");
	checks.push(`80%: hit rate ${fmt(g.hit / rr.hit)}× round-robin's (target ≥ 2×): ${g.hit >= 2 * rr.hit ? "met" : "missed"}`);
	checks.push(`80%: TTFT p99 ${fmt(g.p99 / rr.p99)}× round-robin's (target ≤ 0.5×): ${g.p99 <= 0.5 * rr.p99 ? "met" : "missed"}`);
}
for (const load of loads) {
	const g = get(load, "gateway");
	checks.push(
		`${Math.round(load * 100)}%: busiest node ${fmt(g.busiest)}× a fair share (target ≤ 1.3×): ${g.busiest <= 1.3 ? "met" : "missed"}`,
	);
}
if (loads.includes(0.95)) {
	const g = get(0.95, "gateway");
	const p2 = get(0.95, "power of two");
	checks.push(`95%: TTFT p99 ${fmt(g.p99 / p2.p99)}× power of two's (target ≤ 2×): ${g.p99 <= 2 * p2.p99 ? "met" : "missed"}`);
}
lines.push("", ...checks.map((c) => `- ${c}`));
const table = lines.join("\n");
console.log(table);

if (o.write) {
	const path = new URL("../README.md", import.meta.url);
	const readme = readFileSync(path, "utf8");
	const begin = "<!-- fleet-table:begin -->";
	const end = "<!-- fleet-table:end -->";
	const at = readme.indexOf(begin);
	const stop = readme.indexOf(end);
	if (at < 0 || stop < 0) throw new Error("bench/README.md has no fleet-table markers");
	writeFileSync(path, `${readme.slice(0, at + begin.length)}\n${table}\n${readme.slice(stop)}`);
	console.error("bench/README.md updated");
}
