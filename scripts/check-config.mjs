// Validates GATEWAY_CONFIG the way the worker does: from $GATEWAY_CONFIG, a file given as the
// first argument, or wrangler.toml's [vars]. Exits 1 naming the bad field.
import { readFileSync } from "node:fs";
import { createServer } from "vite";

async function rawConfig() {
	const arg = process.argv[2];
	if (arg) return readFileSync(arg, "utf8");
	if (process.env.GATEWAY_CONFIG) return process.env.GATEWAY_CONFIG;
	const { unstable_readConfig } = await import("wrangler");
	const cfg = unstable_readConfig({ config: "wrangler.toml" });
	return cfg.vars?.GATEWAY_CONFIG;
}

const server = await createServer({ server: { middlewareMode: true }, appType: "custom", logLevel: "silent" });
try {
	const { parseConfig } = await server.ssrLoadModule("/src/config.ts");
	const config = parseConfig(await rawConfig());
	console.log(`GATEWAY_CONFIG is valid: ${config.models.length} model(s): ${config.models.map((m) => m.id).join(", ")}`);
} catch (err) {
	console.error(err.message ?? err);
	process.exitCode = 1;
} finally {
	await server.close();
}
