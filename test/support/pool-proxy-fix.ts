import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

/**
 * @cloudflare/vitest-pool-workers 0.23.0 wraps its Durable Object and entrypoint classes'
 * prototype in a `Proxy` inside the constructor, so every instance adds one more layer: after a
 * few thousand Durable Objects (every test key has a ledger), each method lookup walks thousands
 * of proxies. In one workerd that runs many files (`npm run test:unit`) this was a fifth of its
 * CPU and growing. One layer answers exactly as many do (each layer returns the value the one
 * below found, and only an unknown key reaches the fallback), so the file is patched, once, to
 * wrap the prototype at the first construction only. A version without that code is left alone.
 */
const BUGGY = `	function Class(...args) {
		Class.prototype = new Proxy(Class.prototype, { get(target, key, receiver) {`;
const FIXED = `	let proxied = false; // patched by venym test/support/pool-proxy-fix.ts: one Proxy layer, not one per instance
	function Class(...args) {
		if (!proxied && (proxied = true)) Class.prototype = new Proxy(Class.prototype, { get(target, key, receiver) {`;

export function fixPoolPrototypeProxy(): void {
	const file = fileURLToPath(
		new URL("../../node_modules/@cloudflare/vitest-pool-workers/dist/worker/lib/cloudflare/test-internal.mjs", import.meta.url),
	);
	let text: string;
	try {
		text = readFileSync(file, "utf8");
	} catch {
		return;
	}
	if (!text.includes(BUGGY)) return;
	try {
		writeFileSync(file, text.replace(BUGGY, FIXED));
	} catch (err) {
		console.warn(`Could not patch ${file} (the tests run, only slower): ${err}`);
	}
}
