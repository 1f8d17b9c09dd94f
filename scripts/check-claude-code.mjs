// Claude Code against the gateway, as a new user would run it, with its defaults (tool search on:
// most tools sent with `defer_loading`, found with its ToolSearch tool): `claude -p … --model <id>`
// with ANTHROPIC_BASE_URL and a vk-… key. Checks that it answers (venym/dev-echo) and that a tool
// loop completes (venym/dev-tools: the development engine calls Bash with `echo hi`, Claude Code
// runs it and sends the result back, the engine answers "Tool said: hi"); that its WebSearch tool
// works (venym/dev-websearch: the engine finds the deferred WebSearch with ToolSearch, calls it,
// Claude Code asks the gateway with Anthropic's web search server tool, the gateway's search round
// runs it); and that a deferred tool found by keywords can be called (venym/dev-deferred: the
// engine searches "cron list", Claude Code answers with tool_reference blocks, the engine calls
// CronList).
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
			model("venym/dev-websearch", "websearch-loop", ["tools", "reasoning"]),
			model("venym/dev-deferred", "deferred-tool", ["tools", "reasoning"]),
		],
		// The development engine's search backend: serves Anthropic's web search server tool.
		web_search: { provider: "searxng", url: `${engineUrl}/search` },
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
	const answer = await claude(gw, home, ["-p", "Hello from the check", "--model", "venym/dev-echo"]);
	const loop = await claude(gw, home, [
		"-p",
		"Run echo hi in the shell and tell me what it printed",
		"--model",
		"venym/dev-tools",
		"--allowedTools",
		"Bash",
	]);
	const searched = await claude(gw, home, [
		"-p",
		"Search the web for volcano eruptions and tell me what you found",
		"--model",
		"venym/dev-websearch",
		"--allowedTools",
		"WebSearch",
	]);
	const deferred = await claude(gw, home, ["-p", "List my scheduled cron jobs", "--model", "venym/dev-deferred"]);
	const answered = check("answers a prompt", answer, "Hello from the check");
	const looped = check("completes a Bash tool loop", loop, "Tool said: hi");
	// Claude Code writes "Links: [...]" from the web_search_tool_result block the gateway returned.
	const web = check("completes a WebSearch tool loop (the server tool on the gateway's search)", searched, 'Links: [{"title"');
	// CronList answers "No scheduled jobs." in a fresh HOME: the engine could call it only once the search loaded it.
	const found = check("finds a deferred tool with ToolSearch and calls it", deferred, "Tool said: No scheduled jobs");
	passed = answered && looped && web && found;
} finally {
	await gw.close();
	await rm(home, { recursive: true, force: true });
}
process.exit(passed ? 0 : 1);
