// What the node-secret filter (src/stream/secret-filter.ts) costs a stream chunk: the chat
// encoder alone (no node key configured: the filter is not installed) against the encoder behind
// the filter with one node key (the usual config) and with four keys. Each chunk is a typical
// chat delta; one workload has every delta end in a key's first characters, so the filter holds
// and re-serialises each one (its worst case); one has JSON escapes in every delta (tool-call
// arguments), which the filter also matches decoded. Pure JS in V8, as workerd runs it.
//
//   node bench/micro/secret-filter.mjs        (a few seconds; prints CPU ns per chunk, median of 41 runs)
//
// Timed in process CPU time (process.cpuUsage), not wall time: on a shared, busy host a wall
// clock counts the time other processes had the core.
import { build } from "esbuild";

/** A TypeScript module bundled on the fly (its imports included) and loaded. */
async function load(relative) {
	const out = await build({
		entryPoints: [new URL(relative, import.meta.url).pathname],
		bundle: true,
		format: "esm",
		write: false,
		platform: "neutral",
	});
	return import(`data:text/javascript;base64,${Buffer.from(out.outputFiles[0].text).toString("base64")}`);
}
const { withSecretsRedacted } = await load("../../src/stream/secret-filter.ts");
const { ChatSseEncoder } = await load("../../src/stream/chat-sse-encoder.ts");

const KEYS = [
	"vllm-node-key-7f3a9c2e5b1d4f60",
	"sglang-key-0b8e6d4c2a9f7e51",
	"sk-llamacpp-3c5e7a9b1d2f4e6a",
	"ollama-proxy-key-9d8c7b6a5f4e",
];
const CHUNKS = 20000;

/** The reducer's output for one chunk: the parsed object and its JSON text. */
function forwarded(content) {
	const chunk = {
		id: "chatcmpl-8f1e2d",
		object: "chat.completion.chunk",
		created: 1733000000,
		model: "Qwen/Qwen3-27B",
		choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: null }],
	};
	return { chunk, data: JSON.stringify(chunk) };
}

const workloads = {
	"ordinary deltas (` word17`)": (i) => ` word${i % 97}`,
	"every delta ends in a key's start (` … vllm-`)": (i) => ` word${i % 97} vllm-`,
	// A tool call's arguments (a file's text in JSON): every delta carries escapes, decoded to be matched.
	'escaped deltas (` w17\\n\\"\\u00e9`)': (i) => ` w${i % 97}\\n\\"\\u00e9`,
};
const setups = {
	"no node key (filter not installed)": [],
	"1 node key": KEYS.slice(0, 1),
	"4 node keys": KEYS,
};
const reducer = { id: "chatcmpl-8f1e2d", created: 1733000000, usageField: () => ({}) };

const run = (secrets, make) => {
	const encoder = withSecretsRedacted(new ChatSseEncoder("venym/qwen"), secrets);
	let bytes = 0;
	// One chunk per call, as a stream whose engine sends a delta per read.
	for (let i = 0; i < CHUNKS; i++) bytes += encoder.chunks([forwarded(make(i))]).length;
	bytes += encoder.finish({ status: "completed" }, reducer).length;
	return bytes;
};

const RUNS = 41;
const rows = [];
for (const [wname, make] of Object.entries(workloads)) {
	const times = Object.fromEntries(Object.keys(setups).map((s) => [s, []]));
	for (const secrets of Object.values(setups)) for (let i = 0; i < 5; i++) run(secrets, make); // warm up
	// Interleaved, so load and GC on a busy host fall on every setup alike.
	for (let i = 0; i < RUNS; i++) {
		for (const [sname, secrets] of Object.entries(setups)) {
			const t0 = process.cpuUsage();
			run(secrets, make);
			const t = process.cpuUsage(t0);
			times[sname].push(((t.user + t.system) * 1000) / CHUNKS);
		}
	}
	for (const [sname, ts] of Object.entries(times)) {
		ts.sort((a, b) => a - b);
		rows.push({ workload: wname, setup: sname, "CPU ns/chunk": Math.round(ts[RUNS >> 1]) });
	}
}
console.table(rows);
