// Where the gateway's CPU goes: runs one load against the gateway (same rig as
// bench/run.mjs, plus workerd's DevTools inspector), records a V8 CPU profile of the
// gateway isolate (worker and its Durable Objects), maps it through the bundle's source
// map to src/ and node_modules/, and prints self and inclusive time.
//
//   node bench/profile.mjs [--mode nonstream|sequential|paced|burst|all] [--seconds 5]
//
// Profiles are written to bench/.tmp/<mode>.cpuprofile (open them in Chrome DevTools).
// The inspector slows workerd down a little: use bench/run.mjs for the numbers.
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { SourceMap } from "node:module";
import net from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { closedLoop, sequential, streams } from "./lib/load.mjs";
import { cpuDelta, cpuSample } from "./lib/proc.mjs";
import { GW_MODEL, GW_PACED_MODEL, startRig } from "./lib/rig.mjs";

// Node 20 has WebSocket only behind a flag: re-run this script with it.
if (typeof globalThis.WebSocket === "undefined") {
	const r = spawnSync(process.execPath, ["--experimental-websocket", "--no-warnings", ...process.argv.slice(1)], {
		stdio: "inherit",
	});
	process.exit(r.status ?? 1);
}

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const OUT_DIR = path.join(ROOT, "bench", ".tmp");
const { values: argv } = parseArgs({
	options: { mode: { type: "string", default: "all" }, seconds: { type: "string", default: "5" } },
});
const SECONDS = Number(argv.seconds);
const MODES = argv.mode === "all" ? ["nonstream", "paced", "burst"] : [argv.mode];
const log = (...a) => console.log(`[profile ${process.uptime().toFixed(1)}s]`, ...a);
let report = [];
const out = (line) => {
	console.log(line);
	report.push(line);
};

function freePort() {
	return new Promise((resolve) => {
		const srv = net.createServer();
		srv.listen(0, "127.0.0.1", () => {
			const { port } = srv.address();
			srv.close(() => resolve(port));
		});
	});
}

function devtools(wsUrl) {
	const ws = new WebSocket(wsUrl);
	let nextId = 1;
	const pending = new Map();
	ws.addEventListener("message", (ev) => {
		const msg = JSON.parse(String(ev.data));
		const p = msg.id && pending.get(msg.id);
		if (!p) return;
		pending.delete(msg.id);
		if (msg.error) p.reject(new Error(`${msg.error.message}`));
		else p.resolve(msg.result);
	});
	const opened = new Promise((resolve, reject) => {
		ws.addEventListener("open", resolve, { once: true });
		ws.addEventListener("error", reject, { once: true });
	});
	return {
		opened,
		send: (method, params = {}) =>
			new Promise((resolve, reject) => {
				const id = nextId++;
				pending.set(id, { resolve, reject });
				ws.send(JSON.stringify({ id, method, params }));
			}),
		close: () => ws.close(),
	};
}

const promptFor = (chunks) => Array.from({ length: chunks - 1 }, (_, i) => `w${i % 13}`).join(" ");
const nonStream = () => ({
	path: "/v1/chat/completions",
	body: JSON.stringify({ model: GW_MODEL, messages: [{ role: "user", content: "hello from the bench" }], max_tokens: 16 }),
});
const stream = (chunks, paced) => () => ({
	path: "/v1/chat/completions",
	body: JSON.stringify({
		model: paced ? GW_PACED_MODEL : GW_MODEL,
		messages: [{ role: "user", content: promptFor(chunks) }],
		max_tokens: chunks + 16,
		stream: true,
	}),
});

const WORKLOADS = {
	nonstream: {
		describe: `non-stream requests, 16 in flight, ${SECONDS} s`,
		run: (gw) => closedLoop(gw, 16, SECONDS * 1000, nonStream),
	},
	sequential: {
		describe: "non-stream requests one at a time (the sequential phase's shape), 2000",
		run: (gw) => sequential([gw], 2000, nonStream),
	},
	paced: {
		describe: "128 concurrent streams of 200 chunks paced at 20 ms",
		run: (gw) => streams(gw, 128, 128, stream(200, true)),
	},
	burst: {
		describe: "16 concurrent streams of 1000 unpaced chunks, twice",
		run: (gw) => streams(gw, 16, 32, stream(1000, false)),
	},
};

