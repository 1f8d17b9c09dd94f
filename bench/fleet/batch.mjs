/**
 * `npm run bench:fleet -- --batch` (issue 36): does the batch lane fill the GPUs interactive
 * traffic leaves idle? A day-shaped interactive load (a sinusoid: quiet at 03:00, busiest at 15:00,
 * 24 "hours" compressed into `dayS` simulated seconds) routed by the gateway's `pickRoute`, plus an
 * endless backlog of batch lines placed by the gateway's shipped batch scheduling code
 * (src/batches/schedule.ts: `lineLimit`, `loadIsStale`, `roomOn`, `prefixGroup`, `homeNode`,
 * bundled as they ship) the way src/batches/dispatcher.ts uses it: every second and whenever a line
 * ends, each node under its limit has its gauges read again when the last read is LOAD_READ_MS
 * old, and each node with room gets lines, first of the groups whose home it is. Lines carry priority 1, interactive requests 0:
 * the engine (engine.mjs) queues interactive first and preempts a line when an interactive request
 * cannot start.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { ENGINES } from "./engine.mjs";
import { makePolicies } from "./policies.mjs";
import { simulate } from "./sim.mjs";
import { blockKeys, Chains } from "./workloads.mjs";

export const DAY = {
	nodes: 4,
	engine: "h100-llama-8b",
	dayS: 1440, // 24 h of load shape; a "day-hour" is 60 simulated s
	peakRate: 48, // interactive requests/s at 15:00
	nightShare: 0.08, // the 03:00 rate as a share of the peak
	apps: 16,
	system: 1500,
	user: 300,
	answer: 300,
	lineGroups: 200, // lines a prefix group
	lineSystem: 2000,
	lineUser: 400,
	lineAnswer: 250,
	capacityS: 120, // the lines-only run that measures a node's token capacity
};

const rateAt = (o, t) => {
	const h = ((t / o.dayS) * 24) % 24;
	return o.peakRate * (o.nightShare + (1 - o.nightShare) * (1 - Math.cos((2 * Math.PI * (h - 3)) / 24)) * 0.5);
};

/** The interactive load: Poisson arrivals at rateAt(t) (thinning), each of one of `apps` system prompts. */
function interactive(o, chains) {
	return {
		start(sim) {
			o.lane?.start(sim);
			if (!o.peakRate) return;
			const sys = Array.from({ length: o.apps }, (_, a) => chains.of(0, `app${a}`));
			let n = 0;
			const next = (now) => {
				const t = now - Math.log(1 - sim.rng()) / o.peakRate;
				if (t >= o.durationS) return;
				sim.at(t, (at) => {
					if (sim.rng() < rateAt(o, at) / o.peakRate) {
						const a = Math.floor(sim.rng() * o.apps);
						const segments = [
							{ chain: sys[a], len: o.system },
							{ chain: chains.of(sys[a], `u${n++}`), len: o.user },
						];
						sim.submit(
							{
								prompt: o.system + o.user,
								keys: blockKeys(segments, o.system + o.user),
								answer: o.answer,
								reserve: Math.ceil(o.answer / 64) + 1,
								body: { messages: [{ role: "system", content: `app ${a}` }] },
							},
							at,
						);
					}
					next(at);
				});
			};
			next(0);
		},
	};
}

