// The bench's report: the comparison table (with the targets each row is held to) and the
// hot-path pieces, from a results object as bench/run.mjs writes it to JSON. Also reprints a
// saved run: node bench/run.mjs --report bench/results.json
import { minimalRows } from "./report-minimal.mjs";

const f = (v, d = 2) => (v === null || v === undefined || Number.isNaN(v) ? "–" : Number(v).toFixed(d));
const signed = (v, d = 2) => (v === null || v === undefined ? "–" : `${v >= 0 ? "+" : ""}${Number(v).toFixed(d)}`);
const verdict = (ok) => (ok ? "met" : "NOT met");
/** A Portkey cell: blank when the run had no Portkey (the column is then left out). */
const pk = (v, d) => (v === undefined ? undefined : f(v, d));

/**
 * One latency percentile row of a phase (`t`: its per-target stats): every target's value, the
 * gateway over the floor, and the target (p50 only: at most +1 ms over the floor).
 */
function percentileRow(row, label, t, p) {
	const over = t.gateway[p] - t.floor[p];
	const judged = p === "p50";
	row(
		label,
		f(t.direct[p], 3),
		f(t.floor[p], 3),
		f(t.gateway[p], 3),
		signed(over, 3),
		judged ? "≤ +1 ms over floor" : "",
		judged ? verdict(over <= 1) : "",
		pk(t.portkey?.[p], 3),
	);
}

/** Non-stream latency, sequential and at a fixed rate. */
function latencyRows(r, row) {
	const s = r.sequential;
	percentileRow(row, "latency sequential p50 (ms)", s, "p50");
	percentileRow(row, "latency sequential p99 (ms)", s, "p99");
	// Portkey's added latency, measured on the same engine in the same run (older runs: the
	// +2.5 ms Portkey quotes for its own gateway).
	const pkAdded = s.portkey ? s.portkey.p50 - s.direct.p50 : undefined;
	const gwAdded = s.gateway.p50 - s.direct.p50;
	row(
		"  added over direct, p50 (ms)",
		"",
		signed(s.floor.p50 - s.direct.p50, 3),
		signed(gwAdded, 3),
		"",
		pkAdded === undefined ? "< +2.5 (Portkey, quoted)" : `< Portkey's ${signed(pkAdded, 3)}`,
		verdict(gwAdded < (pkAdded ?? 2.5)),
		pkAdded === undefined ? undefined : signed(pkAdded, 3),
	);
	if (s.portkey) {
		row(
			"  added over floor, p50 (ms)",
			"",
			"",
			signed(s.gateway.p50 - s.floor.p50, 3),
			"",
			"",
			"",
			signed(s.portkey.p50 - s.floor.p50, 3),
		);
	}
	const fr = r.fixedRate;
	percentileRow(row, `latency @${fr.rate} req/s p50 (ms)`, fr, "p50");
	percentileRow(row, `latency @${fr.rate} req/s p99 (ms)`, fr, "p99");
}

/** Requests per second in flight, and workerd CPU per request. */
function capacityRows(r, row) {
	for (const [inflight, c] of Object.entries(r.capacity)) {
		const ratio = c.gateway.rps / c.floor.rps;
		const isTarget = Number(inflight) === 16;
		row(
			`req/s @${inflight} in flight`,
			f(c.direct.rps, 0),
			f(c.floor.rps, 0),
			f(c.gateway.rps, 0),
			`${f(ratio * 100, 0)}% of floor`,
			isTarget ? "≥ 60% of floor (stretch 80%)" : "",
			isTarget ? (ratio >= 0.8 ? "met (stretch)" : verdict(ratio >= 0.6)) : "",
			pk(c.portkey?.rps, 0),
		);
	}
	const cpu = r.cpuPerRequest;
	// On Cloudflare the ledger Durable Object and D1 run on other machines; here they share the
	// gateway's one workerd thread. Taking the measured CPU of one authorize+settle pair (its
	// usage-record flush to D1 included) off the gateway's CPU per request estimates what the
	// Worker itself costs, and so its capacity against the floor's.
	const pair = r.ledger?.[16]?.cpuPerSettlementMs;
	const at16 = cpu.inflight16;
	// Only for the single layout: in the split one the ledger's work is in its own process already.
	const single = (r.meta?.layouts?.gateway ?? "single") === "single";
	if (single && pair !== undefined && at16) {
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
		pk(cpu.sequential.portkey, 3),
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
			pk(c.portkey, 3),
		);
	}
}

