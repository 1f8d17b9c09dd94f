// `npm run bench`: the gateway against the platform floor and the engine itself, interleaved
// in one run. `npm run bench:smoke` (--smoke) runs every phase tiny and checks the rig works.
// See bench/README.md.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { closedLoop, fixedRate, sequential, streams } from "./lib/phases.mjs";
import { clockTicksPerSecond, cpuDelta, cpuSample } from "./lib/proc.mjs";
import { ENGINE_MODEL, GW_MODEL, GW_PACED_MODEL, startRig } from "./lib/rig.mjs";
import { roundAll, summarize } from "./lib/stats.mjs";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const BENCH = path.join(ROOT, "bench");

const { values: argv } = parseArgs({
	options: {
		smoke: { type: "boolean", default: false },
		out: { type: "string" },
		rate: { type: "string" },
		"skip-build": { type: "string" },
		report: { type: "string" },
	},
});
const SMOKE = argv.smoke;

const FULL = {
	warmup: 300,
	sequential: 2000,
	rate: 200,
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
};
const P = SMOKE ? SMOKE_PARAMS : FULL;
if (argv.rate) P.rate = Number(argv.rate);
const OUT = argv.out ?? (SMOKE ? path.join(os.tmpdir(), "venym-bench-smoke.json") : path.join(BENCH, "results.json"));

/** At least this long after a window, for waitUntil settlement and the ledger's usage flush (alarm at +200 ms). */
const SETTLE_MS = 600;
/** A workerd using less than this much CPU per 200 ms is idle (no deferred work left). */
const QUIET_CPU_MS = 2;

const log = (...a) => console.log(`[bench ${(process.uptime()).toFixed(1)}s]`, ...a);
// ---- requests -------------------------------------------------------------------------

const WORDS = "the quick brown fox jumps over a lazy dog while bench frames keep flowing".split(" ");
/** A prompt the engine echoes back as exactly `chunks` content chunks ("Echo:" + n−1 words). */
function promptFor(chunks) {
	return Array.from({ length: chunks - 1 }, (_, i) => WORDS[i % WORDS.length]).join(" ");
}

const nonStreamBody = (t) =>
	JSON.stringify({
		model: t.name === "gateway" ? GW_MODEL : ENGINE_MODEL,
		messages: [{ role: "user", content: "hello from the bench" }],
		max_tokens: 16,
	});
const nonStream = (t) => ({ path: "/v1/chat/completions", body: t.bodies.nonStream });

/** The body the engine receives is the same for every target: the gateway's rewrites are pre-applied for the others. */
function streamBody(t, chunks, paced) {
	const gw = t.name === "gateway";
	return JSON.stringify({
		model: gw ? (paced ? GW_PACED_MODEL : GW_MODEL) : ENGINE_MODEL,
		messages: [{ role: "user", content: promptFor(chunks) }],
		max_tokens: chunks + 16,
		stream: true,
		stream_options: { include_usage: true },
	});
}
function streamRequest(chunks, paced) {
	return (t) => {
		const key = `${chunks}:${paced}`;
		t.bodies[key] ??= streamBody(t, chunks, paced);
		const pathPrefix = t.name !== "gateway" && paced ? `/p/${P.paceMs}` : "";
		return { path: `${pathPrefix}/v1/chat/completions`, body: t.bodies[key] };
	};
}
/** Content chunks, the finish chunk, the usage chunk and [DONE]. */
const expectedFrames = (chunks) => chunks + 3;

// ---- measurement helpers -----------------------------------------------------------------

let pids;
let idleCpuPerMs = { floor: 0, gateway: 0, engine: 0 };

/**
 * Waits until both workerd processes are idle: the deferred work of earlier phases (usage
 * outbox flushes to D1, alarms) must neither land in the next window nor slow it down.
 */
async function quiesce(maxMs = 60_000) {
	const start = performance.now();
	let last = cpuSample(pids);
	while (performance.now() - start < maxMs) {
		await new Promise((r) => setTimeout(r, 200));
		const now = cpuSample(pids);
		const d = cpuDelta(last, now);
		last = now;
		if (d.floor.sched < QUIET_CPU_MS && d.gateway.sched < QUIET_CPU_MS) return performance.now() - start;
	}
	return performance.now() - start;
}

