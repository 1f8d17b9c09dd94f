// Where the p99 at a fixed rate comes from (issue 27): the floor, minimal, the gateway and
// variants of it take turns at `--rate` req/s (default 100) for `--rounds` × `--seconds`, and the
// p50/p99/p99.9 of each are printed. Variants are `--variant` presets or name=<json> patches of
// GATEWAY_CONFIG (bench/lib/rig.mjs), e.g. `gateway-sync` (no edge allowances).
//
//   node bench/tail.mjs [--rate 100] [--rounds 4] [--seconds 5] [--variant gateway-sync] [--bundle name=dir] …
import { parseArgs } from "node:util";
import { fixedRate, sequential } from "./lib/load.mjs";
import { ENGINE_MODEL, GW_MODEL, killChildren, parseVariant, startRig } from "./lib/rig.mjs";
import { summarize } from "./lib/stats.mjs";

const { values: argv } = parseArgs({
	options: {
		rate: { type: "string", default: "100" },
		rounds: { type: "string", default: "4" },
		seconds: { type: "string", default: "5" },
		variant: { type: "string", multiple: true, default: [] },
		// Another build as a gateway target: name=<bundle dir> (wrangler deploy --dry-run --outdir).
		bundle: { type: "string", multiple: true, default: [] },
	},
});
const RATE = Number(argv.rate);
const ROUNDS = Number(argv.rounds);
const MS = Number(argv.seconds) * 1000;
const variants = [
	...argv.variant.map(parseVariant),
	...argv.bundle.map((b) => ({ name: b.slice(0, b.indexOf("=")), bundleDir: b.slice(b.indexOf("=") + 1) })),
];

const gatewayModels = (t) => t.kind === "gateway" || t.kind === "minimal";
const request = (t) => ({
	path: "/v1/chat/completions",
	body: JSON.stringify({
		model: gatewayModels(t) ? GW_MODEL : ENGINE_MODEL,
		messages: [{ role: "user", content: "hello from the bench" }],
		max_tokens: 16,
	}),
});

const rig = await startRig({ paceMs: 20, maxSockets: 256, variants, portkey: false });
try {
	const targets = rig.targets.filter((t) => t.name !== "direct");
	await sequential(targets, 200, request);
	const lat = Object.fromEntries(targets.map((t) => [t.name, []]));
	for (let round = 0; round < ROUNDS; round++) {
		for (let j = 0; j < targets.length; j++) {
			const t = targets[(round + j) % targets.length];
			const r = await fixedRate(t, RATE, MS, request);
			if (r.errors) console.log(`${t.name}: ${r.errors} errors ${JSON.stringify(r.errorKinds)}`);
			lat[t.name].push(...r.latency);
		}
	}
	const q = (xs, p) => {
		const s = [...xs].sort((a, b) => a - b);
		return s[Math.min(s.length - 1, Math.floor(p * s.length))];
	};
	for (const t of targets) {
		const s = summarize(lat[t.name]);
		console.log(
			`${t.name.padEnd(14)} n=${lat[t.name].length} p50 ${s.p50.toFixed(2)} p99 ${s.p99.toFixed(2)} p99.9 ${q(lat[t.name], 0.999).toFixed(2)} max ${Math.max(...lat[t.name]).toFixed(2)} ms`,
		);
	}
} finally {
	await rig.stop();
	killChildren();
}
