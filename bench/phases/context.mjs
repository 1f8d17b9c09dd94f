// What every phase of the bench shares: the targets and the bodies sent to them, CPU windows
// that open and close on a quiet workerd, the count of requests per gateway target (each must
// leave one usage record in its D1), the ledger-call counters of the gateway targets and the
// checks that failed.
import { setTimeout as sleep } from "node:timers/promises";
import { cpuDelta, cpuSample } from "../lib/proc.mjs";
import { ENGINE_MODEL, GW_MODEL, GW_PACED_MODEL } from "../lib/rig.mjs";

/** At least this long after a window, for waitUntil settlement and the ledger's usage flush (alarm at +200 ms). */
const SETTLE_MS = 600;
/** A workerd (or Portkey's Node) using less than this much CPU per 200 ms is idle (no deferred work left). */
const QUIET_CPU_MS = 2;

const WORDS = "the quick brown fox jumps over a lazy dog while bench frames keep flowing".split(" ");
/** A prompt the engine echoes back as exactly `chunks` content chunks ("Echo:" + n−1 words). */
export function promptFor(chunks) {
	return Array.from({ length: chunks - 1 }, (_, i) => WORDS[i % WORDS.length]).join(" ");
}

/** The gateways and `minimal` take the gateway's model ids and name the engine's themselves. */
const speaksGatewayModels = (t) => t.kind === "gateway" || t.kind === "minimal";

const nonStreamBody = (t) =>
	JSON.stringify({
		model: speaksGatewayModels(t) ? GW_MODEL : ENGINE_MODEL,
		messages: [{ role: "user", content: "hello from the bench" }],
		max_tokens: 16,
	});

/** The body the engine receives is the same for every target: the gateway's rewrites are pre-applied for the others. */
function streamBody(t, chunks, paced) {
	const gw = speaksGatewayModels(t);
	return JSON.stringify({
		model: gw ? (paced ? GW_PACED_MODEL : GW_MODEL) : ENGINE_MODEL,
		messages: [{ role: "user", content: promptFor(chunks) }],
		max_tokens: chunks + 16,
		stream: true,
		stream_options: { include_usage: true },
	});
}

/** Content chunks, the finish chunk, the usage chunk and [DONE]. */
export const expectedFrames = (chunks) => chunks + 3;

/**
 * The shared state of one run: `rig` from startRig(), `params` the phase sizes (FULL or SMOKE
 * in bench/run.mjs), `log` a progress logger.
 */
