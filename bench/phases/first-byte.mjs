// Phase: a stream's first byte, as a median over many streams, gateway against direct (and the
// floor) in the same run, so the box's load hits every target alike. Three situations:
//   quiet       one short paced stream at a time, targets interleaved;
//   after long  the same, each right after a long stream on the same key (its settlement, the
//               hold's renewals and the allowance refill are in flight when the next one starts);
//   after wave  the same, each right after a wave of `waveConcurrent` concurrent short streams.
// `first` is the first body byte as node:http sees it on the client's socket; `headers` is the
// response head, so `first − headers` shows a body that waits after its headers went out.
import { send } from "../lib/http.mjs";
import { streams, turnOrder } from "../lib/load.mjs";
import { summarize } from "../lib/stats.mjs";

const SITUATIONS = ["quiet", "afterLong", "afterWave"];

export async function firstBytePhase(ctx, results) {
	const { P } = ctx;
	const { count, longChunks, waveConcurrent } = P.firstByte;
	const targets = ctx.baseTargets.filter((t) => t.stream);
	const short = ctx.streamRequest(P.pacedShortChunks, true);
	const long = ctx.streamRequest(longChunks, true);
	ctx.log(
		`first byte: ${count} streams per target and situation (quiet, after a ${longChunks}-chunk stream, after a wave of ${waveConcurrent})`,
	);
	const samples = Object.fromEntries(
		SITUATIONS.map((s) => [s, Object.fromEntries(targets.map((t) => [t.name, { first: [], headers: [] }]))]),
	);
	const measure = async (situation, t) => {
		const { path, body } = short(t);
		const r = await send(t, path, body);
		ctx.count(t, 1);
		ctx.check(r.ok, `first byte ${situation} ${t.name}: status ${r.status} ${r.error ?? ""}`);
		if (!r.ok) return;
		samples[situation][t.name].first.push(r.first);
		samples[situation][t.name].headers.push(r.headers);
	};
	for (const situation of SITUATIONS) {
		await ctx.quiesce();
		for (let i = 0; i < count; i++) {
			for (const t of turnOrder(targets, i)) {
				if (situation === "afterLong") {
					const l = long(t);
					const r = await send(t, l.path, l.body);
					ctx.count(t, 1);
					ctx.check(r.ok, `first byte: long stream ${t.name}: status ${r.status}`);
				} else if (situation === "afterWave") {
					const wave = await streams(t, waveConcurrent, waveConcurrent, short);
					ctx.count(t, waveConcurrent);
					// A wave stream that failed left no usage record: say so here, not only as a count mismatch.
					const failed = wave.filter((r) => !r.ok);
					ctx.check(
						failed.length === 0,
						`first byte: wave ${t.name}: ${failed.length} of ${waveConcurrent} failed (${[...new Set(failed.map((r) => r.error ?? r.status))].join(", ")})`,
					);
				}
				await measure(situation, t);
			}
		}
	}
	results.firstByte = { count, longChunks, waveConcurrent, paceMs: P.paceMs, chunks: P.pacedShortChunks };
	for (const situation of SITUATIONS) {
		const per = {};
		for (const t of targets) {
			const s = samples[situation][t.name];
			per[t.name] = { first: summarize(s.first), headers: summarize(s.headers) };
		}
		per.addedP50 = (per.gateway?.first.p50 ?? Number.NaN) - (per.direct?.first.p50 ?? Number.NaN);
		results.firstByte[situation] = per;
		ctx.log(
			`  ${situation}: first byte p50 direct ${per.direct?.first.p50.toFixed(1)} ms, gateway ${per.gateway?.first.p50.toFixed(1)} ms (${per.addedP50 >= 0 ? "+" : ""}${per.addedP50.toFixed(1)}), gateway headers p50 ${per.gateway?.headers.p50.toFixed(1)} ms`,
		);
	}
}
