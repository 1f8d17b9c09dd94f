// `npm run maintenance`: runs the gateway's hourly maintenance (raw usage records' retention and
// its R2 export) now, through `POST /admin/maintenance/run`, until nothing past retention is left.
// `wrangler dev` cannot fire the Cron Trigger locally, so this is how `npm start`'s gateway runs it;
// against a deployment: `npm run maintenance -- --url https://venym.example.com` with ADMIN_TOKEN set.
// The admin token comes from $ADMIN_TOKEN, else .dev.vars. Exits 1 when a run reports an error.
import { existsSync, readFileSync } from "node:fs";
import { parseArgs } from "node:util";

const { values } = parseArgs({ options: { url: { type: "string" } } });
const base = (values.url ?? process.env.VENYM_URL ?? `http://127.0.0.1:${process.env.PORT ?? 8787}`).replace(/\/+$/, "");

function adminToken() {
	if (process.env.ADMIN_TOKEN) return process.env.ADMIN_TOKEN;
	const vars = existsSync(".dev.vars") ? readFileSync(".dev.vars", "utf8") : "";
	const m = /^ADMIN_TOKEN=(.+)$/m.exec(vars);
	if (m) return m[1].trim().replace(/^"|"$/g, "");
	console.error("no admin token: set ADMIN_TOKEN (or run `npm start` once, which writes it to .dev.vars)");
	process.exit(1);
}

const token = adminToken();
// Each run stops after about 25 s (`done: false`); a backlog takes a few. Bounded all the same.
const MAX_RUNS = 50;
for (let i = 1; i <= MAX_RUNS; i++) {
	let res;
	try {
		res = await fetch(`${base}/admin/maintenance/run`, {
			method: "POST",
			headers: { authorization: `Bearer ${token}` },
			signal: AbortSignal.timeout(120_000),
		});
	} catch (err) {
		console.error(`${base}: ${err.message}`);
		process.exit(1);
	}
	const text = await res.text();
	if (res.status !== 200) {
		console.error(`${base}/admin/maintenance/run answered ${res.status}: ${text.slice(0, 500)}`);
		process.exit(1);
	}
	const run = JSON.parse(text).usage_retention;
	console.log(
		`usage retention: cutoff ${run.cutoff}, deleted ${run.deleted}, archived ${run.archived.length} part(s), ${run.done ? "done" : "more left"}`,
	);
	if (run.error) {
		console.error(`error: ${run.error}`);
		process.exit(1);
	}
	if (run.done || run.deleted === 0) break;
}
