// `npm start`: the development engine on :8788, the gateway on :8787 (local D1 and Durable
// Objects under .wrangler/), and a ready-to-use key. Nothing outside this machine is needed.
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { startEngine } from "./engine.mjs";
import { startGateway } from "./gateway-process.mjs";

const GATEWAY_PORT = Number(process.env.PORT ?? 8787);
const ENGINE_PORT = Number(process.env.ENGINE_PORT ?? 8788);

function adminToken() {
	const existing = existsSync(".dev.vars") ? readFileSync(".dev.vars", "utf8") : "";
	const m = /^ADMIN_TOKEN=(.+)$/m.exec(existing);
	if (m) return m[1].trim().replace(/^"|"$/g, "");
	const token = `dev-admin-${randomBytes(12).toString("hex")}`;
	writeFileSync(".dev.vars", `${existing}${existing && !existing.endsWith("\n") ? "\n" : ""}ADMIN_TOKEN=${token}\n`);
	return token;
}

const token = adminToken();
const engine = await startEngine({ port: ENGINE_PORT, quiet: true });
console.log(`development engine on ${engine.url}`);
console.log("starting the gateway (wrangler dev)…");
const gateway = await startGateway({ port: GATEWAY_PORT, quiet: true, timeoutMs: 120_000 });

const res = await fetch(`${gateway.url}/admin/keys`, {
	method: "POST",
	headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
	body: JSON.stringify({ name: `dev ${new Date().toISOString()}`, balance_usd: 10 }),
});
if (res.status !== 201) {
	console.error(`could not create a key: ${res.status} ${await res.text()}`);
	console.error(gateway.log());
	process.exit(1);
}
const key = await res.json();

console.log(`
Venym gateway on http://localhost:${GATEWAY_PORT}  (admin token in .dev.vars)

  API key (balance $${key.balance_usd}): ${key.key}

  curl http://localhost:${GATEWAY_PORT}/v1/chat/completions \\
    -H "Authorization: Bearer ${key.key}" -H "Content-Type: application/json" \\
    -d '{"model":"venym/dev-echo","messages":[{"role":"user","content":"Hello!"}]}'

  OpenAI SDK: new OpenAI({ baseURL: "http://localhost:${GATEWAY_PORT}/v1", apiKey: "${key.key}" })

Ctrl-C stops both.`);

let stopping = false;
async function stop() {
	if (stopping) return;
	stopping = true;
	await gateway.close();
	await engine.close();
	process.exit(0);
}
process.on("SIGINT", stop);
process.on("SIGTERM", stop);