/** A stream's first byte over many streams: quiet, right after a long stream, right after a wave. */
function firstByteRows(r, row) {
	const fb = r.firstByte;
	if (!fb) return;
	const label = {
		quiet: "one at a time",
		afterLong: `after a ${fb.longChunks}-chunk stream`,
		afterWave: `after a wave of ${fb.waveConcurrent}`,
	};
	for (const situation of ["quiet", "afterLong", "afterWave"]) {
		const s = fb[situation];
		if (!s?.gateway) continue;
		row(
			`first byte p50 of ${fb.count}, ${label[situation]} (ms)`,
			f(s.direct.first.p50),
			f(s.floor?.first.p50),
			f(s.gateway.first.p50),
			signed(s.addedP50),
			"≤ +2 ms vs direct",
			verdict(s.addedP50 <= 2),
		);
	}
}

/** Paced streams at each concurrency, CPU per chunk, and bursts. */
function streamRows(r, row) {
	firstByteRows(r, row);
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
}

/**
 * Responses streams (gateway only), set beside the chat lane's gateway figures of the same run:
 * the widest paced level for TTFB, total and CPU per stream, and CPU per engine chunk.
 */
function responsesRows(r, row) {
	const rs = r.responsesStreams;
	if (!rs) return;
	const vsChat = (v, chat, d = 1) => (chat === undefined ? "" : `${signed(v - chat, d)} vs chat`);
	const p = rs.paced;
	const chatLevel = r.pacedStreams.levels[p.concurrent]?.gateway;
	const chatCpu = r.pacedStreams.levels[p.concurrent]?.cpuPerStream.gateway;
	row(
		`responses ×${p.concurrent} (${p.chunks}@${rs.paceMs}ms) TTFB p50 (ms)`,
		"",
		"",
		f(p.ttfb.p50),
		vsChat(p.ttfb.p50, chatLevel?.ttfb.p50, 2),
	);
	row(`responses ×${p.concurrent} total p50 (ms)`, "", "", f(p.total.p50, 0), vsChat(p.total.p50, chatLevel?.total.p50, 0));
	row(
		`responses ×${p.concurrent} workerd CPU/stream (ms)`,
		"",
		"",
		f(p.cpuPerLongStreamMs),
		vsChat(p.cpuPerLongStreamMs, chatCpu, 2),
	);
	const cc = r.cpuPerChunk;
	for (const kind of ["paced", "burst"]) {
		const x = rs[kind];
		row(
			`responses CPU/streamed chunk, ${kind}, marginal (µs)`,
			"",
			"",
			f(x.marginal, 1),
			vsChat(x.marginal, cc[kind]?.gateway.marginal),
		);
		row(
			`responses CPU/streamed chunk, ${kind}, all-in avg (µs)`,
			"",
			"",
			f(x.average, 1),
			vsChat(x.average, cc[kind]?.gateway.average),
		);
	}
	const b = rs.burst;
	row(
		`responses burst ×${b.concurrent} (${b.chunks} chunks) total p50 (ms)`,
		"",
		"",
		f(b.total.p50, 0),
		vsChat(b.total.p50, r.burstStreams.gateway?.total.p50, 0),
	);
}

/** The ledger on its own, and the usage-record integrity check. */
function ledgerRows(r, row) {
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
}

