// `npm run bench`: the gateway against the platform floor and the engine itself, interleaved
// in one run. `npm run bench:smoke` (--smoke) runs every phase tiny and checks the rig works.
// The phases are in bench/phases/, the table in bench/report.mjs. See bench/README.md.
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { clockTicksPerSecond } from "./lib/proc.mjs";
import { checkLayout, DEFAULT_LAYOUT, parseVariant, startRig } from "./lib/rig.mjs";
import { roundAll } from "./lib/stats.mjs";
import { capacityPhase } from "./phases/capacity.mjs";
import { createContext } from "./phases/context.mjs";
import { distancePhase } from "./phases/distance.mjs";
import { firstBytePhase } from "./phases/first-byte.mjs";
import { fixedRatePhase, sequentialPhase } from "./phases/latency.mjs";
import { componentsPhase, ledgerPhase } from "./phases/ledger.mjs";
import { responsesPhase } from "./phases/responses.mjs";
import { streamPhases } from "./phases/streams.mjs";
import { usagePhase } from "./phases/usage.mjs";
import { warmUp } from "./phases/warmup.mjs";
import { printTable } from "./report.mjs";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const BENCH = path.join(ROOT, "bench");

const { values: argv } = parseArgs({
	options: {
		smoke: { type: "boolean", default: false },
		out: { type: "string" },
		rate: { type: "string" },
		"skip-build": { type: "string" },
		report: { type: "string" },
		// Another gateway target with its own GATEWAY_CONFIG: `name=<json merged in>` or a preset name (lib/rig.mjs).
		variant: { type: "string", multiple: true, default: [] },
		// After the main phases: every ledger call of every gateway target waits this long (phases/distance.mjs).
		"ledger-delay-ms": { type: "string" },
		// Leave Portkey's gateway out.
		"no-portkey": { type: "boolean", default: false },
		// Where the gateway's Durable Objects and D1 run: "split" (a second workerd, as in production) or "single" (lib/rig.mjs LAYOUTS).
		layout: { type: "string", default: DEFAULT_LAYOUT },
		// Where D1 and Durable Object storage live (lib/rig.mjs stateRoot: /dev/shm when there is one).
		"state-dir": { type: "string" },
	},
});
const SMOKE = argv.smoke;

const FULL = {
	warmup: 300,
	sequential: 2000,
	// Issue 27 judges the p99 at a fixed 100 req/s.
	rate: 100,
	rateRounds: 3,
	rateSliceMs: 2500,
	loads: [16, 64],
	loadRounds: 2,
	loadSliceMs: 3000,
	paceMs: 20,
	pacedChunks: 200,
	pacedShortChunks: 10,
	pacedLevels: [
		{ concurrent: 1, count: 2 },
		{ concurrent: 32, count: 32 },
		{ concurrent: 128, count: 128 },
	],
	burst: { concurrent: 16, chunks: 1000, shortChunks: 20 },
	ledgerMs: 3000,
	ledgerInflight: [1, 16],
	componentOps: 1000,
	ledgerDelayMs: 0,
	distanceSequential: 200,
	distanceStreams: 20,
	// phases/first-byte.mjs: medians over this many streams per target and situation.
	firstByte: { count: 20, longChunks: 200, waveConcurrent: 32 },
};
const SMOKE_PARAMS = {
	warmup: 10,
	sequential: 30,
	rate: 50,
	rateRounds: 1,
	rateSliceMs: 500,
	loads: [4],
	loadRounds: 1,
	loadSliceMs: 500,
	paceMs: 5,
	pacedChunks: 20,
	pacedShortChunks: 5,
	pacedLevels: [
		{ concurrent: 1, count: 1 },
		{ concurrent: 4, count: 4 },
	],
	burst: { concurrent: 2, chunks: 50, shortChunks: 5 },
	ledgerMs: 300,
	ledgerInflight: [1, 4],
	componentOps: 20,
	// The smoke run always checks the ledger-distance wrapper, with a short delay.
	ledgerDelayMs: 10,
	distanceSequential: 5,
	distanceStreams: 2,
	firstByte: { count: 2, longChunks: 20, waveConcurrent: 4 },
};
const P = SMOKE ? SMOKE_PARAMS : FULL;
if (argv.rate) P.rate = Number(argv.rate);
if (argv["ledger-delay-ms"] !== undefined) P.ledgerDelayMs = Number(argv["ledger-delay-ms"]);
const VARIANTS = argv.variant.map(parseVariant);
const PORTKEY = !argv["no-portkey"];
const OUT = argv.out ?? (SMOKE ? path.join(os.tmpdir(), "venym-bench-smoke.json") : path.join(BENCH, "results.json"));

