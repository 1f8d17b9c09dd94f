/**
 * npm run bench:fleet: the fleet simulator (issues 26, 39). Simulated vLLM/SGLang-like engines
 * (engine.mjs: a paged KV cache that fills and evicts, continuous batching, chunked prefill) on a
 * virtual clock, fed by three workloads (workloads.mjs: llm-d's precise-prefix-cache workload,
 * SGLang's generated-shared-prefix dataset, ours) and routed by the gateway's shipped code
 * (src/routing/picker.ts and the modules it uses, bundled here with esbuild) and by round-robin,
 * random and an oracle (policies.mjs). Seeded: the same flags give the same table on any machine.
 *
 *   npm run bench:fleet                          every workload, table on stdout
 *   npm run bench:fleet -- --write               also writes it into bench/README.md (then
 *                                                `npx biome check --write bench/README.md` aligns it)
 *   npm run bench:fleet -- --workload llmd --loads 0.5,1 --kv-tokens 200000
 *   npm run bench:fleet -- --batch [--write]     the batch lane on a day of interactive load (batch.mjs)
 *   npm run bench:fleet -- --help
 */
import { readFileSync, writeFileSync } from "node:fs";
import { build } from "esbuild";
import { batchMain } from "./batch.mjs";
import { ENGINES, kvArithmetic } from "./engine.mjs";
import { makePolicies } from "./policies.mjs";
import { simulate, summarize } from "./sim.mjs";
import { LLMD, SGLANG, WORKLOADS } from "./workloads.mjs";

const DEFAULTS = {
	workload: "llmd,sglang,ours",
	// `gateway@F`: the gateway with affinity_load_factor F; `gateway@F:S` also with at most S requests of per-key slack.
	policies: "gateway,gateway@1.25:0,gateway@1.5,oracle,round-robin,random",
	// Offered loads of the table, as shares of the gateway's measured saturation point.
	loads: "0.5,0.8,1",
	seed: 39,
	// Per workload when 0: its own engine profile, node count, KV size and durations.
	nodes: 0,
	engine: "",
	kvTokens: 0,
	durationS: 0,
	warmupS: 0,
	drainS: 120,
	// The gateway: routing.affinity_load_factor and health_check_interval_ms (how often gauges refresh).
	factor: 1.25,
	metricsS: 10,
	// Saturation search: ladder growth, bisection steps, the TTFT p99 climb that counts as saturated.
	ladderGrowth: 1.5,
	bisect: 2,
	p99Climb: 4,
	// SGLang dataset (bench_serving's defaults).
	gspGroups: SGLANG.groups,
	gspPerGroup: SGLANG.perGroup,
	gspSystem: SGLANG.system,
	gspQuestion: SGLANG.question,
	gspOutput: SGLANG.output,
	// llm-d's output tokens a request (0: the published 1,000).
	llmdOutput: 0,
};