/** The batch lane: an endless backlog of lines in prefix groups, dispatched as src/batches/dispatcher.ts does. */
function batchLane(routing, o, chains) {
	const nodes = Array.from({ length: o.nodes }, (_, i) => ({ url: `node-${i}`, weight: 1, index: i }));
	const queued = []; // groups in backlog order: { grp, home, sys, left, next }
	let made = 0;
	const onNode = new Array(o.nodes).fill(0);
	const stats = { finished: 0, finishedAt: [], preempted: 0 };
	const newGroup = () => {
		const g = made++;
		const grp = routing.prefixGroup({
			messages: [
				{ role: "system", content: `batch job ${g}` },
				{ role: "user", content: "" },
			],
		});
		return { g, grp, home: routing.homeNode(grp, nodes).index, sys: chains.of(0, `job${g}`), left: o.lineGroups, n: 0 };
	};
	const next = (i) => {
		while (queued.length < 64) queued.push(newGroup()); // the dispatcher reads up to 64 queued groups
		const group = queued.find((q) => q.home === i) ?? queued[0];
		const line = group.n++;
		if (--group.left === 0) queued.splice(queued.indexOf(group), 1);
		const segments = [
			{ chain: group.sys, len: o.lineSystem },
			{ chain: chains.of(group.sys, `l${line}`), len: o.lineUser },
		];
		return {
			prompt: o.lineSystem + o.lineUser,
			keys: blockKeys(segments, o.lineSystem + o.lineUser),
			answer: o.lineAnswer,
			reserve: Math.ceil(o.lineAnswer / 64) + 1,
			priority: 1,
			line: true,
		};
	};
	let sim;
	// The dispatcher's own reads of each engine's gauges (src/batches/schedule.ts `LoadRead`), when
	// `freshLoad`; else it places lines on the health check's gauges (`metricsS` old at most).
	const reads = new Array(o.nodes).fill(undefined);
	const fill = (now) => {
		if (now >= o.durationS) return;
		const fleet = sim.fleet;
		const ms = now * 1000;
		for (let i = 0; i < o.nodes; i++) {
			if (onNode[i] >= o.maxInFlight) continue;
			const e = fleet.engines[i];
			if (o.freshLoad && routing.loadIsStale(reads[i], ms)) {
				reads[i] = { at: ms, waiting: e.queue.length, running: e.running.length, kvCacheUsage: e.usage, lines: onNode[i] };
			}
			const view = {
				url: `node-${i}`,
				weight: 1,
				inFlight: onNode[i],
				coolingUntil: 0,
				failedAt: 0,
				healthy: true,
				...e.reported,
			};
			// The capacity run has no interactive traffic: whatever the engine runs is lines.
			if (!o.peakRate) view.running = 0;
			let room = routing.roomOn(view, onNode[i], o.maxInFlight, ms, o.freshLoad ? reads[i] : undefined);
			for (; room > 0; room--) {
				const line = next(i);
				line.onFinish = (t) => {
					onNode[i]--;
					stats.preempted += line.preempted ?? 0;
					if (t < o.durationS) stats.finished++;
					fill(t);
				};
				onNode[i]++;
				sim.submitTo(line, i, now);
			}
		}
	};
	return {
		stats,
		start(s) {
			sim = s;
			const tick = (now) => {
				fill(now);
				if (now + 1 < o.durationS) sim.at(now + 1, tick); // IDLE_POLL_MS
			};
			sim.at(0, tick);
		},
	};
}

/** One run: `maxInFlight` 0 = no batch lane. */
export function runDay(routing, policy, base, maxInFlight, extra = {}) {
	const o = { ...base, durationS: base.dayS, warmupS: 0, maxInFlight, freshLoad: true, ...extra };
	const chains = new Chains();
	const lane = maxInFlight ? batchLane(routing, o, chains) : undefined;
	o.lane = lane;
	let snap;
	const w = interactive(o, chains);
	const result = simulate(
		{
			start(sim) {
				w.start(sim);
				sim.at(o.durationS, () => {
					snap = sim.fleet.engines.map((e) => ({ busy: e.busyS ?? 0, tokens: [...(e.tokens ?? [0, 0])] }));
				});
			},
		},
		policy,
		o,
	);
	const rs = result.records.filter((r) => r.arrival < o.durationS);
	const ttft = rs.map((r) => (r.firstToken ?? result.end) - r.arrival).sort((a, b) => a - b);
	const q = (p) => ttft[Math.min(ttft.length - 1, Math.floor(p * ttft.length))];
	// The p99 of the busiest third of the day (day-hours 11–19, around the 15:00 peak) and of the rest.
	const peak = (r) => {
		const h = ((r.arrival / o.dayS) * 24) % 24;
		return h >= 11 && h < 19;
	};
	const p99Of = (list) => {
		const t = list.map((r) => (r.firstToken ?? result.end) - r.arrival).sort((a, b) => a - b);
		return t[Math.min(t.length - 1, Math.floor(0.99 * t.length))];
	};
	const T = o.durationS * o.nodes;
	const sum = (f) => snap.reduce((s, e) => s + f(e), 0);
	return {
		requests: rs.length,
		p50: q(0.5),
		p99: q(0.99),
		p99Peak: p99Of(rs.filter(peak)),
		p99OffPeak: p99Of(rs.filter((r) => !peak(r))),
		busy: sum((e) => e.busy) / T,
		interactiveTps: sum((e) => e.tokens[0]) / o.durationS,
		batchTps: sum((e) => e.tokens[1]) / o.durationS,
		lines: lane?.stats.finished ?? 0,
		linesPerHour: ((lane?.stats.finished ?? 0) / o.durationS) * 3600,
		preempted: lane?.stats.preempted ?? 0,
	};
}

