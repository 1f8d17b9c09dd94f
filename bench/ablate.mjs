// Before/after of built bundles, quickly, on the two numbers issue 16 sets targets for: sequential
// non-stream latency over the floor and capacity at 16 in flight, with workerd CPU per request
// from /proc. Every bundle runs at once in one rig (its own workerd each, like a --variant), and
// the targets take turns in short windows: this box's speed drifts by tens of percent from one
// minute to the next, and a window of each target in every round cancels most of it.
//
//   node bench/ablate.mjs [--rounds 8] [--sequential 300] [--seconds 2] <bundle-dir> <bundle-dir> …
//
// The first bundle is "gateway", the others "b1", "b2", … Bundles come from
// `wrangler deploy --dry-run --outdir <dir>`; a copy with one line patched out measures what that
// line costs (session 5's method). Prints the medians over rounds: CPU per request relative to the
// floor's in the same round, req/s as % of the floor's, p50 latency over the floor's.
import { parseArgs } from "node:util";
import { closedLoop, sequential } from "./lib/load.mjs";
import { cpuDelta, cpuSample } from "./lib/proc.mjs";
import { ENGINE_MODEL, GW_MODEL, killChildren, startRig } from "./lib/rig.mjs";
import { summarize } from "./lib/stats.mjs";

const { values: argv, positionals: bundles } = parseArgs({
	allowPositionals: true,
	options: {
		rounds: { type: "string", default: "8" },
		sequential: { type: "string", default: "300" },
		seconds: { type: "string", default: "2" },
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

async function quiet(pids) {
	const names = Object.keys(pids).filter((k) => k !== "engine");
	let last = cpuSample(pids);
	for (let i = 0; i < 100; i++) {
		await new Promise((r) => setTimeout(r, 200));
		const now = cpuSample(pids);
		const d = cpuDelta(last, now);
		last = now;
		if (names.every((k) => d[k].sched < 2)) return;
	}
}

const median = (xs) => {
	const s = [...xs].sort((a, b) => a - b);
	return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

const variants = bundles.slice(1).map((dir, i) => ({ name: `b${i + 1}`, bundleDir: dir }));
const rig = await startRig({ paceMs: 20, maxSockets: 256, bundleDir: bundles[0], variants, portkey: false });
const names = ["gateway", ...variants.map((v) => v.name)];
const dirOf = Object.fromEntries(names.map((n, i) => [n, bundles[i]]));
try {
	const floor = rig.targets.find((t) => t.name === "floor");
	const gws = names.map((n) => rig.targets.find((t) => t.name === n));
	const all = [floor, ...gws];
	await sequential(all, 300, request);
	const rows = Object.fromEntries(names.map((n) => [n, { cpu: [], rps: [], p50: [], seqCpu: [] }]));
	for (let round = 0; round < ROUNDS; round++) {
		// Capacity at 16 in flight, each target in turn (rotated), CPU per request from /proc.
		const load = {};
		for (let j = 0; j < all.length; j++) {
			const t = all[(round + j) % all.length];
			await quiet(rig.pids);
			const a = cpuSample(rig.pids);
			const r = await closedLoop(t, 16, MS, request);
			await quiet(rig.pids);
			const b = cpuSample(rig.pids);
			load[t.name] = { rps: r.rps, cpu: cpuDelta(a, b)[t.name].stat / r.done, errors: r.errors };
		}
		// Sequential latency, targets interleaved request by request; CPU per request over the window.
		await quiet(rig.pids);
		const a = cpuSample(rig.pids);
		const seq = await sequential(all, SEQ, request);
		await quiet(rig.pids);
		const seqCpu = cpuDelta(a, cpuSample(rig.pids));
		const floorP50 = summarize(seq.floor.latency).p50;
		const line = [`r${round}: floor ${load.floor.rps.toFixed(0)} rps ${load.floor.cpu.toFixed(3)} ms/req`];
		for (const n of names) {
			const row = rows[n];
			row.cpu.push(load[n].cpu / load.floor.cpu);
			row.rps.push((100 * load[n].rps) / load.floor.rps);
			row.p50.push(summarize(seq[n].latency).p50 - floorP50);
			row.seqCpu.push(seqCpu[n].stat / SEQ);
			const errors = load[n].errors + seq[n].errors;
			line.push(
				`${n} ${load[n].rps.toFixed(0)} rps ${load[n].cpu.toFixed(3)} ms/req, seq +${row.p50.at(-1).toFixed(3)} ms${errors ? ` ERRORS ${errors}` : ""}`,
			);
		}
		console.log(line.join(" | "));
	}
	console.log("\nmedians over rounds (CPU/request @16 as a multiple of the floor's in the same round):");
	for (const n of names) {
		const r = rows[n];
		console.log(
			`${n.padEnd(8)} ${dirOf[n]}: cpu/req @16 ${median(r.cpu).toFixed(2)}× floor, ${median(r.rps).toFixed(1)}% of floor's req/s, ` +
				`seq p50 +${median(r.p50).toFixed(3)} ms over floor, seq cpu/req ${median(r.seqCpu).toFixed(3)} ms`,
		);
	}
} finally {
	await rig.stop();
	killChildren();
}
