// Prints the size of the bundle `wrangler deploy --dry-run --outdir dist` wrote.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";

let raw = 0;
let gz = 0;
for (const f of readdirSync("dist")) {
	if (!/\.(m?js|wasm)$/.test(f)) continue;
	const p = join("dist", f);
	raw += statSync(p).size;
	gz += gzipSync(readFileSync(p)).length;
}
console.log(`bundle: ${(raw / 1024).toFixed(1)} KiB (${(gz / 1024).toFixed(1)} KiB gzip)`);
