// Gemini CLI end to end against this e2e gateway, on the Gemini lane (/v1beta/models/…): a plain
// question answered with text (test/dev-echo), its own default model with no -m (Gemini CLI 0.61
// asks for gemini-3.1-pro-preview, its router gemini-3.5-flash-lite: the config's "gemini-3.*"
// alias serves them), a shell tool loop (test/qwen-loop calls `run_shell_command` with `echo hi`,
// Gemini CLI runs it and sends the output back, the engine says what it printed), a wrong key and an
// empty balance that each end the run within 10 s of its request with the gateway's message. Gemini
// CLI is not a dependency: GEMINI_BIN points at it (`npm i --prefix ~/tools/gemini @google/gemini-cli`),
// default ~/tools/gemini/node_modules/.bin/gemini, else `gemini` on PATH; without one the test is skipped.
import { existsSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { agentBin, recordingProxy, runAgent, scratchDir, WRONG_KEY, WRONG_KEY_MESSAGE } from "./agent-cli";
import { createKey, engineRequestsWith, gatewayUrl, marker } from "./support";

const DEFAULT_BIN = join(homedir(), "tools/gemini/node_modules/.bin/gemini");
const GEMINI = process.env.GEMINI_BIN || (existsSync(DEFAULT_BIN) ? DEFAULT_BIN : agentBin("GEMINI_BIN", "gemini"));
if (!GEMINI)
	console.warn(
		`test/e2e/gemini-cli.test.ts skipped: set GEMINI_BIN to a Gemini CLI binary (or install it at ${DEFAULT_BIN}) to run it.`,
	);

async function gemini(key: string, args: string[], timeoutMs = 120_000, base = gatewayUrl()) {
	const home = await scratchDir("venym-e2e-gemini-");
	// Gemini CLI 0.61, given GOOGLE_GEMINI_BASE_URL, picks an auth type its own check refuses: the
	// API-key type, chosen in its settings, uses the same base URL.
	await mkdir(join(home, ".gemini"));
	await writeFile(
		join(home, ".gemini", "settings.json"),
		JSON.stringify({ security: { auth: { selectedType: "gemini-api-key" } } }),
	);
	const env = {
		...process.env,
		HOME: home,
		GOOGLE_GEMINI_BASE_URL: base,
		GEMINI_API_KEY: key,
		// Its folder-trust question would stop a headless run.
		GEMINI_CLI_TRUST_WORKSPACE: "true",
	};
	return runAgent(GEMINI as string, args, { env, cwd: home, timeoutMs });
}

describe.skipIf(!GEMINI)("Gemini CLI (skipped without GEMINI_BIN, ~/tools/gemini or gemini on PATH)", () => {
	it("answers a plain question with text, its tools offered", async () => {
		const { key } = await createKey({ name: "e2e-gemini-plain", balance_usd: 5 });
		const run = await gemini(key, ["-p", "What is two plus two?", "-m", "test/dev-echo"]);
		expect(run.code, run.output).toBe(0);
		expect(run.output).toContain("Echo:");
		expect(run.output).toContain("What is two plus two?");
	}, 180_000);

	it("answers on its own default model, named by Google, through a prefix alias", async () => {
		const { key } = await createKey({ name: "e2e-gemini-default", balance_usd: 5 });
		const m = marker("gemini-default");
		const proxy = await recordingProxy(gatewayUrl());
		try {
			const run = await gemini(key, ["-p", `Say ${m}`], 120_000, proxy.url);
			expect(run.code, run.output).toBe(0);
			expect(run.output).toContain(`Echo:`);
			expect(run.output).toContain(m);
			const models = proxy.seen.filter((r) => r.method === "POST").map((r) => r.path.split(":")[0]);
			expect(
				models.every((p) => p?.startsWith("/v1beta/models/gemini-3.")),
				models.join(", "),
			).toBe(true);
			expect(proxy.seen.every((r) => r.status === 200)).toBe(true);
			expect((await engineRequestsWith(m)).length).toBeGreaterThan(0);
		} finally {
			await proxy.close();
		}
	}, 180_000);

	it("completes a run_shell_command tool loop", async () => {
		const { key } = await createKey({ name: "e2e-gemini-tools", balance_usd: 5 });
		const run = await gemini(key, [
			"-p",
			"Run echo hi in the shell and tell me what it printed",
			"-m",
			"test/qwen-loop",
			"--yolo",
		]);
		expect(run.code, run.output).toBe(0);
		// Gemini CLI sends the command's output back wrapped: `<untrusted_context> Output: hi …`.
		expect(run.output).toMatch(/Tool said:[\s\S]*Output: hi\b/);
	}, 180_000);

	it("ends a wrong key's run within 10 s of its request, with the gateway's message", async () => {
		const proxy = await recordingProxy(gatewayUrl());
		try {
			const run = await gemini(WRONG_KEY, ["-p", "hello", "-m", "test/dev-echo"], 90_000, proxy.url);
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

	it("ends an empty balance's run within 10 s of its request, with RESOURCE_EXHAUSTED and the balance", async () => {
		const { key } = await createKey({ name: "e2e-gemini-empty", balance_usd: 0 });
		const proxy = await recordingProxy(gatewayUrl());
		try {
			const run = await gemini(key, ["-p", "hello", "-m", "test/dev-echo"], 90_000, proxy.url);
			const ended = Date.now();
			expect(run.code, run.output).not.toBe(0);
			expect(run.output).toContain("RESOURCE_EXHAUSTED");
			expect(run.output).toContain("Insufficient balance");
			const asked = proxy.seen.filter((r) => r.method === "POST");
			expect(asked.map((r) => r.status)).toEqual([402]);
			expect(ended - (asked[0]?.at ?? 0), run.output).toBeLessThan(10_000);
		} finally {
			await proxy.close();
		}
	}, 120_000);
});