/**
 * The gateway targets side by side (the gateway, then each --variant, all from the same run,
 * taking turns): what issue 16's before/after and issue 13's routing A/B read.
 */
function gatewayTargetRows(r) {
	const names = (r.meta.targets ?? [{ name: "gateway", kind: "gateway" }]).filter((t) => t.kind === "gateway").map((t) => t.name);
	const rows = [];
	const row = (metric, get, d = 3) => {
		const cells = names.map((n) => {
			try {
				const v = get(n);
				return typeof v === "string" ? v : f(v, d);
			} catch {
				return "–";
			}
		});
		if (cells.some((c) => c !== "–")) rows.push([metric, ...cells]);
	};
	const s = r.sequential;
	const fr = r.fixedRate;
	row("latency sequential p50 − floor (ms)", (n) => signed(s[n].p50 - s.floor.p50, 3));
	row("latency sequential p99 − floor (ms)", (n) => signed(s[n].p99 - s.floor.p99, 3));
	row(`latency @${fr.rate} req/s p50 − floor (ms)`, (n) => signed(fr[n].p50 - fr.floor.p50, 3));
	row(`latency @${fr.rate} req/s p99 − floor (ms)`, (n) => signed(fr[n].p99 - fr.floor.p99, 2));
	if (s.portkey) row("added over direct p50, − Portkey's (ms)", (n) => signed(s[n].p50 - s.portkey.p50, 3));
	for (const [inflight, c] of Object.entries(r.capacity)) {
		row(`req/s @${inflight} in flight (% of floor)`, (n) => `${f(c[n].rps, 0)} (${f((100 * c[n].rps) / c.floor.rps, 0)}%)`);
	}
	const cpu = r.cpuPerRequest;
	row('layout (README "Layouts")', (n) => r.meta.layouts?.[n] ?? "single");
	row("workerd CPU/request, sequential (ms)", (n) => cpu.sequential[n]);
	for (const inflight of Object.keys(r.capacity))
		row(`workerd CPU/request @${inflight} in flight (ms)`, (n) => cpu[`inflight${inflight}`][n]);
	// The split layout's second workerd (Durable Objects, D1): on Cloudflare, not the Worker's CPU.
	row("  2nd workerd (DOs, D1) CPU/request, sequential (ms)", (n) => cpu.sequential[`${n}-ledger`]);
	for (const inflight of Object.keys(r.capacity))
		row(`  2nd workerd (DOs, D1) CPU/request @${inflight} (ms)`, (n) => cpu[`inflight${inflight}`][`${n}-ledger`]);
	const lc = r.ledgerCalls ?? {};
	const methods = (c) =>
		Object.entries(c.byMethod)
			.map(([m, v]) => `${m} ${f(v, 2)}`)
			.join(", ");
	for (const [phase, calls] of Object.entries(lc)) {
		row(
			`ledger calls/request, ${phase}`,
			(n) => `${f(calls[n].perRequest, 2)}${calls[n].perRequest ? ` (${methods(calls[n])})` : ""}`,
		);
	}
	for (const [level, l] of Object.entries(r.pacedStreams.levels)) {
		row(`stream ×${level} TTFB p50 − direct (ms)`, (n) => signed(l[n].ttfb.p50 - l.direct.ttfb.p50, 2));
		row(`stream ×${level} total p50 vs direct`, (n) => `${signed((l[n].total.p50 / l.direct.total.p50 - 1) * 100, 1)}%`);
		row(`stream ×${level} workerd CPU/stream (ms)`, (n) => l.cpuPerStream[n], 2);
	}
	const dist = r.ledgerAtDistance;
	if (dist) {
		const d = dist.delayMs;
		row(`ledger ${d} ms away: one ledger call (ms)`, (n) => dist.mechanism[n].msEach, 1);
		row(`ledger ${d} ms away: sequential p50 (ms)`, (n) => dist.sequential[n].p50, 2);
		row(`ledger ${d} ms away: sequential p50 − floor (ms)`, (n) => signed(dist.sequential[n].p50 - dist.sequential.floor.p50, 2));
		row(`ledger ${d} ms away: sequential p50 − own at 0 ms`, (n) => signed(dist.sequential[n].overSameTargetNoDelayP50, 2));
		row(`ledger ${d} ms away: sequential p99 (ms)`, (n) => dist.sequential[n].p99, 2);
		row(`ledger ${d} ms away: stream TTFB p50 (ms)`, (n) => dist.stream[n].ttfb.p50, 2);
		row(`ledger ${d} ms away: stream TTFB p50 − floor (ms)`, (n) =>
			signed(dist.stream[n].ttfb.p50 - dist.stream.floor.ttfb.p50, 2),
		);
		row(`ledger ${d} ms away: stream TTFB p99 (ms)`, (n) => dist.stream[n].ttfb.p99, 2);
		row(`ledger ${d} ms away: ledger calls/request, sequential`, (n) => dist.ledgerCallsSequential[n].perRequest, 2);
		row(`ledger ${d} ms away: ledger calls/request, stream`, (n) => dist.ledgerCallsStream[n].perRequest, 2);
	}
	const u = r.usageRecordsByTarget;
	if (u) row("usage records in D1 / requests", (n) => `${u[n].recordsInD1}/${u[n].gatewayRequests}`);
	return { head: ["gateway targets (same run, taking turns)", ...names], rows };
}

