// What each way of carrying a stream through a Worker costs in workerd CPU per chunk, at
// 1, 8 and 128 concurrent streams of 200 chunks paced at 20 ms: the floor's native pipe,
// the floor reshaped through JS (see bench/workers/floor.mjs), and the gateway itself.
//
//   node bench/stream-shapes.mjs        (about 90 s; writes bench/.tmp/stream-shapes.json)
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { streams } from "./lib/load.mjs";
import { cpuDelta, cpuSample } from "./lib/proc.mjs";
import { ENGINE_MODEL, GW_PACED_MODEL, startRig } from "./lib/rig.mjs";
import { summarize } from "./lib/stats.mjs";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const CHUNKS = 200;
const FRAMES = CHUNKS + 3;
const LEVELS = [1, 8, 128];
const SHAPES = ["pipe", "transform", "identity", "js-pull", "parse", "gateway"];
const log = (...a) => console.log(`[shapes ${process.uptime().toFixed(1)}s]`, ...a);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const prompt = Array.from({ length: CHUNKS - 1 }, (_, i) => `w${i % 13}`).join(" ");
const request = (t) => () => ({
	path: t.name === "gateway" ? "/v1/chat/completions" : "/p/20/v1/chat/completions",
	body: JSON.stringify({
		model: t.name === "gateway" ? GW_PACED_MODEL : ENGINE_MODEL,
		messages: [{ role: "user", content: prompt }],
		max_tokens: CHUNKS + 16,
		stream: true,
		stream_options: { include_usage: true },
	}),
});

async function quiet(pids) {
	for (let i = 0; i < 100; i++) {
		const before = cpuSample(pids);
		await sleep(200);
		const d = cpuDelta(before, cpuSample(pids));
		if (d.floor.sched < 2 && d.gateway.sched < 2) return;
	}
}

const rig = await startRig({ paceMs: 20, maxSockets: 140, log });
try {
	const floor = rig.targets.find((t) => t.name === "floor");
	const gateway = rig.targets.find((t) => t.name === "gateway");
	const target = (shape) =>
		shape === "gateway" ? gateway : { ...floor, headers: shape === "pipe" ? {} : { "x-bench-shape": shape } };
	for (const shape of SHAPES) await streams(target(shape), 4, 4, request(target(shape)));
	const results = {};
	for (const level of LEVELS) {
		results[level] = {};
		for (const shape of SHAPES) {
			const t = target(shape);
			await quiet(rig.pids);
			const before = cpuSample(rig.pids);
			const rs = await streams(t, level, level, request(t));
			await sleep(400);
			const d = cpuDelta(before, cpuSample(rig.pids));
			const cpu = shape === "gateway" ? d.gateway.sched : d.floor.sched;
			const bad = rs.filter((r) => !r.ok || r.frames !== FRAMES).length;
			results[level][shape] = {
				usPerChunk: (cpu * 1000) / (level * FRAMES),
				ttfbP50: summarize(rs.map((r) => r.first)).p50,
				totalP50: summarize(rs.map((r) => r.total)).p50,
				bad,
			};
			log(`${level} × ${shape}: ${results[level][shape].usPerChunk.toFixed(1)} µs/chunk${bad ? ` (${bad} bad streams)` : ""}`);
		}
	}
	console.log(`\nworkerd CPU per streamed chunk (µs, all-in: the request's fixed cost is spread over ${FRAMES} frames)`);
	console.log(`${"shape".padEnd(10)}${LEVELS.map((l) => `${l} stream${l > 1 ? "s" : ""}`.padStart(14)).join("")}`);
	for (const shape of SHAPES) {
		console.log(`${shape.padEnd(10)}${LEVELS.map((l) => results[l][shape].usPerChunk.toFixed(1).padStart(14)).join("")}`);
	}
	const dir = path.join(ROOT, "bench", ".tmp");
	mkdirSync(dir, { recursive: true });
	writeFileSync(path.join(dir, "stream-shapes.json"), `${JSON.stringify(results, null, "\t")}\n`);
} finally {
	await rig.stop();
}
