// Cost of the prefix affinity key (src/routing/prefix-affinity.ts) per request: node bench/micro/prefix-affinity.mjs
import { build } from "esbuild";

const out = await build({
	entryPoints: [new URL("../../src/routing/prefix-affinity.ts", import.meta.url).pathname],
	bundle: true,
	format: "esm",
	write: false,
	platform: "neutral",
});
const { prefixAffinityKey } = await import(
	`data:text/javascript;base64,${Buffer.from(out.outputFiles[0].text).toString("base64")}`
);
const { createHash } = await import("node:crypto");

const tools = Array.from({ length: 8 }, (_, i) => ({
	type: "function",
	function: {
		name: `tool_${i}`,
		description: "Looks things up. ".repeat(10),
		parameters: { type: "object", properties: { q: { type: "string" } } },
	},
}));
const history = (turns) => {
	const messages = [
		{ role: "system", content: "You are a careful assistant. ".repeat(400) },
		{ role: "user", content: "Plan a week in Lisbon. ".repeat(50) },
	];
	for (let i = 0; i < turns; i++)
		messages.push({ role: "assistant", content: "Sure. ".repeat(300) }, { role: "user", content: "More." });
	return { model: "m", tools, messages };
};
const image = {
	model: "m",
	messages: [
		{ role: "user", content: [{ type: "image_url", image_url: { url: `data:image/png;base64,${"A".repeat(4_000_000)}` } }] },
	],
};

function bench(name, fn, n) {
	for (let i = 0; i < 1000; i++) fn();
	const t = process.hrtime.bigint();
	for (let i = 0; i < n; i++) fn();
	const us = Number(process.hrtime.bigint() - t) / 1000 / n;
	console.log(`${name}: ${us.toFixed(2)} µs per request`);
}
const chat = history(12);
bench("chat, 12 turns, 12 KB system, 8 tools (cyrb53, 1 KiB a part)", () => prefixAffinityKey(chat), 20_000);
bench("one 4 MB image in the first message", () => prefixAffinityKey(image), 20_000);
// The alternative: SHA-256 of the same bounded parts (node:crypto; crypto.subtle is async and slower still per call).
const text = JSON.stringify(chat).slice(0, 3072);
bench("for comparison: SHA-256 of the same 3 KiB (node:crypto)", () => createHash("sha256").update(text).digest("hex"), 20_000);
