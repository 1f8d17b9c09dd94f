// The SSE parsers the gateway could use, on the shapes engine streams take: the hand-written one
// it had (bench/micro/hand-sse-parser.ts), eventsource-parser 3.x (what the AI SDK and much of
// the ecosystem use), and the gateway's wrapper around it (src/stream/sse-parser.ts). Pure JS in
// V8, as workerd runs it. The gateway uses whichever is faster on what sockets deliver.
//
//   node bench/micro/sse-parsers.mjs        (a few seconds; prints ns per event, median of 41 runs)
import { build } from "esbuild";
import { createParser } from "eventsource-parser";

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
const hand = await load("./hand-sse-parser.ts");
const gateway = await load("../../src/stream/sse-parser.ts");

const chunk = (i) =>
	JSON.stringify({
		id: "chatcmpl-8f1e2d",
		object: "chat.completion.chunk",
		created: 1733000000,
		model: "Qwen/Qwen3-27B",
		choices: [{ index: 0, delta: { content: ` word${i % 97}` }, logprobs: null, finish_reason: null }],
	});
const EVENTS = 2000;
const stream = Array.from({ length: EVENTS }, (_, i) => `data: ${chunk(i)}\n\n`).join("");
const crlf = stream.replaceAll("\n", "\r\n");

/** Cut a text into pieces of `size` characters: what reads off a socket look like. */
const pieces = (text, size) => {
	const out = [];
	for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
	return out;
};
const longLine = `data: ${"x".repeat(1024 * 1024 - 16)}\n\n`;

const workloads = {
	"one event per read": { parts: stream.split(/(?<=\n\n)/), events: EVENTS },
	"1400-char reads (split frames)": { parts: pieces(stream, 1400), events: EVENTS },
	"CRLF, 1400-char reads": { parts: pieces(crlf, 1400), events: EVENTS },
	"1 MiB event in 64-char reads": { parts: pieces(longLine, 64), events: 1 },
};

const run = (mod) => (parts) => {
	let n = 0;
	const p = mod.createSseParser(() => n++, undefined, 2 * 1024 * 1024);
	for (const part of parts) p.feed(part);
	p.end();
	return n;
};

const parsers = {
	"hand parser (until session 3)": run(hand),
	"gateway (eventsource-parser wrapper)": run(gateway),
	"eventsource-parser": (parts) => {
		let n = 0;
		const p = createParser({ onEvent: () => n++, maxBufferSize: 2 * 1024 * 1024 });
		for (const part of parts) p.feed(part);
		p.reset({ consume: true });
		return n;
	},
};

const RUNS = 41;
const rows = [];
for (const [wname, w] of Object.entries(workloads)) {
	const times = Object.fromEntries(Object.keys(parsers).map((p) => [p, []]));
	for (const parse of Object.values(parsers)) for (let i = 0; i < 5; i++) parse(w.parts); // warm up
	// Interleaved, so load and GC on a busy host fall on every parser alike.
	for (let i = 0; i < RUNS; i++) {
		for (const [pname, parse] of Object.entries(parsers)) {
			const t0 = process.hrtime.bigint();
			const n = parse(w.parts);
			times[pname].push(Number(process.hrtime.bigint() - t0));
			if (n !== w.events) throw new Error(`${pname} on ${wname}: ${n} events, expected ${w.events}`);
		}
	}
	for (const [pname, t] of Object.entries(times)) {
		t.sort((a, b) => a - b);
		rows.push({ workload: wname, parser: pname, "ns/event (median)": Math.round(t[RUNS >> 1] / w.events) });
	}
}
console.table(rows);