function printRows(head, rows) {
	const widths = head.map((h, i) => Math.max(h.length, ...rows.map((x) => String(x[i]).length)));
	const line = (cells) => cells.map((c, i) => (i === 0 ? String(c).padEnd(widths[i]) : String(c).padStart(widths[i]))).join("  ");
	console.log(`\n${line(head)}\n${widths.map((w) => "-".repeat(w)).join("  ")}`);
	for (const x of rows) console.log(line(x));
}

export function printTable(r) {
	const rows = [];
	const withPortkey = r.sequential.portkey !== undefined;
	const row = (metric, direct, floor, gateway, delta, target = "", met = "", portkey = "") =>
		rows.push(
			withPortkey
				? [metric, direct, floor, portkey ?? "", gateway, delta, target, met]
				: [metric, direct, floor, gateway, delta, target, met],
		);
	latencyRows(r, row);
	capacityRows(r, row);
	streamRows(r, row);
	responsesRows(r, row);
	ledgerRows(r, row);

	const head = withPortkey
		? ["metric", "direct", "floor", `portkey ${r.meta.portkey ?? ""}`.trim(), "gateway", "gateway vs floor", "target", "status"]
		: ["metric", "direct", "floor", "gateway", "gateway vs floor", "target", "status"];
	printRows(head, rows);
	if (withPortkey) {
		console.log(
			"(portkey: @portkey-ai/gateway's Node server on the same engine, non-stream only; its CPU column is its Node process, not workerd)",
		);
	}
	const against = minimalRows(r);
	if (against) printRows(against.head, against.rows);
	const gt = gatewayTargetRows(r);
	printRows(gt.head, gt.rows);
	console.log("\nhot-path pieces in isolation (probe worker inside the gateway's workerd, sequential):");
	for (const [name, c] of Object.entries(r.components)) {
		console.log(
			`  ${name.padEnd(18)} ${f(c.cpuMsEach * 1000, 0).padStart(5)} µs CPU, ${f(c.wallMsEach * 1000, 0).padStart(5)} µs wall each`,
		);
	}
	console.log(
		`\n${r.meta.host.cpus} CPUs (${r.meta.host.model}), node ${r.meta.host.node}, miniflare ${r.meta.miniflare}, workerd ${r.meta.workerd}; ` +
			`idle CPU ms/s: ${Object.entries(r.meta.idleCpuMsPerSecond)
				.map(([k, v]) => `${k} ${f(v)}`)
				.join(", ")}`,
	);
}
