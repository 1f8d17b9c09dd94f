// Claude Code end to end, with its defaults, against this e2e gateway: a plain question answered
// with text (test/dev-echo answers plainly even with Claude Code's tools offered), a Bash tool loop
// (test/agent-tools, the tool-loop scenario, calls Bash with `echo hi`, Claude Code runs it, the engine says what it printed),
// and a wrong key that ends the run within 10 s with the gateway's message (`x-should-retry: false`
// stops Claude Code's retries). Claude Code is not a dependency: CLAUDE_BIN points at its binary
// (`npm i --prefix ~/tools/claude @anthropic-ai/claude-code`, then
// CLAUDE_BIN=~/tools/claude/node_modules/@anthropic-ai/claude-code-linux-x64/claude), else `claude` on
// PATH; without either the test is skipped.
import { describe, expect, it } from "vitest";
import { agentBin, recordingProxy, runAgent, scratchDir, WRONG_KEY, WRONG_KEY_MESSAGE } from "./agent-cli";
import { createKey, gatewayUrl } from "./support";

const CLAUDE = agentBin("CLAUDE_BIN", "claude");
if (!CLAUDE) console.warn("test/e2e/claude-code-cli.test.ts skipped: set CLAUDE_BIN to a Claude Code binary to run it.");

async function claude(key: string, args: string[], timeoutMs = 120_000, base = gatewayUrl()) {
	const home = await scratchDir("venym-e2e-claude-");
	const env = {
		...process.env,
		HOME: home,
		ANTHROPIC_BASE_URL: base,
		ANTHROPIC_API_KEY: key,
		CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
		// Claude Code's background work asks for a small model by Anthropic's name: give it one of ours.
		ANTHROPIC_SMALL_FAST_MODEL: "test/dev-echo",
		ANTHROPIC_DEFAULT_HAIKU_MODEL: "test/dev-echo",
	};
	return runAgent(CLAUDE as string, ["-p", ...args], { env, cwd: home, timeoutMs });
}

describe.skipIf(!CLAUDE)("Claude Code (skipped without CLAUDE_BIN or claude on PATH)", () => {
	it("answers a plain question with text, its tools offered", async () => {
		const { key } = await createKey({ name: "e2e-claude-plain", balance_usd: 5 });
		const run = await claude(key, ["What is two plus two?", "--model", "test/dev-echo"]);
		expect(run.code, run.output).toBe(0);
		expect(run.output).toContain("Echo:");
		expect(run.output).toContain("What is two plus two?");
	}, 180_000);

	it("completes a Bash tool loop", async () => {
		const { key } = await createKey({ name: "e2e-claude-tools", balance_usd: 5 });
		const run = await claude(key, [
			"Run echo hi in the shell and tell me what it printed",
			"--model",
			"test/agent-tools",
			"--allowedTools",
			"Bash",
		]);
		expect(run.code, run.output).toBe(0);
		expect(run.output).toContain("Tool said: hi");
	}, 180_000);

	it("ends a wrong key's run within 10 s of its request, with the gateway's message, after one request", async () => {
		const proxy = await recordingProxy(gatewayUrl());
		try {
			const run = await claude(WRONG_KEY, ["hello", "--model", "test/dev-echo"], 90_000, proxy.url);
			const ended = Date.now();
			expect(run.code, run.output).not.toBe(0);
			expect(run.output).toContain(WRONG_KEY_MESSAGE);
			// Before x-should-retry: six 401s over 30 s, and nothing shown until the last.
			const asked = proxy.seen.filter((r) => r.method === "POST");
			expect(asked.map((r) => r.status)).toEqual([401]);
			expect(ended - (asked[0]?.at ?? 0), run.output).toBeLessThan(10_000);
		} finally {
			await proxy.close();
		}
	}, 120_000);
});
