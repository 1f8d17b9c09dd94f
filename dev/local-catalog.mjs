// wrangler.toml's model catalog (GATEWAY_CONFIG in [vars]), the one `npm start` serves from the
// development engine. Read by wrangler in a child process: importing wrangler into a long-running
// process installs its signal handlers there, and they exit on Ctrl-C before that process has
// stopped what it started (dev/start.mjs).
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

const READ = `import { unstable_readConfig } from "wrangler";
const raw = unstable_readConfig({ config: "wrangler.toml" }).vars?.GATEWAY_CONFIG;
process.stdout.write(typeof raw === "string" ? raw : JSON.stringify(raw));`;

/** GATEWAY_CONFIG from wrangler.toml, parsed (not validated: `npm run check-config` does that). */
export function readLocalCatalog() {
	const r = spawnSync(process.execPath, ["--input-type=module", "-e", READ], { cwd: ROOT, encoding: "utf8", timeout: 60_000 });
	if (r.status !== 0) throw new Error(`reading wrangler.toml failed: ${r.error?.message ?? r.stderr}`);
	return JSON.parse(r.stdout);
}
