// Codex CLI end to end: a plain question (test/dev-echo answers plainly with Codex's tools offered),
// an exec_command loop and a wrong key that ends within 10 s with the gateway's message; and
// scripts/check-codex.mjs against this e2e gateway (`codex exec` answers, an
// exec_command tool loop completes, a resumed turn sends the sealed reasoning back to the engine,
// with `web_search = "live"` the model's search runs on the gateway's backend).
// Codex is not a dependency: set CODEX_BIN to its binary (`npm i --prefix ~/tools/codex @openai/codex`,
// then CODEX_BIN=~/tools/codex/node_modules/.bin/codex) to run it; without it the test is skipped.
import { spawn } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { agentBin, recordingProxy, runAgent, scratchDir, WRONG_KEY, WRONG_KEY_MESSAGE } from "./agent-cli";
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

const CODEX = agentBin("CODEX_BIN", "codex");

/** `codex exec` with the provider docs/codex.md shows (its own retries off, so an error ends the turn at once). */
async function codexExec(key: string, model: string, prompt: string, base = gatewayUrl()) {
	const home = await scratchDir("venym-e2e-codex-");
	await writeFile(
		join(home, "config.toml"),
		`model = "${model}"
model_provider = "venym"
model_context_window = 200000
approval_policy = "never"
sandbox_mode = "read-only"

[model_providers.venym]
name = "Venym"
base_url = "${base}/v1"
wire_api = "responses"
env_key = "VENYM_API_KEY"
request_max_retries = 0
stream_max_retries = 0
`,
	);
	const env = { ...process.env, CODEX_HOME: home, VENYM_API_KEY: key, NO_COLOR: "1" };
	return runAgent(CODEX as string, ["exec", "--skip-git-repo-check", prompt], { env, cwd: home, timeoutMs: 120_000 });
}

describe.skipIf(!CODEX)("Codex CLI as configured in docs/codex.md (skipped without CODEX_BIN or codex on PATH)", () => {
	it("answers a plain question with text, its tools offered", async () => {
		const { key } = await createKey({ name: "e2e-codex-plain", balance_usd: 5 });
		const run = await codexExec(key, "test/dev-echo", "What is two plus two?");
		expect(run.code, run.output).toBe(0);
		expect(run.output).toContain("Echo:");
	}, 180_000);

	it("completes an exec_command tool loop", async () => {
		const { key } = await createKey({ name: "e2e-codex-tools", balance_usd: 5 });
		const run = await codexExec(key, "test/codex", "Run echo hi and tell me what it printed");
		expect(run.code, run.output).toBe(0);
		expect(run.output).toContain("Tool said:");
	}, 180_000);

	it("ends a wrong key's run within 10 s of its request, with the gateway's message, after one request", async () => {
		const proxy = await recordingProxy(gatewayUrl());
		try {
			const run = await codexExec(WRONG_KEY, "test/dev-echo", "hello", proxy.url);
			const ended = Date.now();
			expect(run.code, run.output).not.toBe(0);
			expect(run.output).toContain(WRONG_KEY_MESSAGE);
			const asked = proxy.seen.filter((r) => r.method === "POST");
			expect(asked.map((r) => r.status)).toEqual([401]);
			expect(ended - (asked[0]?.at ?? 0), run.output).toBeLessThan(10_000);
		} finally {
			await proxy.close();
		}
	}, 120_000);
});
