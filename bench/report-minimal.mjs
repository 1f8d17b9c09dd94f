// The table against `minimal`: every gateway figure beside `minimal` (bench/workers/minimal.mjs: key
// lookup, body rewrite, CORS, request id, a log line, nothing else) and the floor, as ratios to both,
// with issue 39's targets (issue 27's, restated for the production layout) judged on the same run.
// The p99 at a fixed rate keeps issue 27's target.

const f = (v, d = 2) => (v === null || v === undefined || Number.isNaN(v) ? "–" : Number(v).toFixed(d));
const ratio = (a, b) => (a === undefined || b === undefined || !b ? "–" : `${f(a / b, 2)}×`);
const verdict = (ok) => (ok ? "met" : "NOT met");

/** Rows of [metric, floor, minimal, portkey, gateway, ÷ floor, ÷ minimal, target, status]. */
export function minimalRows(r) {
	if (r.sequential?.minimal === undefined) return null;
	const rows = [];
	const row = (metric, get, { d = 3, target = "", met } = {}) => {
		const v = (name) => {
			try {
				return get(name);
			} catch {
				return undefined;
			}
		};
		const g = v("gateway");
		rows.push([
			metric,
			f(v("floor"), d),
			f(v("minimal"), d),
			f(v("portkey"), d),
			f(g, d),
			ratio(g, v("floor")),
			ratio(g, v("minimal")),
			target,
			met === undefined ? "" : verdict(met),
		]);
	};
	const s = r.sequential;
	const pk = s.portkey?.p50;
	row("latency sequential p50 (ms)", (n) => s[n].p50, {
		target: "≤ minimal + 0.5 and < Portkey",
		met: s.gateway.p50 <= s.minimal.p50 + 0.5 && (pk === undefined || s.gateway.p50 < pk),
	});
	row("  gateway − minimal, p50 (ms)", (n) => (n === "gateway" ? s.gateway.p50 - s.minimal.p50 : undefined));
	row("latency sequential p99 (ms)", (n) => s[n].p99);
	const fr = r.fixedRate;
	row(`latency @${fr.rate} req/s p50 (ms)`, (n) => fr[n].p50);
	row(`latency @${fr.rate} req/s p99 (ms)`, (n) => fr[n].p99, {
		target: "≤ floor p99 + 5 ms (issue 27)",
		met: fr.gateway.p99 <= fr.floor.p99 + 5,
	});
	for (const [inflight, c] of Object.entries(r.capacity)) {
		const judged = Number(inflight) === 16;
		row(`req/s @${inflight} in flight`, (n) => c[n].rps, {
			d: 0,
			...(judged ? { target: "≥ 70% of minimal", met: c.gateway.rps >= 0.7 * c.minimal.rps } : {}),
		});
	}
	const cpu = r.cpuPerRequest;
	row("workerd CPU/request, sequential (ms)", (n) => cpu.sequential[n], {
		target: "≤ 2× minimal",
		met: cpu.sequential.gateway <= 2 * cpu.sequential.minimal,
	});
	for (const inflight of Object.keys(r.capacity)) {
		const c = cpu[`inflight${inflight}`];
		const judged = Number(inflight) === 16;
		row(`workerd CPU/request @${inflight} in flight (ms)`, (n) => c[n], {
			...(judged ? { target: "≤ 2× minimal", met: c.gateway <= 2 * c.minimal } : {}),
		});
	}
	// The production layout's second workerd (the gateway's Durable Objects and D1): not the Worker's CPU.
	if (cpu.sequential["gateway-ledger"] !== undefined) {
		row("  its Durable Objects' and D1's workerd, sequential (ms)", (n) =>
			n === "gateway" ? cpu.sequential["gateway-ledger"] : undefined,
		);
		for (const inflight of Object.keys(r.capacity))
			row(`  its Durable Objects' and D1's workerd @${inflight} (ms)`, (n) =>
				n === "gateway" ? cpu[`inflight${inflight}`]["gateway-ledger"] : undefined,
			);
	}
	const fb = r.firstByte;
	for (const situation of ["quiet", "afterLong", "afterWave"]) {
		const x = fb?.[situation];
		if (!x?.gateway) continue;
		row(`stream first byte p50 of ${fb.count}, ${situation} (ms)`, (n) => x[n].first.p50, {
			d: 2,
			target: `≤ direct (${f(x.direct.first.p50)}) + 3 ms`,
			met: x.gateway.first.p50 <= x.direct.first.p50 + 3,
		});
	}
	for (const [level, l] of Object.entries(r.pacedStreams.levels)) {
		row(`stream ×${level} TTFB p50 (ms)`, (n) => l[n].ttfb.p50, { d: 2 });
		row(`stream ×${level} workerd CPU/stream (ms)`, (n) => l.cpuPerStream[n], { d: 2 });
	}
	for (const kind of ["paced", "burst"]) {
		row(`CPU/streamed chunk, ${kind}, marginal (µs)`, (n) => r.cpuPerChunk[kind][n].marginal, { d: 1 });
	}
	return {
		head: [
			`gateway against minimal (issue 39, ${r.meta?.layouts?.gateway ?? "single"} layout)`,
			"floor",
			"minimal",
			"portkey",
			"gateway",
			"÷ floor",
			"÷ minimal",
			"target",
			"status",
		],
		rows,
	};
}
