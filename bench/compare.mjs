// Before/after from saved runs (bench/run.mjs --out), as a Markdown table: each run's figure,
// the median of each side (robust to the one run a busy host spoils), and the change of the medians. The gateway's figures, with the floor's
// where the run has one (a host's drift moves both; compare the gap, not only the level).
//
//   node bench/compare.mjs before-1.json before-2.json -- after-1.json after-2.json
import { readFileSync } from "node:fs";

const args = process.argv.slice(2);
const cut = args.indexOf("--");
if (cut < 1 || cut === args.length - 1) {
	console.error("usage: node bench/compare.mjs <before.json …> -- <after.json …>");
	process.exit(2);
}
const load = (files) => files.map((f) => JSON.parse(readFileSync(f, "utf8")));
const before = load(args.slice(0, cut));
const after = load(args.slice(cut + 1));

const widest = (r) => Math.max(...Object.keys(r.pacedStreams.levels).map(Number));
/** [label, getter, decimals]; a getter returns undefined when a run lacks the figure. */
const METRICS = [
	["latency sequential p50, gateway (ms)", (r) => r.sequential.gateway.p50, 3],
	["latency sequential p50, gateway − floor (ms)", (r) => r.sequential.gateway.p50 - r.sequential.floor.p50, 3],
	["latency sequential p99, gateway (ms)", (r) => r.sequential.gateway.p99, 2],
	["latency @rate p50, gateway (ms)", (r) => r.fixedRate.gateway.p50, 2],
	["latency @rate p50, gateway − floor (ms)", (r) => r.fixedRate.gateway.p50 - r.fixedRate.floor.p50, 2],
	["latency @rate p99, gateway (ms)", (r) => r.fixedRate.gateway.p99, 1],
	[
		"latency sequential p50, portkey − direct (ms)",
		(r) => (r.sequential.portkey ? r.sequential.portkey.p50 - r.sequential.direct.p50 : undefined),
		3,
	],
	["latency sequential p50, gateway − direct (ms)", (r) => r.sequential.gateway.p50 - r.sequential.direct.p50, 3],
	["ledger calls/request sequential, gateway", (r) => r.ledgerCalls?.sequential?.gateway?.perRequest, 2],
	["ledger far: sequential p50, gateway (ms)", (r) => r.ledgerAtDistance?.sequential.gateway.p50, 2],
	["ledger far: stream TTFB p50, gateway (ms)", (r) => r.ledgerAtDistance?.stream.gateway.ttfb.p50, 2],
	["req/s @16 in flight, gateway", (r) => r.capacity[16]?.gateway.rps, 0],
	[
		"req/s @16 in flight, % of floor",
		(r) => (r.capacity[16] ? (100 * r.capacity[16].gateway.rps) / r.capacity[16].floor.rps : undefined),
		0,
	],
	["CPU/request sequential, gateway (ms)", (r) => r.cpuPerRequest.sequential.gateway, 3],
	["CPU/request sequential, floor (ms)", (r) => r.cpuPerRequest.sequential.floor, 3],
	["CPU/request sequential, gateway ÷ floor", (r) => r.cpuPerRequest.sequential.gateway / r.cpuPerRequest.sequential.floor, 2],
	["CPU/request @16, gateway (ms)", (r) => r.cpuPerRequest.inflight16?.gateway, 3],
	["CPU/request @64, gateway (ms)", (r) => r.cpuPerRequest.inflight64?.gateway, 3],
	["chat stream ×1 CPU/stream, gateway (ms)", (r) => r.pacedStreams.levels[1]?.cpuPerStream.gateway, 1],
	["chat stream ×1 CPU/stream, floor (ms)", (r) => r.pacedStreams.levels[1]?.cpuPerStream.floor, 1],
	["chat stream ×widest total p50, gateway (ms)", (r) => r.pacedStreams.levels[widest(r)].gateway.total.p50, 0],
	["chat CPU/chunk paced marginal, gateway (µs)", (r) => r.cpuPerChunk.paced.gateway.marginal, 1],
	["chat CPU/chunk paced marginal, floor (µs)", (r) => r.cpuPerChunk.paced.floor.marginal, 1],
	["chat CPU/chunk paced all-in, gateway (µs)", (r) => r.cpuPerChunk.paced.gateway.average, 1],
	["chat CPU/chunk burst marginal, gateway (µs)", (r) => r.cpuPerChunk.burst.gateway.marginal, 1],
	["chat CPU/chunk burst marginal, floor (µs)", (r) => r.cpuPerChunk.burst.floor.marginal, 1],
	["chat CPU/chunk burst all-in, gateway (µs)", (r) => r.cpuPerChunk.burst.gateway.average, 1],
	["chat burst total p50, gateway (ms)", (r) => r.burstStreams.gateway.total.p50, 0],
	["responses paced CPU/stream (ms)", (r) => r.responsesStreams?.paced.cpuPerLongStreamMs, 2],
	["responses paced total p50 (ms)", (r) => r.responsesStreams?.paced.total.p50, 0],
	["responses CPU/chunk paced marginal (µs)", (r) => r.responsesStreams?.paced.marginal, 1],
	["responses CPU/chunk paced all-in (µs)", (r) => r.responsesStreams?.paced.average, 1],
	["responses CPU/chunk burst marginal (µs)", (r) => r.responsesStreams?.burst.marginal, 1],
	["responses CPU/chunk burst all-in (µs)", (r) => r.responsesStreams?.burst.average, 1],
	[
		"responses ÷ chat, CPU/chunk paced marginal",
		(r) => r.responsesStreams?.paced.marginal / r.cpuPerChunk.paced.gateway.marginal,
		2,
	],
	[
		"responses ÷ chat, CPU/chunk burst marginal",
		(r) => r.responsesStreams?.burst.marginal / r.cpuPerChunk.burst.gateway.marginal,
		2,
	],
	["responses burst total p50 (ms)", (r) => r.responsesStreams?.burst.total.p50, 0],
];

function median(xs) {
	if (!xs.length) return undefined;
	const s = [...xs].sort((a, b) => a - b);
	const mid = s.length >> 1;
	return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}
const fmt = (v, d) => (v === undefined || Number.isNaN(v) ? "–" : v.toFixed(d));
const values = (runs, get) =>
	runs.map((r) => {
		try {
			const v = get(r);
			return typeof v === "number" && Number.isFinite(v) ? v : undefined;
		} catch {
			return undefined;
		}
	});

const head = [
	"metric",
	...before.map((_, i) => `before ${i + 1}`),
	...after.map((_, i) => `after ${i + 1}`),
	"before median",
	"after median",
	"change",
];
console.log(`| ${head.join(" | ")} |`);
console.log(`| ${head.map((_, i) => (i === 0 ? "---" : "---:")).join(" | ")} |`);
for (const [label, get, d] of METRICS) {
	const b = values(before, get);
	const a = values(after, get);
	const bm = median(b.filter((v) => v !== undefined));
	const am = median(a.filter((v) => v !== undefined));
	const change = bm && am !== undefined ? `${am >= bm ? "+" : ""}${(((am - bm) / Math.abs(bm)) * 100).toFixed(0)}%` : "–";
	console.log(
		`| ${[label, ...b.map((v) => fmt(v, d)), ...a.map((v) => fmt(v, d)), fmt(bm, d), fmt(am, d), change].join(" | ")} |`,
	);
}
