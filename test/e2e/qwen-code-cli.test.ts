// Qwen Code end to end against this e2e gateway, on chat completions through openai-node: a plain
// question answered with text (test/dev-echo answers plainly even with Qwen Code's tools offered),
// a shell tool loop (test/qwen-loop calls `run_shell_command` with `echo hi`, Qwen Code runs it, the
// engine says what it printed), and a wrong key that ends the run within 10 s with the gateway's
// message (openai-node does not retry a 401, and `x-should-retry: false` says so anyway). Qwen Code
// is not a dependency: QWEN_BIN points at it (`npm i --prefix ~/tools/qwen @qwen-code/qwen-code`,
// then QWEN_BIN=~/tools/qwen/node_modules/.bin/qwen), else `qwen` on PATH; without either the test
// is skipped.
import { describe, expect, it } from "vitest";
import { agentBin, recordingProxy, runAgent, scratchDir, WRONG_KEY, WRONG_KEY_MESSAGE } from "./agent-cli";
import { createKey, gatewayUrl } from "./support";

const QWEN = agentBin("QWEN_BIN", "qwen");
if (!QWEN) console.warn("test/e2e/qwen-code-cli.test.ts skipped: set QWEN_BIN to a Qwen Code binary to run it.");

async function qwen(key: string, model: string, args: string[], timeoutMs = 120_000, base = gatewayUrl()) {
	const home = await scratchDir("venym-e2e-qwen-");
	const env = { ...process.env, HOME: home, OPENAI_BASE_URL: `${base}/v1`, OPENAI_API_KEY: key, OPENAI_MODEL: model };
	return runAgent(QWEN as string, ["--auth-type", "openai", "--model", model, ...args], { env, cwd: home, timeoutMs });
}

describe.skipIf(!QWEN)("Qwen Code (skipped without QWEN_BIN or qwen on PATH)", () => {
	it("answers a plain question with text, its tools offered", async () => {
		const { key } = await createKey({ name: "e2e-qwen-plain", balance_usd: 5 });
		const run = await qwen(key, "test/dev-echo", ["-p", "What is two plus two?"]);
		expect(run.code, run.output).toBe(0);
		expect(run.output).toContain("Echo:");
		expect(run.output).toContain("What is two plus two?");
	}, 180_000);

	it("completes a run_shell_command tool loop", async () => {
		const { key } = await createKey({ name: "e2e-qwen-tools", balance_usd: 5 });
		const run = await qwen(key, "test/qwen-loop", ["--yolo", "-p", "Run echo hi in the shell and tell me what it printed"]);
		expect(run.code, run.output).toBe(0);
		expect(run.output).toContain("Tool said:");
		expect(run.output).toMatch(/Tool said:[\s\S]*hi/);
	}, 180_000);

	it("ends a wrong key's run within 10 s of its request, with the gateway's message, after one request", async () => {
		const proxy = await recordingProxy(gatewayUrl());
		try {
			const run = await qwen(WRONG_KEY, "test/dev-echo", ["-p", "hello"], 90_000, proxy.url);
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