/**
 * The table: no batch lane, then the lane at several `batches.max_in_flight_per_node` (the default:
 * lineLimit of the engine's `maxSeqs`, as for a node configured with `max_num_seqs`), on the engine
 * as configured and with its low-priority prefill capped (`lowPrefill`), placing lines on the
 * dispatcher's own gauge reads (`freshLoad`, as shipped) or on the health check's. Idle capacity,
 * two ways: tokens (the fleet's token throughput capacity, measured by a run of lines alone at the
 * engine's `maxSeqs`, minus the tokens the interactive load computes) and GPU time (node-seconds
 * no step runs, in the run without lines). The first two rows are the default without and with the
 * prefill cap: the targets read them.
 */
export function batchTable(routing, makePolicy, base, rows) {
	const run = (spec, m, extra) => runDay(routing, makePolicy(base), { ...base, spec }, m, extra);
	const cap = run(base.spec, base.spec.maxSeqs, { peakRate: 0, dayS: base.capacityS, freshLoad: false });
	const capTps = cap.batchTps;
	const off = run(base.spec, 0);
	const idleTps = capTps - off.interactiveTps;
	const def = routing.lineLimit(undefined, base.spec.maxSeqs);
	const fmt = (v, d = 3) => v.toFixed(d);
	const pct = (v) => `${(v * 100).toFixed(1)}%`;
	const out = [
		`Token capacity of the fleet (lines alone, ${base.spec.maxSeqs} at once a node, ${base.capacityS} s): ${Math.round(capTps).toLocaleString("en-US")} tokens/s (prefill + decode). Without batches the interactive load computes ${Math.round(off.interactiveTps).toLocaleString("en-US")} tokens/s on average: idle token capacity ${Math.round(idleTps).toLocaleString("en-US")} tokens/s; idle GPU time (no step running) ${pct(1 - off.busy)}.`,
		"",
		"| max_in_flight_per_node (lines + interactive a node) | gauges lines are placed on | engine's line prefill cap (tokens a step) | fleet utilisation (tokens) | GPU busy | interactive TTFT p50 (s) | p99 (s) | p99 × without | p99 busiest third / rest (s) | batch lines finished per hour | idle token capacity used | idle GPU time used | lines preempted |",
		"|---|---|---|---|---|---|---|---|---|---|---|---|---|",
	];
	const row = (label, gauges, chunk, s) =>
		out.push(
			`| ${label} | ${gauges} | ${chunk ?? "none (vLLM's default)"} | ${pct((s.interactiveTps + s.batchTps) / capTps)} | ${pct(s.busy)} | ${fmt(s.p50)} | ${fmt(s.p99)} | ${fmt(s.p99 / off.p99, 2)} | ${fmt(s.p99Peak)} / ${fmt(s.p99OffPeak)} | ${Math.round(s.linesPerHour).toLocaleString("en-US")} | ${s.batchTps ? pct(s.batchTps / idleTps) : "—"} | ${s.batchTps ? pct((s.busy - off.busy) / (1 - off.busy)) : "—"} | ${s.preempted} |`,
		);
	row("off (no batch lane)", "—", undefined, off);
	const results = [];
	for (const { maxInFlight, lowPrefill, stale } of rows) {
		const m = maxInFlight ?? def;
		const s = run({ ...base.spec, lowPrefill }, m, stale ? { freshLoad: false } : {});
		results.push({ maxInFlight: m, lowPrefill, stale, ...s });
		const label = maxInFlight === undefined ? `${m} (default: ${base.spec.maxSeqs} max_num_seqs ÷ 4)` : `${m}`;
		const gauges = stale ? `health check's (every ${base.metricsS} s)` : "dispatcher's own (≤ 1 s old)";
		row(label, gauges, lowPrefill, s);
	}
	const step = base.spec.stepBaseS;
	const checks = results.slice(0, 2).flatMap((r) => {
		const at = `at the default (${r.maxInFlight})${r.lowPrefill ? `, engine prefill cap ${r.lowPrefill}` : ", no engine prefill cap"}`;
		const alt = Math.min(off.p99 + step + 0.02, 1.5 * off.p99);
		return [
			`idle token capacity used by batches ${at} (≥ 80%): ${pct(r.batchTps / idleTps)}: ${r.batchTps >= 0.8 * idleTps ? "met" : "missed"}`,
			`interactive TTFT p99 ${at} (≤ 1.1× without, ${fmt(1.1 * off.p99)} s): ${fmt(r.p99)} s, ${fmt(r.p99 / off.p99, 2)}×: ${r.p99 <= 1.1 * off.p99 ? "met" : "missed"}; (≤ one ${step * 1000} ms step + 20 ms, ${fmt(off.p99 + step + 0.02)} s, or 1.5×, ${fmt(1.5 * off.p99)} s, whichever is less, ${fmt(alt)} s): ${r.p99 <= alt ? "met" : "missed"}`,
		];
	});
	return { out, checks, off, results, capTps, idleTps };
}

