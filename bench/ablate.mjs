// Before/after of built bundles, quickly, on the two numbers issue 16 sets targets for: sequential
// non-stream latency over the floor and capacity at 16 in flight, with workerd CPU per request
// from /proc. Every bundle runs at once in one rig (its own workerd each, like a --variant), and
// the targets take turns in short windows: this box's speed drifts by tens of percent from one
// minute to the next, and a window of each target in every round cancels most of it.
//
//   node bench/ablate.mjs [--rounds 8] [--sequential 300] [--seconds 2] [--streams 10] <bundle-dir> <bundle-dir> …
//
// The first bundle is "gateway", the others "b1", "b2", … Bundles come from
// `wrangler deploy --dry-run --outdir <dir>`; a copy with one line patched out measures what that
// line costs (session 5's method). Prints the medians over rounds: CPU per request relative to the
// floor's in the same round, req/s as % of the floor's, p50 latency over the floor's, and a short
// paced stream's first byte over the engine's own (direct), `--streams` of them per target and round.
// The `minimal` target (bench/workers/minimal.mjs) takes its turns too: the ratios issue 27 reads.
import { parseArgs } from "node:util";
import { send } from "./lib/http.mjs";
import { closedLoop, sequential } from "./lib/load.mjs";
import { cpuDelta, cpuSample } from "./lib/proc.mjs";
import { ENGINE_MODEL, GW_MODEL, GW_PACED_MODEL, killChildren, startRig } from "./lib/rig.mjs";
import { summarize } from "./lib/stats.mjs";

const { values: argv, positionals: bundles } = parseArgs({
	allowPositionals: true,
	options: {
		rounds: { type: "string", default: "8" },
		sequential: { type: "string", default: "300" },
		seconds: { type: "string", default: "2" },
		streams: { type: "string", default: "10" },
	},
});
const ROUNDS = Number(argv.rounds);
const SEQ = Number(argv.sequential);
const MS = Number(argv.seconds) * 1000;
const STREAMS = Number(argv.streams);
const PACE_MS = 20;
if (bundles.length === 0) {
	console.error("usage: node bench/ablate.mjs [--rounds N] <bundle-dir> …");
	process.exit(2);
}

const gatewayModels = (t) => t.kind === "gateway" || t.kind === "minimal";
const body = (t) =>
	JSON.stringify({
		model: gatewayModels(t) ? GW_MODEL : ENGINE_MODEL,
		messages: [{ role: "user", content: "hello from the bench" }],
		max_tokens: 16,
	});
const request = (t) => ({ path: "/v1/chat/completions", body: body(t) });
/** A short stream the engine paces (10 content chunks, PACE_MS apart): what a first byte is measured on. */
const streamRequest = (t) => ({
	path: `${gatewayModels(t) ? "" : `/p/${PACE_MS}`}/v1/chat/completions`,
	body: JSON.stringify({
		model: gatewayModels(t) ? GW_PACED_MODEL : ENGINE_MODEL,
		messages: [{ role: "user", content: "the quick brown fox jumps over a lazy dog" }],
		max_tokens: 32,
		stream: true,
		stream_options: { include_usage: true },
	}),
});

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
const rig = await startRig({ paceMs: PACE_MS, maxSockets: 256, bundleDir: bundles[0], variants, portkey: false });
const names = ["gateway", ...variants.map((v) => v.name)];
const dirOf = Object.fromEntries(names.map((n, i) => [n, bundles[i]]));
try {
	const floor = rig.targets.find((t) => t.name === "floor");
	const direct = rig.targets.find((t) => t.name === "direct");
	const minimal = rig.targets.find((t) => t.name === "minimal");
	const gws = names.map((n) => rig.targets.find((t) => t.name === n));
	const all = [floor, minimal, ...gws];
	await sequential(all, 300, request);
	const measured = ["minimal", ...names];
	const rows = Object.fromEntries(measured.map((n) => [n, { cpu: [], rps: [], p50: [], seqCpu: [], first: [] }]));
	const directFirst = [];
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
		// Stream first bytes, one stream at a time, targets interleaved stream by stream.
		const streamTargets = [direct, minimal, ...gws];
		for (let i = 0; i < STREAMS; i++) {
			for (let j = 0; j < streamTargets.length; j++) {
				const t = streamTargets[(i + j) % streamTargets.length];
				const { path, body: b } = streamRequest(t);
				const r = await send(t, path, b);
				if (!r.ok) throw new Error(`stream ${t.name}: status ${r.status} ${r.error ?? ""}`);
				(t === direct ? directFirst : rows[t.name].first).push(r.first);
			}
		}
		const line = [`r${round}: floor ${load.floor.rps.toFixed(0)} rps ${load.floor.cpu.toFixed(3)} ms/req`];
		for (const n of measured) {
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
	const directP50 = median(directFirst);
	for (const n of measured) {
		const r = rows[n];
		const m = rows.minimal;
		const vsMinimal =
			n === "minimal"
				? ""
				: ` | vs minimal: cpu/req @16 ${(median(r.cpu) / median(m.cpu)).toFixed(2)}×, req/s ${((100 * median(r.rps)) / median(m.rps)).toFixed(0)}%, seq p50 ${(median(r.p50) - median(m.p50) >= 0 ? "+" : "") + (median(r.p50) - median(m.p50)).toFixed(3)} ms`;
		console.log(
			`${n.padEnd(8)} ${dirOf[n] ?? "bench/workers/minimal.mjs"}: cpu/req @16 ${median(r.cpu).toFixed(2)}× floor, ${median(r.rps).toFixed(1)}% of floor's req/s, ` +
				`seq p50 +${median(r.p50).toFixed(3)} ms over floor, seq cpu/req ${median(r.seqCpu).toFixed(3)} ms, ` +
				`stream first byte p50 ${(median(r.first) - directP50 >= 0 ? "+" : "") + (median(r.first) - directP50).toFixed(2)} ms over direct (${r.first.length} streams)${vsMinimal}`,
		);
	}
} finally {
	await rig.stop();
	killChildren();
}
