// Fails when worker-configuration.d.ts no longer matches wrangler.toml (run `npm run types` to fix).
import { execFileSync } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";

// Generated beside the real file so the relative import paths inside it come out the same.
const out = ".worker-configuration.check.d.ts";
execFileSync("npx", ["wrangler", "types", out, "--strict-vars=false", "--env-file", ".env.example"], {
	stdio: ["ignore", "ignore", "inherit"],
	env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
});
// The first two lines name the command and output path; the rest must match exactly.
const body = (file) => readFileSync(file, "utf8").split("\n").slice(2).join("\n");
const same = body(out) === body("worker-configuration.d.ts");
rmSync(out);
if (!same) {
	console.error("worker-configuration.d.ts is out of date: run `npm run types` and commit it.");
	process.exit(1);
}
console.log("worker-configuration.d.ts is up to date.");
