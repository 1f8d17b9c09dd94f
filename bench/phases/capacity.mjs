// Phase 3: capacity, a closed loop at fixed in-flight counts, with CPU per request under load
// and the gateway targets' ledger calls per request.
import { closedLoop } from "../lib/load.mjs";
import { summarize } from "../lib/stats.mjs";

export async function capacityPhase(ctx, results) {
	const { P, targets, check } = ctx;
	results.capacity = {};
	for (const inflight of P.loads) {
		ctx.log(`capacity: ${inflight} in flight, ${P.loadRounds} rounds × ${P.loadSliceMs} ms per target`);
		const acc = Object.fromEntries(targets.map((t) => [t.name, { done: 0, ms: 0, latency: [], errors: 0 }]));
		const { result: measured, calls } = await ctx.countLedgerCalls(
			() =>
				ctx.withCpu(async () => {
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
							ctx.count(t, r.done + r.errors);
						}
					}
				}),
			(t) => acc[t.name].done + acc[t.name].errors,
		);
		results.capacity[inflight] = {};
		for (const t of targets) {
			const a = acc[t.name];
			check(a.errors === 0, `capacity ${inflight} ${t.name}: ${a.errors} errors`);
			results.capacity[inflight][t.name] = { rps: (a.done * 1000) / a.ms, latency: summarize(a.latency), errors: a.errors };
		}
		const perRequest = {};
		for (const [name, d] of Object.entries(measured.cpu)) {
			// A split-layout gateway's second process ("<name>-ledger") is per request of its gateway.
			if (name !== "engine") perRequest[name] = d.stat / Math.max(1, acc[ctx.targetOfPid(name)].done);
		}
		results.cpuPerRequest[`inflight${inflight}`] = {
			...perRequest,
			engine: measured.cpu.engine.stat / Object.values(acc).reduce((n, a) => n + a.done, 0),
			drainMsAfterWindow: measured.drainMs,
		};
		results.ledgerCalls[`inflight${inflight}`] = calls;
	}
}
