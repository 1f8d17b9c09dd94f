// Phases 1 and 2: non-stream latency one request at a time (with CPU per request), and at a
// fixed rate in an open loop. Every target takes part: direct, floor, Portkey, the gateway and
// its variants.
import { fixedRate, sequential } from "../lib/load.mjs";
import { GW_MODEL } from "../lib/rig.mjs";
import { summarize } from "../lib/stats.mjs";

/** 1. Sequential latency and CPU per request, targets interleaved request by request. */
export async function sequentialPhase(ctx, results) {
	const { P, targets, check } = ctx;
	ctx.log(`sequential: ${P.sequential} requests per target, interleaved`);
	const { result: seq, calls } = await ctx.countLedgerCalls(
		() => ctx.withCpu(() => sequential(targets, P.sequential, ctx.nonStream)),
		() => P.sequential,
	);
	ctx.countAll(P.sequential);
	results.sequential = {};
	for (const t of targets) {
		const r = seq.result[t.name];
		check(r.errors === 0, `sequential ${t.name}: ${r.errors} errors (e.g. ${r.firstError ?? ""})`);
		results.sequential[t.name] = { ...summarize(r.latency), errors: r.errors };
	}
	for (const gw of ctx.gateways) {
		const sample = seq.result[gw.name].sample;
		let body = {};
		try {
			body = JSON.parse(sample?.text ?? "{}");
		} catch {}
		check(
			body.model === GW_MODEL,
			`${gw.name} answer names model ${body.model}, expected ${GW_MODEL} (${sample?.text?.slice(0, 300)})`,
		);
		check(typeof body.usage?.total_tokens === "number", `${gw.name} answer has no usage`);
		check(
			sample?.responseHeaders?.["x-venym-cost-usd"] !== undefined,
			`${gw.name} answer has no x-venym-cost-usd (not settled?)`,
		);
	}
	const pk = seq.result.portkey;
	if (pk) {
		let body = {};
		try {
			body = JSON.parse(pk.sample?.text ?? "{}");
		} catch {}
		check(
			pk.sample?.status === 200 && typeof body.choices?.[0]?.message?.content === "string",
			`portkey answer is not a chat completion: ${pk.sample?.status} ${pk.sample?.text?.slice(0, 200)}`,
		);
	}
	const perRequest = {};
	for (const [name, d] of Object.entries(seq.cpu)) {
		if (name === "engine") continue;
		perRequest[name] = d.stat / P.sequential;
		perRequest[`${name}Sched`] = d.sched / P.sequential;
	}
	results.cpuPerRequest = { sequential: { ...perRequest, engine: seq.cpu.engine.stat / (targets.length * P.sequential) } };
	results.ledgerCalls = { sequential: calls };
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
			ctx.count(t, r.sent);
		}
	}
	results.fixedRate = { rate: P.rate };
	for (const t of targets) {
		const { errors, errorKinds } = rate[t.name];
		check(errors === 0, `fixed rate ${t.name}: ${errors} errors (${JSON.stringify(errorKinds)})`);
		results.fixedRate[t.name] = { ...summarize(rate[t.name].latency), errors, errorKinds };
	}
}