function parseArgs(argv) {
	const opts = { ...DEFAULTS, write: false };
	const camel = (s) => s.replace(/-([a-z])/g, (_, c) => c.toUpperCase());
	for (let i = 0; i < argv.length; i++) {
		const a = argv[i];
		if (a === "--write") opts.write = true;
		else if (a === "--batch") opts.batch = true;
		else if (a === "--help") {
			const flags = Object.entries(DEFAULTS).map(
				([k, v]) => `--${k.replace(/S$/, "").replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} ${v}`,
			);
			console.log(
				`flags (defaults): ${flags.join(" ")} --write\nworkloads: ${Object.keys(WORKLOADS).join(", ")}; engines: ${Object.keys(ENGINES).join(", ")}; policies: gateway, oracle, round-robin, random, power of two, consistent hash`,
			);
			process.exit(0);
		} else if (a.startsWith("--")) {
			let key = camel(a.slice(2));
			if (`${key}S` in DEFAULTS) key = `${key}S`;
			if (!(key in DEFAULTS)) throw new Error(`unknown flag ${a}`);
			const v = argv[++i];
			opts[key] = typeof DEFAULTS[key] === "number" ? Number(v) : v;
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
const o = parseArgs(process.argv.slice(2));
if (o.batch) {
	batchMain(routing, o);
	process.exit(0);
}
const started = Date.now();
const fmt = (v, d = 2) => (Number.isFinite(v) ? v.toFixed(d) : "—");
const pct = (v) => (Number.isFinite(v) ? `${(v * 100).toFixed(1)}%` : "—");
const num = (v) => Math.round(v).toLocaleString("en-US");

/** The options of one workload's runs. */
function setup(name) {
	const w = WORKLOADS[name];
	if (!w) throw new Error(`unknown workload ${name}`);
	const engineName = o.engine || w.engine;
	const base = ENGINES[engineName];
	if (!base) throw new Error(`unknown engine ${engineName}`);
	const spec = { ...base, kvTokens: o.kvTokens || base.kvTokens };
	return {
		...o,
		w,
		name,
		engineName,
		spec,
		nodes: o.nodes || w.nodes,
		durationS: o.durationS || w.durationS,
		warmupS: o.warmupS || w.warmupS,
	};
}

/**
 * A policy by name; `gateway@1.5` is the gateway with affinity_load_factor 1.5, `gateway@1.25:0`
 * the gateway with no per-key slack over its bound (the rule before issue 39's fix).
 */
function policyOf(name, opts) {
	const [base, tuning] = name.split("@");
	const [factor, slack] = (tuning ?? "").split(":");
	const tuned = { ...opts };
	if (factor) tuned.factor = Number(factor);
	if (slack !== undefined) tuned.slack = Number(slack);
	const make = makePolicies(routing, tuned)[base];
	if (!make) throw new Error(`unknown policy ${name}`);
	return make();
}

function run(ws, policy, rate, extra = {}) {
	const opts = { ...ws, rate, ...extra };
	return summarize(simulate(ws.w, policyOf(policy, opts), opts), opts);
}

/**
 * A policy's saturation point: the highest offered rate at which it still serves ≥ 95% of the
 * output tokens offered, leaves no request without a first token, and keeps TTFT p99 within
 * `p99Climb` × its p99 at the ladder's first rung (and under 1 s of it). The ladder grows by
 * `ladderGrowth` until a rung fails, then bisects (geometrically) `bisect` times.
 */
function saturation(ws, policy) {
	const first = run(ws, policy, ws.w.ladderStart);
	const limit = Math.max(o.p99Climb * first.p99, first.p99 + 1);
	const holds = (s) => s.outputTps >= 0.95 * s.offeredTps && s.censored === 0 && s.p99 <= limit;
	if (!holds(first)) return { rate: ws.w.ladderStart, below: true };
	let lo = ws.w.ladderStart;
	let hi = 0;
	for (let k = 0; k < 20 && !hi; k++) {
		const r = lo * o.ladderGrowth;
		if (holds(run(ws, policy, r))) lo = r;
		else hi = r;
	}
	for (let k = 0; k < o.bisect && hi; k++) {
		const mid = Math.sqrt(lo * hi);
		if (holds(run(ws, policy, mid))) lo = mid;
		else hi = mid;
	}
	return { rate: lo, below: false };
}

const policies = o.policies.split(",");
const loads = o.loads.split(",").map(Number);
const out = [];
const checks = [];
const publishedLlmdRatio = LLMD.published.precise.p90 / LLMD.published.random.p90;

for (const name of o.workload.split(",")) {
	const ws = setup(name);
	const capTokens = ws.spec.kvTokens * ws.nodes;
	const working = ws.w.workingSet(ws);
	out.push(
		`#### ${ws.w.title} (\`--workload ${name}\`)`,
		"",
		`${ws.nodes} nodes of ${ws.spec.label} (\`--engine ${ws.engineName}\`), ${num(ws.spec.kvTokens)} KV tokens a node (${kvArithmetic()[ws.engineName] ?? "set by --kv-tokens"}${o.kvTokens ? `; overridden by --kv-tokens ${o.kvTokens}` : ""}), ${num(capTokens)} in the cluster.` +
			(working ? ` Reusable working set ${num(working)} tokens = ${pct(working / capTokens)} of the cluster's cache.` : ""),
		`Virtual ${ws.durationS} s of arrivals a run, the first ${ws.warmupS} s not counted, seed ${o.seed}.`,
		"",
	);

	const sat = {};
	for (const p of policies) {
		sat[p] = saturation(ws, p);
		console.error(`${name}: ${p} saturates at ${fmt(sat[p].rate)} ${ws.w.unit} (${Math.round((Date.now() - started) / 1000)} s)`);
	}
	out.push(
		`Measured saturation (${ws.w.unit}): ${policies.map((p) => `${p} ${sat[p].below ? "<" : ""}${fmt(sat[p].rate)}`).join(", ")}.`,
		"",
		"| load | policy | × own saturation | token hit rate | × oracle's | × max reusable | TTFT p50 (s) | p90 (s) | p99 (s) | output tok/s | busiest node × fair | KV held by running |",
		"|---|---|---|---|---|---|---|---|---|---|---|---|",
	);
	const ref = sat.gateway?.rate ?? sat[policies[0]].rate;
	for (const load of loads) {
		const rate = load * ref;
		const rows = {};
		for (const p of policies) rows[p] = run(ws, p, rate);
		const oracle = rows.oracle;
		for (const p of policies) {
			const s = rows[p];
			out.push(
				`| ${Math.round(load * 100)}% (${fmt(rate)}/s) | ${p} | ${fmt(rate / sat[p].rate)} | ${pct(s.hit)} | ${oracle ? fmt(s.hit / oracle.hit) : "—"} | ${fmt(s.hit / s.ideal)} | ${fmt(s.p50)} | ${fmt(s.p90)} | ${fmt(s.p99)}${s.censored ? ` (${s.censored} waiting)` : ""} | ${num(s.outputTps)} | ${fmt(s.busiest)} | ${pct(s.kvHeld)} |`,
			);
		}
		const g = rows.gateway;
		if (g && oracle && load <= 1) {
			checks.push(
				`${name} ${Math.round(load * 100)}%: hit rate ${fmt(g.hit / oracle.hit, 3)}× the oracle's (≥ 0.90): ${g.hit >= 0.9 * oracle.hit ? "met" : "missed"}`,
				`${name} ${Math.round(load * 100)}%: TTFT p90 ${fmt(g.p90 / oracle.p90, 3)}× the oracle's (≤ 1.2): ${g.p90 <= 1.2 * oracle.p90 ? "met" : "missed"}`,
			);
		}
		if (g)
			checks.push(
				`${name} ${Math.round(load * 100)}%: busiest node ${fmt(g.busiest)}× a fair share (≤ 1.3): ${g.busiest <= 1.3 ? "met" : "missed"}`,
			);
		if (g && rows.random && name === "llmd") {
			const ratio = g.p90 / rows.random.p90;
			checks.push(
				`${name} ${Math.round(load * 100)}%: gateway/random TTFT p90 ${ratio.toPrecision(2)} (llm-d's precise/random ${publishedLlmdRatio.toPrecision(2)}): ${ratio <= publishedLlmdRatio ? "met" : "missed"}`,
			);
		}
		console.error(`${name}: load ${load} done (${Math.round((Date.now() - started) / 1000)} s)`);
	}
	out.push("");

	if (name === "llmd") {
		// llm-d's own QPS ladder, stage after stage, every policy from cold caches, with the published
		// 1,000 output tokens (`--llmd-output 245`: the ~245 a request their report's totals imply).
		const total = LLMD.stages.reduce((s, st) => s + st.duration, 0);
		const warm = LLMD.stages[0].duration;
		const pub = { oracle: `${LLMD.published.precise.p90} (precise)`, random: `${LLMD.published.random.p90}` };
		for (const output of [o.llmdOutput || LLMD.output]) {
			out.push(
				`llm-d's QPS ladder replayed with ${output} output tokens a request (warm-up 15 QPS × 50 s, then 3 → 60 QPS, ${total} s; TTFT over every request after the warm-up):`,
				"",
				"| policy | token hit rate | TTFT p50 (s) | p90 (s) | p99 (s) | output tok/s | llm-d published TTFT p90 (s) |",
				"|---|---|---|---|---|---|---|",
			);
			const ladder = {};
			for (const p of policies) {
				const s = run(ws, p, 0, { ladder: true, durationS: total, warmupS: warm, llmdOutput: output });
				ladder[p] = s;
				out.push(
					`| ${p} | ${pct(s.hit)} | ${fmt(s.p50)} | ${fmt(s.p90)} | ${fmt(s.p99)}${s.censored ? ` (${s.censored} waiting)` : ""} | ${num(s.outputTps)} | ${pub[p] ?? "—"} |`,
				);
			}
			if (ladder.gateway && ladder.random) {
				const ratio = ladder.gateway.p90 / ladder.random.p90;
				checks.push(
					`llmd ladder, ${output} output tokens: gateway/random TTFT p90 ${ratio.toPrecision(2)} (llm-d's precise/random ${publishedLlmdRatio.toPrecision(2)}): ${ratio <= publishedLlmdRatio ? "met" : "missed"}`,
				);
			}
			out.push("");
			console.error(`llmd: ladder (${output} output tokens) done (${Math.round((Date.now() - started) / 1000)} s)`);
		}
	}

	if (name === "sglang") {
		// SGLang's published run: the whole dataset at once on cold caches.
		out.push(
			`SGLang's run replayed (all ${ws.gspGroups * ws.gspPerGroup} prompts at once, --request-rate inf, cold caches; throughput = input + output tokens over the makespan):`,
			"",
			"| policy | token hit rate | throughput (tok/s) | × round-robin | TTFT p50 (s) | p90 (s) |",
			"|---|---|---|---|---|---|",
		);
		const burst = {};
		for (const p of policies) {
			const opts = { ...ws, burst: true, rate: 0, durationS: 1e-9, warmupS: 0, drainS: 3600 };
			const rs = simulate(ws.w, policyOf(p, opts), opts).records;
			const makespan = Math.max(...rs.map((r) => r.done));
			const tokens = rs.reduce((s, r) => s + r.prompt + r.answer, 0);
			const ttft = rs.map((r) => r.firstToken - r.arrival).sort((a, b) => a - b);
			burst[p] = {
				hit: rs.reduce((s, r) => s + r.cached, 0) / rs.reduce((s, r) => s + r.prompt, 0),
				tps: tokens / makespan,
				p50: ttft[Math.floor(ttft.length / 2)],
				p90: ttft[Math.floor(ttft.length * 0.9)],
			};
		}
		const rr = burst["round-robin"];
		for (const p of policies) {
			const b = burst[p];
			out.push(`| ${p} | ${pct(b.hit)} | ${num(b.tps)} | ${rr ? fmt(b.tps / rr.tps) : "—"} | ${fmt(b.p50)} | ${fmt(b.p90)} |`);
		}
		out.push(
			"| SGLang v0.4 router (published) | 75% | 158,596 | 1.92 | — | — |",
			"| SGLang v0.3 round-robin DP (published) | 20% | 82,665 | 1.00 | — | — |",
			"",
		);
	}
}

out.push("Targets (the gateway):", "", ...checks.map((c) => `- ${c}`));
const table = out.join("\n");
console.log(table);
console.error(`simulated in ${Math.round((Date.now() - started) / 1000)} s of wall time`);

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
