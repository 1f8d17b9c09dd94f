// Codex CLI end to end: scripts/check-codex.mjs against this e2e gateway (`codex exec` answers, an
// exec_command tool loop completes, a resumed turn sends the sealed reasoning back to the engine,
// with `web_search = "live"` the model's search runs on the gateway's backend).
// Codex is not a dependency: set CODEX_BIN to its binary (`npm i --prefix ~/tools/codex @openai/codex`,
// then CODEX_BIN=~/tools/codex/node_modules/.bin/codex) to run it; without it the test is skipped.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { createKey, gatewayUrl } from "./support";

const CODEX_BIN = process.env.CODEX_BIN;
const ROOT = fileURLToPath(new URL("../..", import.meta.url));

function run(args: string[]): Promise<{ code: number | null; output: string }> {
	return new Promise((resolve) => {
		const child = spawn(process.execPath, args, { cwd: ROOT, env: process.env, stdio: ["ignore", "pipe", "pipe"] });
		let output = "";
		child.stdout.on("data", (d) => {
			output += d;
		});
		child.stderr.on("data", (d) => {
			output += d;
		});
		child.on("exit", (code) => resolve({ code, output }));
	});
}

if (!CODEX_BIN) console.warn("test/e2e/codex-cli.test.ts skipped: set CODEX_BIN to a Codex CLI binary to run it.");

describe.skipIf(!CODEX_BIN)("Codex CLI (scripts/check-codex.mjs; skipped without CODEX_BIN)", () => {
	it("answers, completes a tool loop, round-trips its sealed reasoning, and runs a live web search", async () => {
		const { key } = await createKey({ name: "e2e-codex", balance_usd: 5 });
		const { code, output } = await run(["scripts/check-codex.mjs", "--url", gatewayUrl(), "--key", key, "--model", "test/codex"]);
		expect(output).not.toContain("FAIL");
		expect(code, output).toBe(0);
	}, 600_000);
});
