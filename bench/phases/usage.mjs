// Phase 7: every gateway request of the run must have left exactly one usage record in D1,
// and no hold may be left open.
import { setTimeout as sleep } from "node:timers/promises";

export async function usagePhase(ctx, results) {
	const { rpc, key, check } = ctx;
	ctx.log("waiting for the usage outbox to drain to D1");
	const drainStart = Date.now();
	const ledgerInfo = () => rpc("probe", { path: "/info", query: { key: key.id } });
	let ledgerState = await ledgerInfo();
	while (ledgerState.outboxSize > 0 && Date.now() - drainStart < 30_000) {
		await sleep(250);
		ledgerState = await ledgerInfo();
	}
	const { count } = await rpc("usageCount", { keyId: key.id });
	results.usageRecords = {
		gatewayRequests: ctx.gatewayRequests,
		recordsInD1: count,
		openHolds: ledgerState.openHolds,
		outbox: ledgerState.outboxSize,
		drainMs: Date.now() - drainStart,
	};
	check(count === ctx.gatewayRequests, `usage records in D1: ${count}, gateway requests sent: ${ctx.gatewayRequests}`);
	check(ledgerState.openHolds === 0, `${ledgerState.openHolds} holds still open after the run`);
}
