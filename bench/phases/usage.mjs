// Phase 7: every request sent to each gateway target (the gateway and each variant: own D1)
// must have left exactly one usage record in its D1, and no hold may be left open.
import { setTimeout as sleep } from "node:timers/promises";

export async function usagePhase(ctx, results) {
	const { rpc, check } = ctx;
	ctx.log("waiting for the usage outbox to drain to D1");
	results.usageRecordsByTarget = {};
	for (const gw of ctx.gateways) {
		const keyId = ctx.keys[gw.name].id;
		const drainStart = Date.now();
		const ledgerInfo = () => rpc("probe", { instance: gw.instance, path: "/info", query: { key: keyId } });
		let ledgerState = await ledgerInfo();
		while (ledgerState.outboxSize > 0 && Date.now() - drainStart < 30_000) {
			await sleep(250);
			ledgerState = await ledgerInfo();
		}
		const { count } = await rpc("usageCount", { instance: gw.instance, keyId });
		const sent = ctx.requestsSentTo(gw.name);
		results.usageRecordsByTarget[gw.name] = {
			gatewayRequests: sent,
			recordsInD1: count,
			openHolds: ledgerState.openHolds,
			outbox: ledgerState.outboxSize,
			drainMs: Date.now() - drainStart,
		};
		check(count === sent, `${gw.name}: usage records in D1: ${count}, requests sent: ${sent}`);
		check(ledgerState.openHolds === 0, `${gw.name}: ${ledgerState.openHolds} holds still open after the run`);
		// The counting wrapper (bench/workers/ledger-distance.mjs) must sit on the binding the gateway uses.
		const { calls } = await ctx.ledgerCalls(gw);
		results.usageRecordsByTarget[gw.name].ledgerCallsInRun = calls;
		check(calls > 0, `${gw.name}: the bench's ledger wrapper saw no ledger call in the whole run`);
	}
	// The main gateway's, where reports and bench/compare.mjs have always read it.
	results.usageRecords = results.usageRecordsByTarget.gateway;
}
