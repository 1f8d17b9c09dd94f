// Before any window: the idle CPU of each process, then a warm-up (JIT, connection pools, the
// key's Durable Object, the first D1 reads) whose requests are counted but not measured.
import { sequential, streams } from "../lib/load.mjs";

export async function warmUp(ctx) {
	const { P, targets } = ctx;
	await ctx.measureIdle(ctx.smoke ? 300 : 1500);
	ctx.log("warm-up");
	const warm = await sequential(targets, P.warmup, ctx.nonStream);
	// A gateway variant whose GATEWAY_CONFIG the bundle rejects fails every request: say so now.
	for (const t of targets) {
		const w = warm[t.name];
		if (w.errors === P.warmup) {
			throw new Error(`warm-up: every request to ${t.name} failed (${w.firstError}): ${w.sample?.text?.slice(0, 400) ?? ""}`);
		}
	}
	ctx.countAll(P.warmup);
	for (const t of ctx.streamTargets) {
		await streams(t, 4, 4, ctx.streamRequest(P.pacedShortChunks, true));
		await streams(t, 2, 2, ctx.streamRequest(P.burst.shortChunks, false));
		ctx.count(t, 6);
	}
	await ctx.settle();
}
