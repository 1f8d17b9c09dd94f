// Phase 6: the ledger Durable Object alone (authorize+settle pairs for one key), then the hot
// path's other pieces one at a time, inside the workerd that hosts the gateway's KeyLedger
// (bench/workers/probe.mjs): the gateway's own in the single layout, its second one in the split.
import { createHash } from "node:crypto";

export async function ledgerPhase(ctx, results) {
	const { P, rpc, check } = ctx;
	results.ledger = {};
	for (const inflight of P.ledgerInflight) {
		ctx.log(`ledger: authorize+settle for one key, ${inflight} in flight, ${P.ledgerMs} ms`);
		const keyId = `key_ledger_bench_${inflight}`;
		await rpc("probe", { path: "/credit", query: { key: keyId }, method: "POST" });
		let after;
		const measured = await ctx.withCpu(async () => {
			const run = await rpc("probe", { path: "/ledger", query: { key: keyId, ms: P.ledgerMs, inflight } });
			after = await rpc("probe", { path: "/info", query: { key: keyId } });
			return run;
		});
		const r = measured.result;
		check(r.settled > 0 && r.failed === 0, `ledger ${inflight} in flight: ${r.settled} settled, ${r.failed} failed`);
		results.ledger[inflight] = {
			settlementsPerSecond: r.perSecond,
			settled: r.settled,
			failed: r.failed,
			cpuPerSettlementMs: measured.cpu[ctx.statePid("gateway")].sched / Math.max(1, r.settled),
			outboxBacklogAtEnd: after.outboxSize,
			outboxDrainMs: measured.drainMs,
		};
	}
}

export async function componentsPhase(ctx, results) {
	const { P, rpc, key } = ctx;
	ctx.log(`components: ${P.componentOps} runs each of the hot path's pieces`);
	const hash = createHash("sha256").update(key.key).digest("hex");
	const componentKey = "key_probe_components";
	await rpc("probe", { path: "/credit", query: { key: componentKey }, method: "POST" });
	results.components = {};
	const prefix = `req_component_${Date.now().toString(36)}_`;
	for (const name of ["sha256", "cache-match", "d1-key-lookup", "ledger-info", "ledger-authorize", "ledger-settle"]) {
		const measured = await ctx.withCpu(() =>
			rpc("probe", { path: "/op", query: { name, n: P.componentOps, key: componentKey, hash, prefix } }),
		);
		results.components[name] = {
			cpuMsEach: measured.cpu[ctx.statePid("gateway")].sched / P.componentOps,
			wallMsEach: measured.result.elapsedMs / P.componentOps,
		};
	}
}
