// Before/after of built bundles, quickly, on the two numbers issue 16 sets targets for: sequential
// non-stream latency over the floor and capacity at 16 in flight, with workerd CPU per request
// from /proc. Every bundle runs at once in one rig (its own workerd each, like a --variant), and
// the targets take turns in short windows: this box's speed drifts by tens of percent from one
// minute to the next, and a window of each target in every round cancels most of it.
//
//   node bench/ablate.mjs [--rounds 8] [--sequential 300] [--seconds 2] [--streams 10] [--long-chunks N] [--streams-only] [--layout split|single] [single:|split:]<bundle-dir> …
//
// Each bundle runs in the layout `--layout` names (default split: the production layout, its Durable
// Objects and D1 in a second workerd; bench/README.md "Layouts"), or the one its `single:`/`split:`
// prefix names: `split:<dir> single:<dir>` runs one build in both layouts, taking turns. A split
// target's CPU per request is its gateway process's; its second process's is reported beside it.
//
// The first bundle is "gateway", the others "b1", "b2", … Bundles come from
// `wrangler deploy --dry-run --outdir <dir>`; a copy with one line patched out measures what that
// line costs (session 5's method). Prints the medians over rounds: CPU per request relative to the
// floor's in the same round, req/s as % of the floor's, p50 latency over the floor's, and a short
// paced stream's first byte over the engine's own (direct), `--streams` of them per target and round.
// The `minimal` target (bench/workers/minimal.mjs) takes its turns too: the ratios issue 27 reads.
// `--long-chunks N` adds, per round, the same number of short streams each right after a stream of N
// paced chunks on the same target (issue 22 item 21's "after a long stream"); `--streams-only`
// skips the capacity and sequential turns (stream first bytes only). `--json <file>` saves every
// round's figures and every first byte (for ratios between bundles within a round).
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { send } from "./lib/http.mjs";
import { closedLoop, sequential, turnOrder } from "./lib/load.mjs";
import { cpuDelta, cpuSample } from "./lib/proc.mjs";
import { checkLayout, DEFAULT_LAYOUT, ENGINE_MODEL, GW_MODEL, GW_PACED_MODEL, killChildren, startRig } from "./lib/rig.mjs";
import { summarize } from "./lib/stats.mjs";

const { values: argv, positionals: bundles } = parseArgs({
	allowPositionals: true,
	options: {
		rounds: { type: "string", default: "8" },
		sequential: { type: "string", default: "300" },
		seconds: { type: "string", default: "2" },
		streams: { type: "string", default: "10" },
		"long-chunks": { type: "string", default: "0" },
		"streams-only": { type: "boolean", default: false },
		json: { type: "string" },
		layout: { type: "string", default: DEFAULT_LAYOUT },
	},
});
const ROUNDS = Number(argv.rounds);
const SEQ = Number(argv.sequential);
const MS = Number(argv.seconds) * 1000;
const STREAMS = Number(argv.streams);
const LONG = Number(argv["long-chunks"]);
const STREAMS_ONLY = argv["streams-only"];
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
/** A stream the engine paces (one content chunk per word of `prompt`, PACE_MS apart). */
const pacedStream = (t, prompt, maxTokens) => ({
	path: `${gatewayModels(t) ? "" : `/p/${PACE_MS}`}/v1/chat/completions`,
	body: JSON.stringify({
		model: gatewayModels(t) ? GW_PACED_MODEL : ENGINE_MODEL,
		messages: [{ role: "user", content: prompt }],
		max_tokens: maxTokens,
		stream: true,
		stream_options: { include_usage: true },
	}),
});
/** A short stream (10 content chunks): what a first byte is measured on. */
const streamRequest = (t) => pacedStream(t, "the quick brown fox jumps over a lazy dog", 32);
const LONG_PROMPT = Array.from({ length: LONG }, (_, i) => `w${i}`).join(" ");
/** The long stream sent before each "after long" measurement. */
const longRequest = (t) => pacedStream(t, LONG_PROMPT, LONG + 16);

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

