// Phase 5, its Responses part: streaming through the gateway only (the floor and the engine speak chat, not
// Responses). `POST /v1/responses` streams, long and short, paced (the widest paced level) and
// unpaced (the burst sizes): CPU per streamed engine chunk as the slope between them, and the
// all-in figure, set beside the chat lane's of the same run. Every stream is checked event by
// event: response.created first, one output_text.delta per content chunk, response.completed last.
import { streams } from "../lib/load.mjs";
import { GW_MODEL, GW_PACED_MODEL } from "../lib/rig.mjs";
import { summarize } from "../lib/stats.mjs";
import { expectedFrames, promptFor } from "./context.mjs";

/**
 * Events of a completed text stream: created, in_progress, output_item.added,
 * content_part.added, one delta per content chunk, output_text.done, content_part.done,
 * output_item.done, completed.
 */
export const expectedEvents = (chunks) => chunks + 8;

function responsesBody(chunks, paced) {
	return JSON.stringify({
		model: paced ? GW_PACED_MODEL : GW_MODEL,
		input: promptFor(chunks),
		stream: true,
		// Above the echo's length, so the stream completes instead of ending incomplete.
		max_output_tokens: chunks + 16,
	});
}

const bodies = new Map();
function responsesRequest(chunks, paced) {
	const key = `${chunks}:${paced}`;
	if (!bodies.has(key)) bodies.set(key, responsesBody(chunks, paced));
	return () => ({ path: "/v1/responses", body: bodies.get(key), keepText: true });
}

/** Why one Responses stream is not a complete text stream of `chunks` deltas, or null. */
function streamProblem(r, chunks) {
	if (!r.ok) return `status ${r.status} ${r.error ?? ""}`;
	const frames = r.text.split("\n\n").filter((f) => f.trim() !== "");
	const events = frames.map((f) => /^event: (.*)$/m.exec(f)?.[1]);
	const deltas = events.filter((e) => e === "response.output_text.delta").length;
	if (events[0] !== "response.created") return `first event ${events[0]}`;
	if (events.at(-1) !== "response.completed") return `last event ${events.at(-1)}`;
	if (deltas !== chunks) return `${deltas} text deltas, expected ${chunks}`;
	if (frames.length !== expectedEvents(chunks)) return `${frames.length} events, expected ${expectedEvents(chunks)}`;
	const data = /^data: (.*)$/m.exec(frames.at(-1))?.[1];
	const status = data ? JSON.parse(data).response?.status : undefined;
	if (status !== "completed") return `final response status ${status}`;
	return null;
}

function checkResponses(ctx, label, results, chunks) {
	const bad = results.map((r) => streamProblem(r, chunks)).filter(Boolean);
	ctx.check(bad.length === 0, `responses ${label}: ${bad.length}/${results.length} streams incomplete (e.g. ${bad[0]})`);
}

/** Long and short streams at one shape, each in its own CPU window. */
async function slope(ctx, { concurrent, longChunks, shortChunks, paced }) {
	const gw = ctx.byName.gateway;
	const long = await ctx.withCpu(() => streams(gw, concurrent, concurrent, responsesRequest(longChunks, paced)));
	const short = await ctx.withCpu(() => streams(gw, concurrent, concurrent, responsesRequest(shortChunks, paced)));
	ctx.countGateway(2 * concurrent);
	const label = paced ? "paced" : "burst";
	checkResponses(ctx, label, long.result, longChunks);
	checkResponses(ctx, `${label} short`, short.result, shortChunks);
	const longPer = long.cpu.gateway.sched / concurrent;
	const shortPer = short.cpu.gateway.sched / concurrent;
	return {
		concurrent,
		chunks: longChunks,
		shortChunks,
		events: long.result[0]?.frames,
		bytes: long.result[0]?.bytes,
		ttfb: summarize(long.result.map((r) => r.first)),
		total: summarize(long.result.map((r) => r.total)),
		cpuPerLongStreamMs: longPer,
		cpuPerShortStreamMs: shortPer,
		// Per engine chunk, like the chat rows: the slope per content chunk, and the long
		// stream's CPU over the frames the engine sent (content, finish, usage, [DONE]).
		marginal: ((longPer - shortPer) / (longChunks - shortChunks)) * 1000,
		average: (longPer / expectedFrames(longChunks)) * 1000,
	};
}

export async function responsesPhase(ctx, results) {
	const { P } = ctx;
	const widest = P.pacedLevels.at(-1);
	const { concurrent: bc, chunks: bLong, shortChunks: bShort } = P.burst;
	ctx.log("responses streams: warm-up");
	const gw = ctx.byName.gateway;
	const warm = [
		...(await streams(gw, 4, 4, responsesRequest(P.pacedShortChunks, true))),
		...(await streams(gw, 2, 2, responsesRequest(bShort, false))),
	];
	ctx.countGateway(6);
	ctx.check(
		warm.every((r) => r.ok),
		`responses warm-up: ${warm.filter((r) => !r.ok).length} of 6 failed`,
	);
	await ctx.settle();
	results.responsesStreams = { unit: "µs", paceMs: P.paceMs };
	ctx.log(
		`responses streams, paced: ${widest.concurrent} × ${P.pacedChunks} and × ${P.pacedShortChunks} chunks @ ${P.paceMs} ms`,
	);
	results.responsesStreams.paced = await slope(ctx, {
		concurrent: widest.concurrent,
		longChunks: P.pacedChunks,
		shortChunks: P.pacedShortChunks,
		paced: true,
	});
	ctx.log(`responses streams, burst: ${bc} × ${bLong} and × ${bShort} chunks, unpaced`);
	results.responsesStreams.burst = await slope(ctx, { concurrent: bc, longChunks: bLong, shortChunks: bShort, paced: false });
}
