// Claude Code against the gateway, as a new user would run it: `claude -p … --model <id>` with
// ANTHROPIC_BASE_URL and a vk-… key. Checks that it answers (venym/dev-echo, no tools) and that a
// tool loop completes (venym/dev-tools: the development engine calls Bash with `echo hi`, Claude
// Code runs it and sends the result back, the engine answers "Tool said: hi").
//
//   node scripts/check-claude-code.mjs                        starts the engine and the gateway itself
//                                                             (ENGINE_PORT, default 8871; PORT, default 8870)
//   node scripts/check-claude-code.mjs --url http://localhost:8787 --key vk-…   uses a running `npm start`
//
// Claude Code is not a dependency of this repository (its native binary is ~250 MB):
// `npm i --prefix ~/tools/claude @anthropic-ai/claude-code`, then CLAUDE_BIN=~/tools/claude/node_modules/.bin/claude
// (default: `claude` on PATH). It runs with a throwaway HOME, so your own Claude Code settings are untouched.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { checkGateway, runCli } from "./check-stack.mjs";

const { values: args } = parseArgs({ options: { url: { type: "string" }, key: { type: "string" } } });
const CLAUDE = process.env.CLAUDE_BIN ?? "claude";

function catalog(engineUrl) {
	const model = (id, scenario, capabilities) => ({
		id,
		engine_model: id.replace("venym/", ""),
		nodes: [`${engineUrl}${scenario ? `/s/${scenario}` : ""}/v1`],
		max_output_tokens: 4096,
		context_length: 200_000,
		pricing: { input_usd_per_mtok: 0.3, output_usd_per_mtok: 1.2 },
		capabilities,
	});
	return {
		models: [
			model("venym/dev-echo", null, ["tools", "reasoning"]),
			model("venym/dev-tools", "tool-loop", ["tools", "reasoning"]),
		],
	};
}

/** Runs `claude -p`; resolves with its output, rejects on a non-zero exit or the timeout. */
function claude(gw, home, cliArgs) {
	const env = {
		...process.env,
		HOME: home,
		ANTHROPIC_BASE_URL: gw.url,
		ANTHROPIC_API_KEY: gw.key,
		CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
		// Claude Code's background tasks ask for a small model by Anthropic's name: give it one of ours.
		ANTHROPIC_SMALL_FAST_MODEL: "venym/dev-echo",
		ANTHROPIC_DEFAULT_HAIKU_MODEL: "venym/dev-echo",
	};
	return runCli({ bin: CLAUDE, binEnv: "CLAUDE_BIN", args: cliArgs, env });
}

function check(name, output, expected) {
	const ok = output.includes(expected);
	console.log(`${ok ? "ok  " : "FAIL"} ${name}\n     ${output.split("\n").join("\n     ")}`);
	return ok;
}

const gw = await checkGateway({
	...args,
	catalog,
	enginePort: 8871,
	gatewayPort: 8870,
	name: "claude-code check",
});
const home = await mkdtemp(join(tmpdir(), "venym-claude-home-"));
let passed = false;
try {
	console.log(`Claude Code (${CLAUDE}) against ${gw.url}`);
	const answer = await claude(gw, home, ["-p", "Hello from the check", "--model", "venym/dev-echo", "--tools", ""]);
	const loop = await claude(gw, home, [
		"-p",
		"Run echo hi in the shell and tell me what it printed",
		"--model",
		"venym/dev-tools",
		"--allowedTools",
		"Bash",
	]);
	const answered = check("answers a prompt", answer, "Hello from the check");
	const looped = check("completes a Bash tool loop", loop, "Tool said: hi");
	passed = answered && looped;
} finally {
	await gw.close();
	await rm(home, { recursive: true, force: true });
}
process.exit(passed ? 0 : 1);