export function createContext({ rig, params, smoke, log }) {
	const { targets, pids } = rig;
	for (const t of targets) t.bodies.nonStream = nonStreamBody(t);
	let idleCpuPerMs = Object.fromEntries(Object.keys(pids).map((k) => [k, 0]));
	/** Requests sent to each gateway target (each must leave a usage record in its D1). */
	const sentTo = Object.fromEntries(targets.filter((t) => t.kind === "gateway").map((t) => [t.name, 0]));
	/** The processes a window waits on: every target's server process but the engine. */
	const quietNames = Object.keys(pids).filter((k) => k !== "engine");
	const problems = [];

	/**
	 * Waits until both workerd processes are idle: the deferred work of earlier phases (usage
	 * outbox flushes to D1, alarms) must neither land in the next window nor slow it down.
	 */
	async function quiesce(maxMs = 60_000) {
		const start = performance.now();
		let last = cpuSample(pids);
		while (performance.now() - start < maxMs) {
			await sleep(200);
			const now = cpuSample(pids);
			const d = cpuDelta(last, now);
			last = now;
			if (quietNames.every((k) => d[k].sched < QUIET_CPU_MS)) return performance.now() - start;
		}
		return performance.now() - start;
	}

	function check(cond, message) {
		if (!cond) problems.push(message);
	}

	return {
		P: params,
		smoke,
		log,
		targets,
		/** The gateway targets: "gateway", then each --variant. */
		gateways: targets.filter((t) => t.kind === "gateway"),
		/** Everything that serves streams (Portkey does not: see bench/README.md). */
		streamTargets: targets.filter((t) => t.stream),
		/** The targets the stream phases run for the per-chunk figures: direct, floor, minimal, gateway. */
		baseTargets: targets.filter((t) => ["direct", "floor", "minimal", "gateway"].includes(t.name)),
		byName: Object.fromEntries(targets.map((t) => [t.name, t])),
		key: rig.key,
		keys: rig.keys,
		info: rig.info,
		stateDir: rig.stateDir,
		rpc: rig.rpc,
		problems,
		check,
		quiesce,
		/** `n` requests sent to target `t`: counted when it is a gateway (each must leave a usage record in D1). */
		count(t, n) {
			if (t.kind === "gateway") sentTo[t.name] += n;
		},
		/** `n` requests sent to every target, as the interleaved loads do. */
		countAll(n) {
			for (const name of Object.keys(sentTo)) sentTo[name] += n;
		},
		/** Every request sent to the main gateway. */
		countGateway(n) {
			sentTo.gateway += n;
		},
		get gatewayRequests() {
			return sentTo.gateway;
		},
		requestsSentTo: (name) => sentTo[name],

		/** The gateway target's ledger-call counters (bench/workers/ledger-distance.mjs). */
		async ledgerCalls(t) {
			const res = await fetch(`${t.url}/__bench/ledger`);
			if (!res.ok) throw new Error(`${t.name} /__bench/ledger: ${res.status} ${await res.text()}`);
			return res.json();
		},
		/** Sets the delay of every ledger call of gateway target `t` (0: none). */
		async setLedgerDelay(t, ms) {
			const res = await fetch(`${t.url}/__bench/ledger?delay_ms=${ms}`, { method: "POST" });
			if (!res.ok) throw new Error(`${t.name} /__bench/ledger: ${res.status} ${await res.text()}`);
			return res.json();
		},
		/** Ledger calls per request of each gateway target over `fn` (which sends `perTarget(t)` requests to each). */
		async countLedgerCalls(fn, perTarget) {
			const gws = targets.filter((t) => t.kind === "gateway");
			const before = await Promise.all(gws.map((t) => this.ledgerCalls(t)));
			const result = await fn();
			const after = await Promise.all(gws.map((t) => this.ledgerCalls(t)));
			const calls = {};
			gws.forEach((t, i) => {
				const n = perTarget(t, result);
				const byMethod = {};
				for (const [m, c] of Object.entries(after[i].byMethod)) {
					const d = c - (before[i].byMethod[m] ?? 0);
					if (d) byMethod[m] = d / Math.max(1, n);
				}
				calls[t.name] = { perRequest: (after[i].calls - before[i].calls) / Math.max(1, n), requests: n, byMethod };
			});
			return { result, calls };
		},
		/** The target a pid name counts for: a split-layout gateway's second process ("<name>-ledger") is its gateway's. */
		targetOfPid: (name) => targets.find((t) => t.ledgerPidName === name)?.name ?? name,
		/** The pid name of the workerd that hosts gateway `name`'s Durable Objects and D1 (and the probe worker). */
		statePid: (name) => targets.find((t) => t.name === name)?.ledgerPidName ?? name,
		/** Time for waitUntil settlement and the ledger's usage flush after a burst of requests. */
		settle: () => sleep(SETTLE_MS),

		/** Idle CPU of each process (timers, nothing served), subtracted from every window. */
		async measureIdle(ms) {
			const idle = cpuSample(pids);
			await sleep(ms);
			const idleDelta = cpuDelta(idle, cpuSample(pids));
			idleCpuPerMs = Object.fromEntries(Object.entries(idleDelta).map(([k, v]) => [k, v.sched / ms]));
		},
		idleCpuMsPerSecond: () => Object.fromEntries(Object.entries(idleCpuPerMs).map(([k, v]) => [k, v * 1000])),

		/**
		 * Runs `fn` from a quiet start, waits until the deferred work it caused has run (settlement
		 * in waitUntil, the ledger's alarm flushing usage records to D1), and returns its result with
		 * the CPU each process used over the whole span.
		 */
		async withCpu(fn) {
			await quiesce();
			const before = cpuSample(pids);
			const t0 = performance.now();
			const result = await fn();
			await sleep(SETTLE_MS);
			const drainMs = await quiesce();
			const wallMs = performance.now() - t0;
			const delta = cpuDelta(before, cpuSample(pids));
			for (const [name, d] of Object.entries(delta)) {
				const idle = (idleCpuPerMs[name] ?? 0) * wallMs;
				d.stat = Math.max(0, d.stat - idle);
				d.sched = Math.max(0, d.sched - idle);
			}
			return { result, cpu: delta, wallMs, drainMs };
		},

		/** A non-stream chat request for target `t`. */
		nonStream: (t) => ({ path: "/v1/chat/completions", body: t.bodies.nonStream }),

		/** A stream of `chunks` content chunks, paced by the engine at params.paceMs or not. */
		streamRequest(chunks, paced) {
			return (t) => {
				const key = `${chunks}:${paced}`;
				t.bodies[key] ??= streamBody(t, chunks, paced);
				const pathPrefix = !speaksGatewayModels(t) && paced ? `/p/${params.paceMs}` : "";
				return { path: `${pathPrefix}/v1/chat/completions`, body: t.bodies[key] };
			};
		},

		checkStreams(name, label, results, chunks) {
			const bad = results.filter((r) => !r.ok || r.frames !== expectedFrames(chunks) || !r.tail.endsWith("data: [DONE]\n\n"));
			check(
				bad.length === 0,
				`${label} ${name}: ${bad.length}/${results.length} streams incomplete (e.g. status ${bad[0]?.status}, ${bad[0]?.frames} frames, expected ${expectedFrames(chunks)}; ${bad[0]?.error ?? ""})`,
			);
		},
	};
}
