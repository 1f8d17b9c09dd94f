// Before/after of built bundles on the two numbers issue 16 sets targets for, quickly: sequential
// non-stream p50 over the floor and capacity at 16 in flight (with workerd CPU per request from
// /proc). Each bundle gets its own rig, in turns (a, b, a, b, …), so drift hits all alike.
//
//   node bench/ablate.mjs [--rounds 2] [--sequential 1000] [--seconds 3] <bundle-dir> <bundle-dir> …
//
// Bundles come from `wrangler deploy --dry-run --outdir <dir>`; a copy with one line patched
// out measures what that line costs (session 5's method). Prints one line per run and the medians.
import { parseArgs } from "node:util";
import { closedLoop, sequential } from "./lib/load.mjs";
import { cpuDelta, cpuSample } from "./lib/proc.mjs";
import { ENGINE_MODEL, GW_MODEL, killChildren, startRig } from "./lib/rig.mjs";
import { summarize } from "./lib/stats.mjs";

const { values: argv, positionals: bundles } = parseArgs({
	allowPositionals: true,
	options: {
		rounds: { type: "string", default: "2" },
		sequential: { type: "string", default: "1000" },
		seconds: { type: "string", default: "3" },
	},
});
const ROUNDS = Number(argv.rounds);
const SEQ = Number(argv.sequential);
const MS = Number(argv.seconds) * 1000;
if (bundles.length === 0) {
	console.error("usage: node bench/ablate.mjs [--rounds N] <bundle-dir> …");
	process.exit(2);
}

const body = (t) =>
	JSON.stringify({
		model: t.kind === "gateway" ? GW_MODEL : ENGINE_MODEL,
		messages: [{ role: "user", content: "hello from the bench" }],
		max_tokens: 16,
	});
const request = (t) => ({ path: "/v1/chat/completions", body: body(t) });

async function quiet(pids, names) {
	let last = cpuSample(pids);
	for (let i = 0; i < 100; i++) {
		await new Promise((r) => setTimeout(r, 200));
		const now = cpuSample(pids);
		const d = cpuDelta(last, now);
		last = now;
		if (names.every((k) => d[k].sched < 2)) return;
	}
}

async function measure(bundleDir) {
	const rig = await startRig({ paceMs: 20, maxSockets: 256, bundleDir, portkey: false });
	try {
		const floor = rig.targets.find((t) => t.name === "floor");
		const gw = rig.targets.find((t) => t.name === "gateway");
		const pids = { floor: rig.pids.floor, gateway: rig.pids.gateway };
		await sequential([floor, gw], 300, request);
		await quiet(pids, ["floor", "gateway"]);
		const c0 = cpuSample(pids);
		const seq = await sequential([floor, gw], SEQ, request);
		await quiet(pids, ["floor", "gateway"]);
		const c1 = cpuSample(pids);
		const seqCpu = cpuDelta(c0, c1);
		const out = {
			floorP50: summarize(seq.floor.latency).p50,
			gwP50: summarize(seq.gateway.latency).p50,
			gwP99: summarize(seq.gateway.latency).p99,
			seqCpu: seqCpu.gateway.stat / SEQ,
			errors: seq.floor.errors + seq.gateway.errors,
		};
		for (const t of [floor, gw]) {
			await quiet(pids, ["floor", "gateway"]);
			const a = cpuSample(pids);
			const r = await closedLoop(t, 16, MS, request);
			await quiet(pids, ["floor", "gateway"]);
			const b = cpuSample(pids);
			out[`${t.name}Rps`] = r.rps;
			out[`${t.name}Cpu16`] = cpuDelta(a, b)[t.name].stat / r.done;
			out.errors += r.errors;
		}
		return out;
	} finally {
		await rig.stop();
	}
}

const rows = bundles.map(() => []);
for (let round = 0; round < ROUNDS; round++) {
	for (let i = 0; i < bundles.length; i++) {
		const r = await measure(bundles[i]);
		rows[i].push(r);
		console.log(
			`${bundles[i]} r${round}: seq p50 gw−floor ${(r.gwP50 - r.floorP50).toFixed(3)} ms (gw ${r.gwP50.toFixed(3)}, p99 ${r.gwP99.toFixed(2)}), ` +
				`cpu/req seq ${r.seqCpu.toFixed(3)} ms; @16 ${r.gatewayRps.toFixed(0)} rps = ${((100 * r.gatewayRps) / r.floorRps).toFixed(0)}% of floor, ` +
				`cpu/req ${r.gatewayCpu16.toFixed(3)} ms (floor ${r.floorCpu16.toFixed(3)})${r.errors ? ` ERRORS ${r.errors}` : ""}`,
		);
	}
}
const median = (xs) => {
	const s = [...xs].sort((a, b) => a - b);
	return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
console.log("\nmedians:");
for (let i = 0; i < bundles.length; i++) {
	const r = rows[i];
	console.log(
		`${bundles[i]}: seq p50 gw−floor ${median(r.map((x) => x.gwP50 - x.floorP50)).toFixed(3)} ms, cpu/req seq ${median(r.map((x) => x.seqCpu)).toFixed(3)}; ` +
			`@16 ${median(r.map((x) => (100 * x.gatewayRps) / x.floorRps)).toFixed(0)}% of floor, cpu/req ${median(r.map((x) => x.gatewayCpu16)).toFixed(3)} ms`,
	);
}
killChildren();
