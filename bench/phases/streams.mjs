// Phases 4 and 5: paced streams at each concurrency (time to first byte, total time, CPU per
// stream), then CPU per streamed chunk as the slope between long and short streams, paced and
// in bursts.
import { streams } from "../lib/load.mjs";
import { summarize } from "../lib/stats.mjs";
import { expectedFrames } from "./context.mjs";

const chunkSlope = (longPerStream, shortPerStream, longChunks, shortChunks) =>
	((longPerStream - shortPerStream) / (expectedFrames(longChunks) - expectedFrames(shortChunks))) * 1000;

/** 4. Paced streams: TTFB and total time at each concurrency, and the CPU they cost. */
async function pacedStreams(ctx, results) {
	const { P } = ctx;
	const targets = ctx.streamTargets;
	results.pacedStreams = { chunks: P.pacedChunks, paceMs: P.paceMs, levels: {} };
	const perStreamCpu = {};
	for (const level of P.pacedLevels) {
		ctx.log(
			`paced streams: ${level.count} × ${P.pacedChunks} chunks @ ${P.paceMs} ms, ${level.concurrent} concurrent, per target`,
		);
		const out = {};
		const measured = await ctx.withCpu(async () => {
			for (const t of targets) {
				await ctx.quiesce();
				const rs = await streams(t, level.concurrent, level.count, ctx.streamRequest(P.pacedChunks, true));
				ctx.count(t, rs.length);
				ctx.checkStreams(t.name, `paced c=${level.concurrent}`, rs, P.pacedChunks);
				out[t.name] = {
					ttfb: summarize(rs.map((r) => r.first)),
					headers: summarize(rs.map((r) => r.headers)),
					total: summarize(rs.map((r) => r.total)),
					frames: rs[0]?.frames,
					bytes: rs[0]?.bytes,
				};
			}
		});
		out.cpuPerStream = { floor: measured.cpu.floor.sched / level.count, minimal: measured.cpu.minimal.sched / level.count };
		for (const gw of ctx.gateways) out.cpuPerStream[gw.name] = measured.cpu[gw.name].sched / level.count;
		perStreamCpu[level.concurrent] = out.cpuPerStream;
		results.pacedStreams.levels[level.concurrent] = out;
	}
	return perStreamCpu;
}

/** 5a. The per-chunk slope at the widest paced level: the same streams, short. */
async function pacedChunkCost(ctx, results, perStreamCpu) {
	const { P, byName } = ctx;
	const widest = P.pacedLevels.at(-1);
	ctx.log(`paced short streams: ${widest.count} × ${P.pacedShortChunks} chunks (for the per-chunk slope)`);
	const short = await ctx.withCpu(async () => {
		for (const t of [byName.floor, byName.minimal, byName.gateway]) {
			await ctx.quiesce();
			const rs = await streams(t, widest.concurrent, widest.count, ctx.streamRequest(P.pacedShortChunks, true));
			ctx.count(t, rs.length);
			ctx.checkStreams(t.name, "paced short", rs, P.pacedShortChunks);
		}
	});
	results.cpuPerChunk = { unit: "µs", paced: {}, burst: {} };
	for (const name of ["floor", "minimal", "gateway"]) {
		const longPer = perStreamCpu[widest.concurrent][name];
		const shortPer = short.cpu[name].sched / widest.count;
		results.cpuPerChunk.paced[name] = {
			marginal: chunkSlope(longPer, shortPer, P.pacedChunks, P.pacedShortChunks),
			average: (longPer / expectedFrames(P.pacedChunks)) * 1000,
			cpuPerLongStreamMs: longPer,
			cpuPerShortStreamMs: shortPer,
		};
	}
}

/** 5b. Unpaced streams, long and short, per target: total time and the per-chunk slope. */
async function burstStreams(ctx, results) {
	const { P } = ctx;
	// Direct, floor, minimal and the main gateway only: the variants' stream cost is in the paced rows.
	const targets = ctx.baseTargets;
	const { concurrent: bc, chunks: bLong, shortChunks: bShort } = P.burst;
	ctx.log(`burst streams: ${bc} × ${bLong} chunks and ${bc} × ${bShort} chunks, unpaced, per target`);
	results.burstStreams = { chunks: bLong, concurrent: bc };
	const burstLong = {};
	const burstShort = {};
	for (const t of targets) {
		const long = await ctx.withCpu(() => streams(t, bc, bc, ctx.streamRequest(bLong, false)));
		const shortRun = await ctx.withCpu(() => streams(t, bc, bc, ctx.streamRequest(bShort, false)));
		ctx.count(t, 2 * bc);
		ctx.checkStreams(t.name, "burst", long.result, bLong);
		ctx.checkStreams(t.name, "burst short", shortRun.result, bShort);
		results.burstStreams[t.name] = {
			total: summarize(long.result.map((r) => r.total)),
			ttfb: summarize(long.result.map((r) => r.first)),
		};
		burstLong[t.name] = long.cpu;
		burstShort[t.name] = shortRun.cpu;
	}
	for (const name of ["floor", "minimal", "gateway"]) {
		const longPer = burstLong[name][name].sched / bc;
		const shortPer = burstShort[name][name].sched / bc;
		results.cpuPerChunk.burst[name] = {
			marginal: chunkSlope(longPer, shortPer, bLong, bShort),
			average: (longPer / expectedFrames(bLong)) * 1000,
			cpuPerLongStreamMs: longPer,
			cpuPerShortStreamMs: shortPer,
		};
	}
}

export async function streamPhases(ctx, results) {
	const perStreamCpu = await pacedStreams(ctx, results);
	await pacedChunkCost(ctx, results, perStreamCpu);
	await burstStreams(ctx, results);
}