/** Self and inclusive time per source function and per module, from a V8 CPU profile. */
function summarize(profile, sourceMap) {
	const byId = new Map(profile.nodes.map((n) => [n.id, n]));
	const parent = new Map();
	for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
	const where = new Map();
	const locate = (node) => {
		if (where.has(node.id)) return where.get(node.id);
		const cf = node.callFrame;
		let file = cf.url ? path.basename(cf.url) : "";
		let fn = cf.functionName || "(anonymous)";
		if (cf.functionName.startsWith("(")) file = "";
		else if (sourceMap && cf.url.endsWith("index.js")) {
			const e = sourceMap.findEntry(cf.lineNumber, cf.columnNumber);
			if (e?.originalSource) {
				file = e.originalSource.replace(/^.*?(node_modules\/|src\/)/, "$1").replace(/^\.\.\//, "");
				fn = `${fn} (${file}:${e.originalLine + 1})`;
			}
		} else if (cf.url) fn = `${fn} (${file}:${cf.lineNumber + 1})`;
		const module = file.startsWith("node_modules/")
			? file
					.split("/")
					.slice(0, file.split("/")[1]?.startsWith("@") ? 3 : 2)
					.join("/")
			: file || cf.functionName || "(native)";
		const loc = { fn, module };
		where.set(node.id, loc);
		return loc;
	};
	const self = new Map();
	const selfModule = new Map();
	const inclusive = new Map();
	const inclusiveFile = new Map();
	let total = 0;
	const add = (map, k, v) => map.set(k, (map.get(k) ?? 0) + v);
	for (let i = 0; i < profile.samples.length; i++) {
		const dt = profile.timeDeltas[i + 1] ?? 0;
		const node = byId.get(profile.samples[i]);
		if (!node) continue;
		total += dt;
		const loc = locate(node);
		add(self, loc.fn, dt);
		add(selfModule, loc.module, dt);
		const seen = new Set();
		const files = new Set();
		for (let id = node.id; id !== undefined; id = parent.get(id)) {
			const l = locate(byId.get(id));
			if (l.module.startsWith("src/") && !files.has(l.module)) {
				files.add(l.module);
				add(inclusiveFile, l.module, dt);
			}
			if (seen.has(l.fn)) continue;
			seen.add(l.fn);
			add(inclusive, l.fn, dt);
		}
	}
	const top = (map, n) =>
		[...map.entries()]
			.sort((a, b) => b[1] - a[1])
			.slice(0, n)
			.map(([k, v]) => ({ name: k, ms: v / 1000, pct: (100 * v) / total }));
	return {
		totalMs: total / 1000,
		self: top(self, 30),
		modules: top(selfModule, 20),
		inclusive: top(inclusive, 80),
		files: top(inclusiveFile, 30),
	};
}

async function main() {
	const inspectorPort = await freePort();
	const rig = await startRig({ paceMs: 20, maxSockets: 140, inspectorPort, log });
	try {
		const gw = rig.targets.find((t) => t.name === "gateway");
		const sourceMap = new SourceMap(JSON.parse(readFileSync(path.join(rig.bundleDir, "index.js.map"), "utf8")));
		log("warm-up");
		await sequential([gw], 300, nonStream);
		await streams(gw, 8, 8, stream(20, true));
		await streams(gw, 4, 4, stream(200, false));
		const list = await (await fetch(`http://127.0.0.1:${inspectorPort}/json/list`)).json();
		const target = list.find((t) => /gateway/.test(`${t.id} ${t.title}`));
		if (!target) throw new Error(`no gateway inspector target in ${JSON.stringify(list.map((t) => t.id))}`);
		const dt = devtools(target.webSocketDebuggerUrl);
		await dt.opened;
		await dt.send("Profiler.enable");
		await dt.send("Profiler.setSamplingInterval", { interval: 100 });
		mkdirSync(OUT_DIR, { recursive: true });
		for (const mode of MODES) {
			const w = WORKLOADS[mode];
			log(`${mode}: ${w.describe}`);
			const before = cpuSample({ gateway: rig.pids.gateway });
			await dt.send("Profiler.start");
			const result = await w.run(gw);
			await new Promise((r) => setTimeout(r, 600));
			const { profile } = await dt.send("Profiler.stop");
			const cpu = cpuDelta(before, cpuSample({ gateway: rig.pids.gateway })).gateway.sched;
			const file = path.join(OUT_DIR, `${mode}.cpuprofile`);
			writeFileSync(file, JSON.stringify(profile));
			const s = summarize(profile, sourceMap);
			const count = Array.isArray(result) ? result.length : result.done;
			report = [];
			const idle = s.self.find((x) => x.name === "(idle)")?.ms ?? 0;
			out(
				`\n== ${mode}: ${count} requests; workerd CPU (/proc) ${cpu.toFixed(0)} ms = ${(cpu / count).toFixed(3)} ms per request. ` +
					`Profile: ${path.relative(ROOT, file)}, ${s.totalMs.toFixed(0)} ms sampled, ${(s.totalMs - idle).toFixed(0)} ms not idle.`,
			);
			out(
				"   Samples are wall-clock (they include time the thread was descheduled on this 2-core box, and the profiler's own cost): read shares, and scale them by the /proc CPU.",
			);
			const print = (title, rows) => {
				out(`\n   ${title}`);
				for (const r of rows) out(`   ${r.ms.toFixed(1).padStart(9)} ms ${r.pct.toFixed(1).padStart(5)}%  ${r.name}`);
			};
			print("inclusive time by src/ file (per request: divide by the request count)", s.files);
			print("self time by module", s.modules);
			print("self time by function", s.self);
			print(
				"inclusive time (src/ and hono/zod/drizzle frames)",
				s.inclusive.filter((r) => /src\/|node_modules|\(garbage/.test(r.name)).slice(0, 40),
			);
			writeFileSync(path.join(OUT_DIR, `${mode}.txt`), `${report.join("\n")}\n`);
		}
		dt.close();
	} finally {
		await rig.stop();
	}
}

main().catch((err) => {
	console.error(err);
	process.exit(1);
});
