// Phases 1 and 2: non-stream latency one request at a time (with CPU per request), and at a
// fixed rate in an open loop.
import { fixedRate, sequential } from "../lib/load.mjs";
import { GW_MODEL } from "../lib/rig.mjs";
import { summarize } from "../lib/stats.mjs";

/** 1. Sequential latency and CPU per request, targets interleaved request by request. */
export async function sequentialPhase(ctx, results) {
	const { P, targets, check } = ctx;
	ctx.log(`sequential: ${P.sequential} requests per target, interleaved`);
	const seq = await ctx.withCpu(() => sequential(targets, P.sequential, ctx.nonStream));
	ctx.countGateway(P.sequential);
	results.sequential = {};
	for (const t of targets) {
		const r = seq.result[t.name];
		check(r.errors === 0, `sequential ${t.name}: ${r.errors} errors`);
		results.sequential[t.name] = { ...summarize(r.latency), errors: r.errors };
	}
	const gwSample = seq.result.gateway.sample;
	let gwBody = {};
	try {
		gwBody = JSON.parse(gwSample?.text ?? "{}");
	} catch {}
	check(gwBody.model === GW_MODEL, `gateway answer names model ${gwBody.model}, expected ${GW_MODEL}`);
	check(typeof gwBody.usage?.total_tokens === "number", "gateway answer has no usage");
	check(gwSample?.responseHeaders?.["x-venym-cost-usd"] !== undefined, "gateway answer has no x-venym-cost-usd (not settled?)");
	results.cpuPerRequest = {
		sequential: {
			floor: seq.cpu.floor.stat / P.sequential,
			gateway: seq.cpu.gateway.stat / P.sequential,
			floorSched: seq.cpu.floor.sched / P.sequential,
			gatewaySched: seq.cpu.gateway.sched / P.sequential,
			engine: seq.cpu.engine.stat / (3 * P.sequential),
		},
	};
}

/** 2. Latency at a fixed rate (open loop), slices rotated between targets. */
export async function fixedRatePhase(ctx, results) {
	const { P, targets, check } = ctx;
	ctx.log(`fixed rate: ${P.rate} req/s, ${P.rateRounds} rounds × ${P.rateSliceMs} ms per target`);
	const rate = Object.fromEntries(targets.map((t) => [t.name, { latency: [], errors: 0, errorKinds: {}, sent: 0 }]));
	for (let round = 0; round < P.rateRounds; round++) {
		for (let j = 0; j < targets.length; j++) {
			const t = targets[(round + j) % targets.length];
			await ctx.quiesce();
			const r = await fixedRate(t, P.rate, P.rateSliceMs, ctx.nonStream);
			rate[t.name].latency.push(...r.latency);
			rate[t.name].errors += r.errors;
			for (const [why, n] of Object.entries(r.errorKinds)) rate[t.name].errorKinds[why] = (rate[t.name].errorKinds[why] ?? 0) + n;
			rate[t.name].sent += r.sent;
			if (t.name === "gateway") ctx.countGateway(r.sent);
		}
	}
	results.fixedRate = { rate: P.rate };
	for (const t of targets) {
		const { errors, errorKinds } = rate[t.name];
		check(errors === 0, `fixed rate ${t.name}: ${errors} errors (${JSON.stringify(errorKinds)})`);
		results.fixedRate[t.name] = { ...summarize(rate[t.name].latency), errors, errorKinds };
	}
}