/**
 * Runs `fn` from a quiet start, waits until the deferred work it caused has run (settlement
 * in waitUntil, the ledger's alarm flushing usage records to D1), and returns its result with
 * the CPU each process used over the whole span.
 */
async function withCpu(fn) {
	await quiesce();
	const before = cpuSample(pids);
	const t0 = performance.now();
	const result = await fn();
	await new Promise((r) => setTimeout(r, SETTLE_MS));
	const drainMs = await quiesce();
	const wallMs = performance.now() - t0;
	const delta = cpuDelta(before, cpuSample(pids));
	for (const [name, d] of Object.entries(delta)) {
		const idle = (idleCpuPerMs[name] ?? 0) * wallMs;
		d.stat = Math.max(0, d.stat - idle);
		d.sched = Math.max(0, d.sched - idle);
	}
	return { result, cpu: delta, wallMs, drainMs };
}

const problems = [];
function check(cond, message) {
	if (!cond) problems.push(message);
}

function checkStreams(name, label, results, chunks) {
	const bad = results.filter((r) => !r.ok || r.frames !== expectedFrames(chunks) || !r.tail.endsWith("data: [DONE]\n\n"));
	check(
		bad.length === 0,
		`${label} ${name}: ${bad.length}/${results.length} streams incomplete (e.g. status ${bad[0]?.status}, ${bad[0]?.frames} frames, expected ${expectedFrames(chunks)}; ${bad[0]?.error ?? ""})`,
	);
}

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

// ---- main --------------------------------------------------------------------------------

async function main() {
	const maxSockets = Math.max(...P.loads, ...P.pacedLevels.map((l) => l.concurrent), P.burst.concurrent) + 8;
	const rig = await startRig({ paceMs: P.paceMs, maxSockets, bundleDir: argv["skip-build"], log });
	try {
		await runPhases(rig);
	} finally {
		await rig.stop();
	}
}

