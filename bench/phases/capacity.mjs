// Phase 3: capacity, a closed loop at fixed in-flight counts, with CPU per request under load.
import { closedLoop } from "../lib/load.mjs";
import { summarize } from "../lib/stats.mjs";

export async function capacityPhase(ctx, results) {
	const { P, targets, check } = ctx;
	results.capacity = {};
	for (const inflight of P.loads) {
		ctx.log(`capacity: ${inflight} in flight, ${P.loadRounds} rounds × ${P.loadSliceMs} ms per target`);
		const acc = Object.fromEntries(targets.map((t) => [t.name, { done: 0, ms: 0, latency: [], errors: 0 }]));
		const measured = await ctx.withCpu(async () => {
			for (let round = 0; round < P.loadRounds; round++) {
				for (let j = 0; j < targets.length; j++) {
					const t = targets[(round + j) % targets.length];
					await ctx.quiesce();
					const r = await closedLoop(t, inflight, P.loadSliceMs, ctx.nonStream);
					const a = acc[t.name];
					a.done += r.done;
					a.ms += r.elapsedMs;
					a.latency.push(...r.latency);
					a.errors += r.errors;
					if (t.name === "gateway") ctx.countGateway(r.done + r.errors);
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
}