/** `--batch`: the table on stdout, and into bench/README.md's fleet-batch markers with `--write`. */
export function batchMain(routing, o) {
	const started = Date.now();
	const base = { ...DAY, spec: ENGINES[DAY.engine], seed: o.seed, drainS: 60, metricsS: o.metricsS, factor: o.factor };
	const { out, checks } = batchTable(routing, (opts) => makePolicies(routing, opts).gateway(), base, BATCH_ROWS);
	const table = [
		`#### The batch lane on a day of interactive load (\`--batch\`)`,
		"",
		`${base.nodes} nodes of ${base.spec.label}, routed by the gateway's \`pickRoute\` on engine gauges (waiting, KV use) refreshed every ${base.metricsS} s (health_check_interval_ms); batch lines placed by src/batches/schedule.ts (\`lineLimit\`, \`loadIsStale\`, \`roomOn\`) on the dispatcher's own read of each engine's gauges, at most 1 s old (LOAD_READ_MS), unless a row says the health check's; a node's limit counts its lines and its interactive requests (the engine's \`running\` less the lines it counted). The engine's line prefill cap is an engine setting (vLLM's \`long_prefill_token_threshold\`), not the gateway's. Interactive: Poisson, rate ${base.peakRate} × (${base.nightShare} + ${1 - base.nightShare} × (1 − cos(2π(h − 3)/24))/2) requests/s at hour h (quiet at 03:00, ${base.peakRate}/s at 15:00), 24 h compressed into ${base.dayS} simulated s (a day-hour is ${base.dayS / 24} s; per-hour figures are per real simulated hour of engine time); ${base.apps} system prompts of ${base.system} tokens, ${base.user}-token questions, ${base.answer}-token answers. Batch: an endless backlog of lines in prefix groups of ${base.lineGroups} (${base.lineSystem}-token shared system prompt, ${base.lineUser}-token line, ${base.lineAnswer}-token answer), priority 1 (interactive 0: queued first, a line preempted when an interactive request cannot start). Seed ${o.seed}.`,
		"",
		...out,
		"",
		"Targets:",
		"",
		...checks.map((c) => `- ${c}`),
	].join("\n");
	console.log(table);
	console.error(`simulated in ${Math.round((Date.now() - started) / 1000)} s of wall time`);
	if (o.write) {
		const path = new URL("../README.md", import.meta.url);
		const readme = readFileSync(path, "utf8");
		const begin = "<!-- fleet-batch-table:begin -->";
		const end = "<!-- fleet-batch-table:end -->";
		const at = readme.indexOf(begin);
		const stop = readme.indexOf(end);
		if (at < 0 || stop < 0) throw new Error("bench/README.md has no fleet-batch-table markers");
		writeFileSync(path, `${readme.slice(0, at + begin.length)}\n${table}\n${readme.slice(stop)}`);
		console.error("bench/README.md updated");
	}
}

/**
 * The table's batch rows (`maxInFlight` absent: the default): the default first, without and with
 * the engine's prefill cap for lines (the targets read these two).
 */
export const BATCH_ROWS = [
	{},
	{ lowPrefill: 256 },
	{ maxInFlight: 4 },
	{ maxInFlight: 80, lowPrefill: 256 },
	{ maxInFlight: 96 },
	{ maxInFlight: 96, lowPrefill: 256 },
	{ maxInFlight: 112, lowPrefill: 256 },
	{ lowPrefill: 256, stale: true },
	{ maxInFlight: 96, lowPrefill: 256, stale: true },
];