async function runPhases(rig) {
	const { targets, key, info, rpc } = rig;
	pids = rig.pids;
	{
		for (const t of targets) t.bodies.nonStream = nonStreamBody(t);
		const byName = Object.fromEntries(targets.map((t) => [t.name, t]));
		let gatewayRequests = 0;
		const countGateway = (n) => {
			gatewayRequests += n;
		};

		// Idle CPU of each process (timers, nothing served), subtracted from every window.
		const idleMs = SMOKE ? 300 : 1500;
		const idle = cpuSample(pids);
		await new Promise((r) => setTimeout(r, idleMs));
		const idleDelta = cpuDelta(idle, cpuSample(pids));
		idleCpuPerMs = Object.fromEntries(Object.entries(idleDelta).map(([k, v]) => [k, v.sched / idleMs]));

		// Warm-up: JIT, connection pools, the key's Durable Object, the first D1 reads.
		log("warm-up");
		await sequential(targets, P.warmup, nonStream);
		countGateway(P.warmup);
		for (const t of targets) {
			await streams(t, 4, 4, streamRequest(P.pacedShortChunks, true));
			await streams(t, 2, 2, streamRequest(P.burst.shortChunks, false));
		}
		countGateway(6);
		await new Promise((r) => setTimeout(r, SETTLE_MS));

		const results = {
			meta: {
				date: new Date().toISOString(),
				smoke: SMOKE,
				git: gitState(),
				host: { cpus: os.cpus().length, model: os.cpus()[0]?.model, node: process.version, clockTicksPerSecond },
				miniflare: info.miniflareVersion,
				workerd: info.workerdVersion,
				compatibilityDate: info.compatibilityDate,
				compatibilityFlags: info.compatibilityFlags,
				gatewayBindings: info.bindings,
				params: P,
				idleCpuMsPerSecond: Object.fromEntries(Object.entries(idleCpuPerMs).map(([k, v]) => [k, v * 1000])),
			},
		};

		// 1. Sequential latency and CPU per request.
		log(`sequential: ${P.sequential} requests per target, interleaved`);
		const seq = await withCpu(() => sequential(targets, P.sequential, nonStream));
		countGateway(P.sequential);
		results.sequential = {};
		for (const t of targets) {
			const r = seq.result[t.name];
			check(r.errors === 0, `sequential ${t.name}: ${r.errors} errors`);
			results.sequential[t.name] = { ...summarize(r.latency), errors: r.errors };
		}
		const gwSample = seq.result.gateway.sample;
		let gwBody = {};
		try {
			gwBody = JSON.parse(gwSample?.text ?? "{}");
		} catch {}
		check(gwBody.model === GW_MODEL, `gateway answer names model ${gwBody.model}, expected ${GW_MODEL}`);
		check(typeof gwBody.usage?.total_tokens === "number", "gateway answer has no usage");
		check(gwSample?.responseHeaders?.["x-venym-cost-usd"] !== undefined, "gateway answer has no x-venym-cost-usd (not settled?)");
		results.cpuPerRequest = {
			sequential: {
				floor: seq.cpu.floor.stat / P.sequential,
				gateway: seq.cpu.gateway.stat / P.sequential,
				floorSched: seq.cpu.floor.sched / P.sequential,
				gatewaySched: seq.cpu.gateway.sched / P.sequential,
				engine: seq.cpu.engine.stat / (3 * P.sequential),
			},
		};

		// 2. Latency at a fixed rate (open loop), slices rotated between targets.
		log(`fixed rate: ${P.rate} req/s, ${P.rateRounds} rounds × ${P.rateSliceMs} ms per target`);
		const rate = Object.fromEntries(targets.map((t) => [t.name, { latency: [], errors: 0, sent: 0 }]));
		for (let round = 0; round < P.rateRounds; round++) {
			for (let j = 0; j < targets.length; j++) {
				const t = targets[(round + j) % targets.length];
				await quiesce();
				const r = await fixedRate(t, P.rate, P.rateSliceMs, nonStream);
				rate[t.name].latency.push(...r.latency);
				rate[t.name].errors += r.errors;
				rate[t.name].sent += r.sent;
				if (t.name === "gateway") countGateway(r.sent);
			}
		}
		results.fixedRate = { rate: P.rate };
		for (const t of targets) {
			check(rate[t.name].errors === 0, `fixed rate ${t.name}: ${rate[t.name].errors} errors`);
			results.fixedRate[t.name] = { ...summarize(rate[t.name].latency), errors: rate[t.name].errors };
		}

		// 3. Capacity: closed loop at fixed in-flight counts, with CPU per request under load.
		results.capacity = {};
		for (const inflight of P.loads) {
			log(`capacity: ${inflight} in flight, ${P.loadRounds} rounds × ${P.loadSliceMs} ms per target`);
			const acc = Object.fromEntries(targets.map((t) => [t.name, { done: 0, ms: 0, latency: [], errors: 0 }]));
			const measured = await withCpu(async () => {
				for (let round = 0; round < P.loadRounds; round++) {
					for (let j = 0; j < targets.length; j++) {
						const t = targets[(round + j) % targets.length];
						await quiesce();
						const r = await closedLoop(t, inflight, P.loadSliceMs, nonStream);
						const a = acc[t.name];
						a.done += r.done;
						a.ms += r.elapsedMs;
						a.latency.push(...r.latency);
						a.errors += r.errors;
						if (t.name === "gateway") countGateway(r.done + r.errors);
					}
				}
			});
			results.capacity[inflight] = {};
			for (const t of targets) {
				const a = acc[t.name];
				check(a.errors === 0, `capacity ${inflight} ${t.name}: ${a.errors} errors`);
				results.capacity[inflight][t.name] = { rps: (a.done * 1000) / a.ms, latency: summarize(a.latency), errors: a.errors };
			}
			results.cpuPerRequest[`inflight${inflight}`] = {
				floor: measured.cpu.floor.stat / acc.floor.done,
				gateway: measured.cpu.gateway.stat / acc.gateway.done,
				engine: measured.cpu.engine.stat / (acc.direct.done + acc.floor.done + acc.gateway.done),
				drainMsAfterWindow: measured.drainMs,
			};
		}

		// 4. Paced streams: TTFB and total time at each concurrency, and the CPU they cost.
		results.pacedStreams = { chunks: P.pacedChunks, paceMs: P.paceMs, levels: {} };
		const perStreamCpu = {};
		for (const level of P.pacedLevels) {
			log(`paced streams: ${level.count} × ${P.pacedChunks} chunks @ ${P.paceMs} ms, ${level.concurrent} concurrent, per target`);
			const out = {};
			const measured = await withCpu(async () => {
				for (const t of targets) {
					await quiesce();
					const rs = await streams(t, level.concurrent, level.count, streamRequest(P.pacedChunks, true));
					if (t.name === "gateway") countGateway(rs.length);
					checkStreams(t.name, `paced c=${level.concurrent}`, rs, P.pacedChunks);
					out[t.name] = {
						ttfb: summarize(rs.map((r) => r.first)),
						headers: summarize(rs.map((r) => r.headers)),
						total: summarize(rs.map((r) => r.total)),
						frames: rs[0]?.frames,
						bytes: rs[0]?.bytes,
					};
				}
			});
			out.cpuPerStream = { floor: measured.cpu.floor.sched / level.count, gateway: measured.cpu.gateway.sched / level.count };
			perStreamCpu[level.concurrent] = out.cpuPerStream;
			results.pacedStreams.levels[level.concurrent] = out;
		}

		// 5. CPU per streamed chunk: the slope between long and short streams, paced and burst.
		const widest = P.pacedLevels.at(-1);
		log(`paced short streams: ${widest.count} × ${P.pacedShortChunks} chunks (for the per-chunk slope)`);
		const short = await withCpu(async () => {
			for (const t of [byName.floor, byName.gateway]) {
				await quiesce();
				const rs = await streams(t, widest.concurrent, widest.count, streamRequest(P.pacedShortChunks, true));
				if (t.name === "gateway") countGateway(rs.length);
				checkStreams(t.name, "paced short", rs, P.pacedShortChunks);
			}
		});
		const chunkSlope = (longPerStream, shortPerStream, longChunks, shortChunks) =>
			((longPerStream - shortPerStream) / (expectedFrames(longChunks) - expectedFrames(shortChunks))) * 1000;
		results.cpuPerChunk = { unit: "µs", paced: {}, burst: {} };
		for (const name of ["floor", "gateway"]) {
			const longPer = perStreamCpu[widest.concurrent][name];
			const shortPer = short.cpu[name].sched / widest.count;
			results.cpuPerChunk.paced[name] = {
				marginal: chunkSlope(longPer, shortPer, P.pacedChunks, P.pacedShortChunks),
				average: (longPer / expectedFrames(P.pacedChunks)) * 1000,
				cpuPerLongStreamMs: longPer,
				cpuPerShortStreamMs: shortPer,
			};
		}

		const { concurrent: bc, chunks: bLong, shortChunks: bShort } = P.burst;
		log(`burst streams: ${bc} × ${bLong} chunks and ${bc} × ${bShort} chunks, unpaced, per target`);
		results.burstStreams = { chunks: bLong, concurrent: bc };
		const burstLong = {};
		const burstShort = {};
		for (const t of targets) {
			const long = await withCpu(() => streams(t, bc, bc, streamRequest(bLong, false)));
			const shortRun = await withCpu(() => streams(t, bc, bc, streamRequest(bShort, false)));
			if (t.name === "gateway") countGateway(2 * bc);
			checkStreams(t.name, "burst", long.result, bLong);
			checkStreams(t.name, "burst short", shortRun.result, bShort);
			results.burstStreams[t.name] = {
				total: summarize(long.result.map((r) => r.total)),
				ttfb: summarize(long.result.map((r) => r.first)),
			};
			burstLong[t.name] = long.cpu;
			burstShort[t.name] = shortRun.cpu;
		}
		for (const name of ["floor", "gateway"]) {
			const longPer = burstLong[name][name].sched / bc;
			const shortPer = burstShort[name][name].sched / bc;
			results.cpuPerChunk.burst[name] = {
				marginal: chunkSlope(longPer, shortPer, bLong, bShort),
				average: (longPer / expectedFrames(bLong)) * 1000,
				cpuPerLongStreamMs: longPer,
				cpuPerShortStreamMs: shortPer,
			};
		}

		// 6. The ledger Durable Object alone: authorize+settle pairs for one key, then the
		//    hot path's other pieces one at a time, inside the gateway's workerd (probe worker).
		results.ledger = {};
		for (const inflight of P.ledgerInflight) {
			log(`ledger: authorize+settle for one key, ${inflight} in flight, ${P.ledgerMs} ms`);
			const keyId = `key_ledger_bench_${inflight}`;
			await rpc("probe", { path: "/credit", query: { key: keyId }, method: "POST" });
			let after;
			const measured = await withCpu(async () => {
				const run = await rpc("probe", { path: "/ledger", query: { key: keyId, ms: P.ledgerMs, inflight } });
				after = await rpc("probe", { path: "/info", query: { key: keyId } });
				return run;
			});
			const r = measured.result;
			check(r.settled > 0 && r.failed === 0, `ledger ${inflight} in flight: ${r.settled} settled, ${r.failed} failed`);
			results.ledger[inflight] = {
				settlementsPerSecond: r.perSecond,
				settled: r.settled,
				failed: r.failed,
				cpuPerSettlementMs: measured.cpu.gateway.sched / Math.max(1, r.settled),
				outboxBacklogAtEnd: after.outboxSize,
				outboxDrainMs: measured.drainMs,
			};
		}
		log(`components: ${P.componentOps} runs each of the hot path's pieces`);
		const hash = createHash("sha256").update(key.key).digest("hex");
		const componentKey = "key_probe_components";
		await rpc("probe", { path: "/credit", query: { key: componentKey }, method: "POST" });
		results.components = {};
		const prefix = `req_component_${Date.now().toString(36)}_`;
		for (const name of ["sha256", "cache-match", "d1-key-lookup", "ledger-info", "ledger-authorize", "ledger-settle"]) {
			const measured = await withCpu(() =>
				rpc("probe", { path: "/op", query: { name, n: P.componentOps, key: componentKey, hash, prefix } }),
			);
			results.components[name] = {
				cpuMsEach: measured.cpu.gateway.sched / P.componentOps,
				wallMsEach: measured.result.elapsedMs / P.componentOps,
			};
		}

		// 7. Every gateway request must have left a usage record in D1.
		log("waiting for the usage outbox to drain to D1");
		const drainStart = Date.now();
		const ledgerInfo = () => rpc("probe", { path: "/info", query: { key: key.id } });
		let ledgerState = await ledgerInfo();
		while (ledgerState.outboxSize > 0 && Date.now() - drainStart < 30_000) {
			await new Promise((r) => setTimeout(r, 250));
			ledgerState = await ledgerInfo();
		}
		const { count } = await rpc("usageCount", { keyId: key.id });
		results.usageRecords = {
			gatewayRequests,
			recordsInD1: count,
			openHolds: ledgerState.openHolds,
			outbox: ledgerState.outboxSize,
			drainMs: Date.now() - drainStart,
		};
		check(count === gatewayRequests, `usage records in D1: ${count}, gateway requests sent: ${gatewayRequests}`);
		check(ledgerState.openHolds === 0, `${ledgerState.openHolds} holds still open after the run`);

		results.problems = problems;
		const rounded = roundAll(results, 4);
		writeFileSync(OUT, `${JSON.stringify(rounded, null, "\t")}\n`);
		printTable(rounded);
		log(`results written to ${OUT.startsWith(ROOT) ? path.relative(ROOT, OUT) : OUT}`);
		if (problems.length) {
			console.error(`\n${problems.length} problem(s):\n- ${problems.join("\n- ")}`);
			process.exitCode = 1;
		} else if (SMOKE) {
			log("smoke: every phase ran and every check passed");
		}
	}
}

