// Before any window: the idle CPU of each process, then a warm-up (JIT, connection pools, the
// key's Durable Object, the first D1 reads) whose requests are counted but not measured.
import { sequential, streams } from "../lib/load.mjs";

export async function warmUp(ctx) {
	const { P, targets } = ctx;
	await ctx.measureIdle(ctx.smoke ? 300 : 1500);
	ctx.log("warm-up");
	await sequential(targets, P.warmup, ctx.nonStream);
	ctx.countGateway(P.warmup);
	for (const t of targets) {
		await streams(t, 4, 4, ctx.streamRequest(P.pacedShortChunks, true));
		await streams(t, 2, 2, ctx.streamRequest(P.burst.shortChunks, false));
	}
	ctx.countGateway(6);
	await ctx.settle();
}
