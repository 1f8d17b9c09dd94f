// `npm test` on a fresh machine: the Redis tests need redis-server and the browser test needs
// Chromium (Debian packages). Installs them when missing and this user may (root, apt-get);
// otherwise says how, and those tests are skipped. VENYM_SKIP_APT=1 skips this step.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";

const have = (cmd) => spawnSync(cmd, ["--version"], { stdio: "ignore" }).status === 0;
const missing = [];
if (!have("redis-server")) missing.push("redis-server");
if (!existsSync(process.env.CHROMIUM_PATH ?? "/usr/bin/chromium")) missing.push("chromium");

if (missing.length === 0 || process.env.VENYM_SKIP_APT === "1") process.exit(0);

const root = typeof process.getuid === "function" && process.getuid() === 0;
if (!root || !have("apt-get")) {
	console.warn(
		`Missing ${missing.join(" and ")}: their tests will be skipped. Install with: sudo apt-get install -y ${missing.join(" ")}`,
	);
	process.exit(0);
}
console.log(`Installing ${missing.join(" and ")} for the Redis and browser tests (once)…`);
const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
const run = (args) => spawnSync("apt-get", args, { stdio: ["ignore", "ignore", "inherit"], env }).status === 0;
if (!run(["update", "-qq"]) || !run(["install", "-y", "-qq", ...missing])) {
	console.warn(`Could not install ${missing.join(" and ")}: their tests will be skipped.`);
}
