// Phase 6b (--ledger-delay-ms N): the ledger at a distance. Every call from a gateway target's
// Worker to its KeyLedger waits N ms before it is sent (bench/workers/ledger-distance.mjs), as
// when the key's Durable Object is a round trip of N ms away from the edge location. Then, for
// the floor and each gateway target, interleaved: non-stream latency one request at a time, and
// the time to first byte of single paced streams. The earlier phases ran with no delay, so each
// gateway target's figures here are set against its own from the sequential phase.
import { sequential, streams, turnOrder } from "../lib/load.mjs";
import { summarize } from "../lib/stats.mjs";

export async function distancePhase(ctx, results) {
	const { P, check } = ctx;
	const delay = P.ledgerDelayMs;
	if (!(delay > 0)) return;
	const targets = [ctx.byName.floor, ...ctx.gateways];
	ctx.log(
		`ledger ${delay} ms away: ${P.distanceSequential} sequential requests and ${P.distanceStreams} single paced streams per target (${targets.map((t) => t.name).join(", ")})`,
	);
	const out = { delayMs: delay, mechanism: {}, sequential: {}, stream: { chunks: P.pacedShortChunks, paceMs: P.paceMs } };
	for (const gw of ctx.gateways) {
		await ctx.setLedgerDelay(gw, delay);
		// The mechanism: info() through the wrapped binding must now take at least the delay.
		const res = await fetch(`${gw.url}/__bench/ledger/rtt?n=3`);
		const rtt = await res.json();
		out.mechanism[gw.name] = rtt;
		check(rtt.msEach >= delay * 0.9, `${gw.name}: a ledger call took ${rtt.msEach} ms with the ledger ${delay} ms away`);
	}
	try {
		const seq = await ctx.countLedgerCalls(
			async () => {
				const r = await sequential(targets, P.distanceSequential, ctx.nonStream);
				// Settlement under waitUntil waits for the delay too: let it finish before counting.
				await ctx.settle();
				await ctx.quiesce();
				return r;
			},
			() => P.distanceSequential,
		);
		for (const t of targets) {
			const r = seq.result[t.name];
			ctx.count(t, P.distanceSequential);
			check(r.errors === 0, `ledger ${delay} ms away, sequential ${t.name}: ${r.errors} errors (${r.firstError})`);
			const s = summarize(r.latency);
			out.sequential[t.name] = { ...s, overSameTargetNoDelayP50: s.p50 - results.sequential[t.name].p50 };
		}
		out.ledgerCallsSequential = seq.calls;

		const request = ctx.streamRequest(P.pacedShortChunks, true);
		const acc = Object.fromEntries(targets.map((t) => [t.name, []]));
		const st = await ctx.countLedgerCalls(
			async () => {
				for (let i = 0; i < P.distanceStreams; i++) {
					for (const t of turnOrder(targets, i)) {
						const [r] = await streams(t, 1, 1, request);
						acc[t.name].push(r);
					}
				}
				await ctx.settle();
				await ctx.quiesce();
			},
			() => P.distanceStreams,
		);
		for (const t of targets) {
			ctx.count(t, P.distanceStreams);
			ctx.checkStreams(t.name, `ledger ${delay} ms away, stream`, acc[t.name], P.pacedShortChunks);
			out.stream[t.name] = {
				ttfb: summarize(acc[t.name].map((r) => r.first)),
				headers: summarize(acc[t.name].map((r) => r.headers)),
				total: summarize(acc[t.name].map((r) => r.total)),
			};
		}
		out.ledgerCallsStream = st.calls;
	} finally {
		for (const gw of ctx.gateways) await ctx.setLedgerDelay(gw, 0);
	}
	results.ledgerAtDistance = out;
}