/** `[single:|split:|split-router:]<dir>` → {layout, dir}. */
const specOf = (arg) => {
	const m = /^(single|split|split-router):(.*)$/.exec(arg);
	return m ? { layout: m[1], dir: m[2] } : { layout: checkLayout(argv.layout), dir: arg };
};
const specs = bundles.map(specOf);
const variants = specs.slice(1).map((b, i) => ({ name: `b${i + 1}`, bundleDir: b.dir, layout: b.layout }));
const rig = await startRig({
	paceMs: PACE_MS,
	maxSockets: 256,
	bundleDir: specs[0].dir,
	layout: specs[0].layout,
	variants,
	portkey: false,
});
const names = ["gateway", ...variants.map((v) => v.name)];
const dirOf = Object.fromEntries(names.map((n, i) => [n, `${specs[i].layout}:${specs[i].dir}`]));
/** The pid name of a split target's second process (Durable Objects, D1), or null. */
const ledgerPidOf = (n) => rig.targets.find((t) => t.name === n)?.ledgerPidName ?? null;
try {
	const floor = rig.targets.find((t) => t.name === "floor");
	const direct = rig.targets.find((t) => t.name === "direct");
	const minimal = rig.targets.find((t) => t.name === "minimal");
	const gws = names.map((n) => rig.targets.find((t) => t.name === n));
	const all = [floor, minimal, ...gws];
	await sequential(all, 300, request);
	const measured = ["minimal", ...names];
	const rows = Object.fromEntries(
		measured.map((n) => [
			n,
			{ name: n, cpu: [], rps: [], p50: [], seqCpu: [], ledgerCpu: [], ledgerSeqCpu: [], first: [], afterLong: [] },
		]),
	);
	const directFirst = [];
	const directAfterLong = [];
	const floorRounds = [];
	/** Response heads of the quiet streams, per target: `first − headers` is a body that waits after its head. */
	const heads = {};
	const streamTargets = [direct, minimal, ...gws];
	/** One short stream's first byte, after a long stream on the same target when `afterLong`. */
	async function firstByte(t, afterLong) {
		if (afterLong) {
			const { path, body: b } = longRequest(t);
			const l = await send(t, path, b);
			if (!l.ok) throw new Error(`long stream ${t.name}: status ${l.status} ${l.error ?? ""}`);
		}
		const { path, body: b } = streamRequest(t);
		const r = await send(t, path, b);
		if (!r.ok) throw new Error(`stream ${t.name}: status ${r.status} ${r.error ?? ""}`);
		const into = t === direct ? (afterLong ? directAfterLong : directFirst) : rows[t.name][afterLong ? "afterLong" : "first"];
		into.push(r.first);
		if (!afterLong) heads[t.name] = [...(heads[t.name] ?? []), r.headers];
	}
	for (let round = 0; round < ROUNDS; round++) {
		// Stream first bytes, one stream at a time, targets interleaved stream by stream.
		for (const afterLong of LONG > 0 ? [false, true] : [false]) {
			await quiet(rig.pids);
			for (let i = 0; i < STREAMS; i++) {
				for (const t of turnOrder(streamTargets, i)) await firstByte(t, afterLong);
			}
		}
		if (STREAMS_ONLY) {
			console.log(`r${round}: ${STREAMS} streams per target${LONG > 0 ? `, and as many after ${LONG}-chunk streams` : ""}`);
			continue;
		}
		// Capacity at 16 in flight, each target in turn (rotated), CPU per request from /proc.
		const load = {};
		for (let j = 0; j < all.length; j++) {
			const t = all[(round + j) % all.length];
			await quiet(rig.pids);
			const a = cpuSample(rig.pids);
			const r = await closedLoop(t, 16, MS, request);
			await quiet(rig.pids);
			const b = cpuSample(rig.pids);
			const d = cpuDelta(a, b);
			const lp = ledgerPidOf(t.name);
			load[t.name] = { rps: r.rps, cpu: d[t.name].stat / r.done, ledgerCpu: lp ? d[lp].stat / r.done : null, errors: r.errors };
		}
		// Sequential latency, targets interleaved request by request; CPU per request over the window.
		await quiet(rig.pids);
		const a = cpuSample(rig.pids);
		const seq = await sequential(all, SEQ, request);
		await quiet(rig.pids);
		const seqCpu = cpuDelta(a, cpuSample(rig.pids));
		const floorP50 = summarize(seq.floor.latency).p50;
		floorRounds.push({ rps: load.floor.rps, cpu: load.floor.cpu, seqP50: floorP50, seqCpu: seqCpu.floor.stat / SEQ });
		const line = [`r${round}: floor ${load.floor.rps.toFixed(0)} rps ${load.floor.cpu.toFixed(3)} ms/req`];
		for (const n of measured) {
			const row = rows[n];
			row.cpu.push(load[n].cpu / load.floor.cpu);
			row.rps.push((100 * load[n].rps) / load.floor.rps);
			row.p50.push(summarize(seq[n].latency).p50 - floorP50);
			row.seqCpu.push(seqCpu[n].stat / SEQ);
			const lp = ledgerPidOf(n);
			if (lp) {
				row.ledgerCpu.push(load[n].ledgerCpu);
				row.ledgerSeqCpu.push(seqCpu[lp].stat / SEQ);
			}
			row.raw ??= [];
			row.raw.push({
				rps: load[n].rps,
				cpu: load[n].cpu,
				seqP50: summarize(seq[n].latency).p50,
				seqCpu: seqCpu[n].stat / SEQ,
				...(lp ? { ledgerCpu: load[n].ledgerCpu, ledgerSeqCpu: seqCpu[lp].stat / SEQ } : {}),
			});
			const errors = load[n].errors + seq[n].errors;
			line.push(
				`${n} ${load[n].rps.toFixed(0)} rps ${load[n].cpu.toFixed(3)} ms/req, seq +${row.p50.at(-1).toFixed(3)} ms${errors ? ` ERRORS ${errors}` : ""}`,
			);
		}
		console.log(line.join(" | "));
	}
	if (argv.json) {
		const floorRaw = { directFirst, directAfterLong, rounds: floorRounds, heads };
		writeFileSync(argv.json, JSON.stringify({ bundles: dirOf, rounds: ROUNDS, long: LONG, floor: floorRaw, rows }, null, 1));
	}
	const signed = (x, digits) => (x >= 0 ? "+" : "") + x.toFixed(digits);
	const directP50 = median(directFirst);
	const firstBytes = (r) =>
		`stream first byte p50 ${signed(median(r.first) - directP50, 2)} ms over direct (${r.first.length} streams, head ${signed(median(heads[r.name]) - directP50, 2)})` +
		(LONG > 0
			? `, after a ${LONG}-chunk stream ${signed(median(r.afterLong) - median(directAfterLong), 2)} ms (${r.afterLong.length})`
			: "");
	if (STREAMS_ONLY) {
		console.log(`\nstream first byte, direct's p50 ${directP50.toFixed(2)} ms:`);
		for (const n of measured) console.log(`${n.padEnd(8)} ${dirOf[n] ?? "bench/workers/minimal.mjs"}: ${firstBytes(rows[n])}`);
	} else {
		console.log("\nmedians over rounds (CPU/request @16 as a multiple of the floor's in the same round):");
		for (const n of measured) {
			const r = rows[n];
			const m = rows.minimal;
			const vsMinimal =
				n === "minimal"
					? ""
					: ` | vs minimal: cpu/req @16 ${(median(r.cpu) / median(m.cpu)).toFixed(2)}×, seq cpu/req ${(median(r.seqCpu) / median(m.seqCpu)).toFixed(2)}×, req/s ${((100 * median(r.rps)) / median(m.rps)).toFixed(0)}%, seq p50 ${signed(median(r.p50) - median(m.p50), 3)} ms`;
			const second = r.ledgerCpu.length
				? ` | its Durable Objects' and D1's workerd: cpu/req @16 ${median(r.ledgerCpu).toFixed(3)} ms, seq ${median(r.ledgerSeqCpu).toFixed(3)} ms`
				: "";
			console.log(
				`${n.padEnd(8)} ${dirOf[n] ?? "bench/workers/minimal.mjs"}: cpu/req @16 ${median(r.cpu).toFixed(2)}× floor, ${median(r.rps).toFixed(1)}% of floor's req/s, ` +
					`seq p50 +${median(r.p50).toFixed(3)} ms over floor, seq cpu/req ${median(r.seqCpu).toFixed(3)} ms, ${firstBytes(r)}${vsMinimal}${second}`,
			);
		}
	}
} finally {
	await rig.stop();
	killChildren();
}