// ---- report ------------------------------------------------------------------------------

function printTable(r) {
	const rows = [];
	const f = (v, d = 2) => (v === null || v === undefined || Number.isNaN(v) ? "–" : Number(v).toFixed(d));
	const signed = (v, d = 2) => (v === null || v === undefined ? "–" : `${v >= 0 ? "+" : ""}${Number(v).toFixed(d)}`);
	const verdict = (ok) => (ok ? "met" : "NOT met");
	const row = (metric, direct, floor, gateway, delta, target = "", met = "") =>
		rows.push([metric, direct, floor, gateway, delta, target, met]);

	const s = r.sequential;
	row(
		"latency sequential p50 (ms)",
		f(s.direct.p50, 3),
		f(s.floor.p50, 3),
		f(s.gateway.p50, 3),
		signed(s.gateway.p50 - s.floor.p50, 3),
		"≤ +1 ms over floor",
		verdict(s.gateway.p50 - s.floor.p50 <= 1),
	);
	row(
		"latency sequential p99 (ms)",
		f(s.direct.p99, 3),
		f(s.floor.p99, 3),
		f(s.gateway.p99, 3),
		signed(s.gateway.p99 - s.floor.p99, 3),
	);
	row(
		"  added over direct, p50 (ms)",
		"",
		signed(s.floor.p50 - s.direct.p50, 3),
		signed(s.gateway.p50 - s.direct.p50, 3),
		"",
		"< +2.5 (Portkey)",
		verdict(s.gateway.p50 - s.direct.p50 < 2.5),
	);
	const fr = r.fixedRate;
	row(
		`latency @${fr.rate} req/s p50 (ms)`,
		f(fr.direct.p50, 3),
		f(fr.floor.p50, 3),
		f(fr.gateway.p50, 3),
		signed(fr.gateway.p50 - fr.floor.p50, 3),
		"≤ +1 ms over floor",
		verdict(fr.gateway.p50 - fr.floor.p50 <= 1),
	);
	row(
		`latency @${fr.rate} req/s p99 (ms)`,
		f(fr.direct.p99, 3),
		f(fr.floor.p99, 3),
		f(fr.gateway.p99, 3),
		signed(fr.gateway.p99 - fr.floor.p99, 3),
	);
	for (const [inflight, c] of Object.entries(r.capacity)) {
		const ratio = c.gateway.rps / c.floor.rps;
		const isTarget = Number(inflight) === 16;
		row(
			`req/s @${inflight} in flight`,
			f(c.direct.rps, 0),
			f(c.floor.rps, 0),
			f(c.gateway.rps, 0),
			`${f(ratio * 100, 0)}% of floor`,
			isTarget ? "≥ 80% of floor" : "",
			isTarget ? verdict(ratio >= 0.8) : "",
		);
	}
	const cpu = r.cpuPerRequest;
	// On Cloudflare the ledger Durable Object and D1 run on other machines; here they share the
	// gateway's one workerd thread. Taking the measured CPU of one authorize+settle pair (its
	// usage-record flush to D1 included) off the gateway's CPU per request estimates what the
	// Worker itself costs, and so its capacity against the floor's.
	const pair = r.ledger?.[16]?.cpuPerSettlementMs;
	const at16 = cpu.inflight16;
	if (pair !== undefined && at16) {
		const workerOnly = at16.gateway - pair;
		row(
			"  est. without the ledger DO and D1 (ms CPU)",
			"",
			f(at16.floor, 3),
			f(workerOnly, 3),
			`${f((at16.floor / workerOnly) * 100, 0)}% of floor`,
			"derived, see README",
		);
	}
	row(
		"workerd CPU/request, sequential (ms)",
		"",
		f(cpu.sequential.floor, 3),
		f(cpu.sequential.gateway, 3),
		signed(cpu.sequential.gateway - cpu.sequential.floor, 3),
		"≤ 1.5 ms",
		verdict(cpu.sequential.gateway <= 1.5),
	);
	for (const inflight of Object.keys(r.capacity)) {
		const c = cpu[`inflight${inflight}`];
		row(
			`workerd CPU/request @${inflight} in flight (ms)`,
			"",
			f(c.floor, 3),
			f(c.gateway, 3),
			signed(c.gateway - c.floor, 3),
			"≤ 1.5 ms",
			verdict(c.gateway <= 1.5),
		);
	}
	const ps = r.pacedStreams;
	for (const [level, l] of Object.entries(ps.levels)) {
		const strict = Number(level) >= 32;
		const ttfbDelta = l.gateway.ttfb.p50 - l.direct.ttfb.p50;
		const totalRatio = l.gateway.total.p50 / l.direct.total.p50;
		row(
			`stream ×${level} (${ps.chunks}@${ps.paceMs}ms) TTFB p50 (ms)`,
			f(l.direct.ttfb.p50),
			f(l.floor.ttfb.p50),
			f(l.gateway.ttfb.p50),
			signed(ttfbDelta),
			strict ? "≤ +3 ms vs direct" : "",
			strict ? verdict(ttfbDelta <= 3) : "",
		);
		row(
			`stream ×${level} TTFB p99 (ms)`,
			f(l.direct.ttfb.p99),
			f(l.floor.ttfb.p99),
			f(l.gateway.ttfb.p99),
			signed(l.gateway.ttfb.p99 - l.direct.ttfb.p99),
		);
		row(
			`stream ×${level} total p50 (ms)`,
			f(l.direct.total.p50, 0),
			f(l.floor.total.p50, 0),
			f(l.gateway.total.p50, 0),
			`${signed((totalRatio - 1) * 100, 1)}%`,
			strict ? "≤ +5% vs direct" : "",
			strict ? verdict(totalRatio <= 1.05) : "",
		);
		row(
			`stream ×${level} total p99 (ms)`,
			f(l.direct.total.p99, 0),
			f(l.floor.total.p99, 0),
			f(l.gateway.total.p99, 0),
			`${signed((l.gateway.total.p99 / l.direct.total.p99 - 1) * 100, 1)}%`,
		);
		row(
			`stream ×${level} workerd CPU/stream (ms)`,
			"",
			f(l.cpuPerStream.floor),
			f(l.cpuPerStream.gateway),
			signed(l.cpuPerStream.gateway - l.cpuPerStream.floor),
		);
		const perChunk = (ms) => (ms * 1000) / l.gateway.frames;
		const g = perChunk(l.cpuPerStream.gateway);
		row(
			`stream ×${level} CPU/chunk, all-in (µs)`,
			"",
			f(perChunk(l.cpuPerStream.floor), 1),
			f(g, 1),
			signed(g - perChunk(l.cpuPerStream.floor), 1),
			"≤ 200 (stretch 120)",
			g <= 120 ? "met (stretch)" : verdict(g <= 200),
		);
	}
	const cc = r.cpuPerChunk;
	for (const kind of ["paced", "burst"]) {
		const g = cc[kind].gateway.marginal;
		row(
			`CPU/streamed chunk, ${kind}, marginal (µs)`,
			"",
			f(cc[kind].floor.marginal, 1),
			f(g, 1),
			signed(g - cc[kind].floor.marginal, 1),
			"≤ 200 (stretch 120)",
			g <= 120 ? "met (stretch)" : verdict(g <= 200),
		);
		row(
			`CPU/streamed chunk, ${kind}, all-in avg (µs)`,
			"",
			f(cc[kind].floor.average, 1),
			f(cc[kind].gateway.average, 1),
			signed(cc[kind].gateway.average - cc[kind].floor.average, 1),
		);
	}
	const b = r.burstStreams;
	row(
		`burst ×${b.concurrent} (${b.chunks} chunks) total p50 (ms)`,
		f(b.direct.total.p50, 0),
		f(b.floor.total.p50, 0),
		f(b.gateway.total.p50, 0),
		`${signed((b.gateway.total.p50 / b.direct.total.p50 - 1) * 100, 0)}%`,
	);
	for (const [inflight, l] of Object.entries(r.ledger)) {
		row(
			`ledger DO settlements/s, one key, ${inflight} in flight`,
			"",
			"",
			f(l.settlementsPerSecond, 0),
			`${f(l.cpuPerSettlementMs, 3)} ms CPU each`,
			`outbox left: ${l.outboxBacklogAtEnd}`,
		);
	}
	const u = r.usageRecords;
	row(
		"usage records in D1 / gateway requests",
		"",
		"",
		`${u.recordsInD1}/${u.gatewayRequests}`,
		"",
		"all recorded",
		verdict(u.recordsInD1 === u.gatewayRequests),
	);

	const head = ["metric", "direct", "floor", "gateway", "gateway vs floor", "target", "status"];
	const widths = head.map((h, i) => Math.max(h.length, ...rows.map((x) => String(x[i]).length)));
	const line = (cells) => cells.map((c, i) => (i === 0 ? String(c).padEnd(widths[i]) : String(c).padStart(widths[i]))).join("  ");
	console.log(`\n${line(head)}\n${widths.map((w) => "-".repeat(w)).join("  ")}`);
	for (const x of rows) console.log(line(x));
	console.log("\nhot-path pieces in isolation (probe worker inside the gateway's workerd, sequential):");
	for (const [name, c] of Object.entries(r.components)) {
		console.log(
			`  ${name.padEnd(18)} ${f(c.cpuMsEach * 1000, 0).padStart(5)} µs CPU, ${f(c.wallMsEach * 1000, 0).padStart(5)} µs wall each`,
		);
	}
	console.log(
		`\n${r.meta.host.cpus} CPUs (${r.meta.host.model}), node ${r.meta.host.node}, miniflare ${r.meta.miniflare}, workerd ${r.meta.workerd}; ` +
			`idle CPU ms/s: floor ${f(r.meta.idleCpuMsPerSecond.floor)}, gateway ${f(r.meta.idleCpuMsPerSecond.gateway)}`,
	);
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