const log = (...a) => console.log(`[bench ${process.uptime().toFixed(1)}s]`, ...a);

/** Which tree was measured: the commit, and the src/ files that differ from it. */
function gitState() {
	try {
		const git = (...args) => execFileSync("git", args, { cwd: ROOT, encoding: "utf8" }).trim();
		const changed = git("status", "--porcelain", "--", "src", "wrangler.toml", "package.json").split("\n").filter(Boolean);
		return { head: git("rev-parse", "--short", "HEAD"), uncommitted: changed.map((l) => l.slice(3)) };
	} catch {
		return null;
	}
}

function meta(ctx) {
	const { info } = ctx;
	return {
		date: new Date().toISOString(),
		smoke: SMOKE,
		git: gitState(),
		// With --skip-build the bundle was built elsewhere: `git` is then the rig's tree, not the bundle's.
		bundle: argv["skip-build"] ?? null,
		host: { cpus: os.cpus().length, model: os.cpus()[0]?.model, node: process.version, clockTicksPerSecond },
		miniflare: info.miniflareVersion,
		workerd: info.workerdVersion,
		compatibilityDate: info.compatibilityDate,
		compatibilityFlags: info.compatibilityFlags,
		gatewayBindings: info.bindings,
		params: P,
		targets: ctx.targets.map((t) => ({ name: t.name, kind: t.kind, ...(t.config ? { gatewayConfig: t.config } : {}) })),
		variants: VARIANTS,
		layout: argv.layout,
		layouts: Object.fromEntries(ctx.targets.filter((t) => t.layout).map((t) => [t.name, t.layout])),
		portkey: info.portkeyVersion,
		idleCpuMsPerSecond: ctx.idleCpuMsPerSecond(),
		// D1 and Durable Object storage (a tmpfs unless --state-dir says otherwise): see README "How the rig works".
		stateDir: ctx.stateDir,
	};
}

/** The phases in order; each interleaves the targets and adds its part to `results`. */
async function runPhases(rig) {
	const ctx = createContext({ rig, params: P, smoke: SMOKE, log });
	await warmUp(ctx);
	const results = { meta: meta(ctx) };
	await sequentialPhase(ctx, results);
	await fixedRatePhase(ctx, results);
	await capacityPhase(ctx, results);
	await streamPhases(ctx, results);
	await firstBytePhase(ctx, results);
	await responsesPhase(ctx, results);
	await ledgerPhase(ctx, results);
	await componentsPhase(ctx, results);
	await distancePhase(ctx, results);
	await usagePhase(ctx, results);
	results.problems = ctx.problems;
	return results;
}

async function main() {
	const maxSockets = Math.max(...P.loads, ...P.pacedLevels.map((l) => l.concurrent), P.burst.concurrent) + 8;
	const rig = await startRig({
		paceMs: P.paceMs,
		maxSockets,
		bundleDir: argv["skip-build"],
		variants: VARIANTS,
		portkey: PORTKEY,
		layout: checkLayout(argv.layout),
		stateRoot: argv["state-dir"],
		log,
	});
	let results;
	try {
		results = await runPhases(rig);
	} finally {
		await rig.stop();
	}
	const rounded = roundAll(results, 4);
	writeFileSync(OUT, `${JSON.stringify(rounded, null, "\t")}\n`);
	printTable(rounded);
	log(`results written to ${OUT.startsWith(ROOT) ? path.relative(ROOT, OUT) : OUT}`);
	const { problems } = results;
	if (problems.length) {
		console.error(`\n${problems.length} problem(s):\n- ${problems.join("\n- ")}`);
		process.exitCode = 1;
	} else if (SMOKE) {
		log("smoke: every phase ran and every check passed");
	}
}

if (argv.report) {
	// Reprint the table of an earlier run: node bench/run.mjs --report bench/results.json
	printTable(JSON.parse(readFileSync(argv.report, "utf8")));
} else {
	main().catch((err) => {
		console.error(err);
		// rig.mjs stops the engine and workerd hosts on exit.
		process.exit(1);
	});
}
