// Codex CLI against the gateway, as a new user would run it: `codex exec` with a custom provider
// (`model_providers.venym`, `wire_api = "responses"`) and a vk-… key. Checks that it answers; that
// a tool loop completes (venym/dev-codex: the development engine calls exec_command with
// `echo hi`, Codex runs it and sends the output back, the engine answers "Tool said: …"); and
// that a second turn (`codex exec resume --last`) sends the sealed reasoning back and the engine
// receives it (it says "Reasoning received: …").
//
//   node scripts/check-codex.mjs                         starts the engine and the gateway itself
//                                                        (ENGINE_PORT, default 8873; PORT, default 8872)
//   node scripts/check-codex.mjs --url http://localhost:8787 --key vk-…   uses a running `npm start`
//                                                        (its venym/dev-codex is served by the dev
//                                                        engine's /s/codex scenario, and npm start
//                                                        sets REASONING_SEAL_SECRET); --model names
//                                                        another model served by that scenario
//
// Codex is not a dependency of this repository: `npm i --prefix ~/tools/codex @openai/codex`, then
// CODEX_BIN=~/tools/codex/node_modules/.bin/codex (default: `codex` on PATH). It runs offline with a
// throwaway CODEX_HOME, so your own Codex settings are untouched. Exits non-zero on any failure.
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { checkGateway, runCli } from "./check-stack.mjs";

const { values: args } = parseArgs({
	options: { url: { type: "string" }, key: { type: "string" }, model: { type: "string" } },
});
const CODEX = process.env.CODEX_BIN ?? "codex";
const MODEL = args.model ?? "venym/dev-codex";
const CONTEXT_WINDOW = 200_000;

function catalog(engineUrl) {
	return {
		// The development engine's search backend: a live hosted web_search is served by it.
		web_search: { provider: "searxng", url: `${engineUrl}/search` },
		models: [
			{
				id: MODEL,
				engine_model: "dev-codex",
				nodes: [`${engineUrl}/s/codex/v1`],
				max_output_tokens: 4096,
				context_length: CONTEXT_WINDOW,
				pricing: { input_usd_per_mtok: 0.3, output_usd_per_mtok: 1.2 },
				capabilities: ["tools", "reasoning"],
			},
		],
	};
}

/** The config.toml the README shows, pointed at `url`; `extra` lines go on top (e.g. `web_search = "live"`). */
function config(url, extra = "") {
	return `${extra}model = "${MODEL}"
model_provider = "venym"
model_context_window = ${CONTEXT_WINDOW}
approval_policy = "never"
sandbox_mode = "read-only"

[model_providers.venym]
name = "Venym"
base_url = "${url}/v1"
wire_api = "responses"
env_key = "VENYM_API_KEY"
request_max_retries = 0
stream_max_retries = 0
`;
}

/** Runs `codex exec …` in `work`; resolves with its output, rejects on a non-zero exit or the timeout. */
function codex(gw, home, work, cliArgs) {
	const env = { ...process.env, CODEX_HOME: home, VENYM_API_KEY: gw.key, NO_COLOR: "1" };
	return runCli({ bin: CODEX, binEnv: "CODEX_BIN", args: ["exec", ...cliArgs], env, cwd: work });
}

/** The lines of Codex's output that matter (its banner and warnings left out). */
function shown(output) {
	return output
		.split("\n")
		.filter((l) => /Echo:|Tool said|Reasoning received|According to|echo hi|ERROR|error/i.test(l))
		.slice(-8);
}

function check(name, output, expected) {
	const ok = expected.every((e) => output.includes(e));
	console.log(`${ok ? "ok  " : "FAIL"} ${name}\n     ${(ok ? shown(output) : output.split("\n")).join("\n     ")}`);
	return ok;
}

const gw = await checkGateway({
	...args,
	catalog,
	enginePort: 8873,
	gatewayPort: 8872,
	name: "codex check",
	vars: { REASONING_SEAL_SECRET: randomBytes(32).toString("hex") },
});
const home = await mkdtemp(join(tmpdir(), "venym-codex-home-"));
const work = await mkdtemp(join(tmpdir(), "venym-codex-work-"));
let passed = false;
try {
	await writeFile(join(home, "config.toml"), config(gw.url));
	console.log(`Codex (${CODEX}) against ${gw.url}`);
	const answer = await codex(gw, home, work, ["--skip-git-repo-check", "Hello from the check"]);
	const loop = await codex(gw, home, work, ["--skip-git-repo-check", "Run echo hi in the shell and tell me what it printed"]);
	const again = await codex(gw, home, work, ["resume", "--last", "--skip-git-repo-check", "What did you think before?"]);
	// Codex's `web_search = "live"`: the hosted tool allows live access, the model asks for a
	// search, the gateway runs it and the engine's second answer cites the results.
	const liveHome = await mkdtemp(join(tmpdir(), "venym-codex-home-"));
	let searched = "";
	try {
		await writeFile(join(liveHome, "config.toml"), config(gw.url, 'web_search = "live"\n'));
		searched = await codex(gw, liveHome, work, ["--skip-git-repo-check", "Please search for volcano eruptions"]);
	} finally {
		await rm(liveHome, { recursive: true, force: true });
	}
	const answered = check("answers a prompt", answer, ["Echo: Hello from the check"]);
	// The tool's output ends in what `echo hi` printed; the engine also got turn 1's reasoning back.
	const looped = check("completes an exec_command tool loop", loop, [
		"Tool said:",
		" hi. Reasoning received: I plan the next step.",
	]);
	const reasoned = check("a second turn sends the sealed reasoning back to the engine", again, [
		"Echo: What did you think before?",
		"Reasoning received: I plan the next step.",
	]);
	const live = check("a live web_search runs when the model asks for it", searched, ["According to [1]"]);
	passed = answered && looped && reasoned && live;
} finally {
	await gw.close();
	await rm(home, { recursive: true, force: true });
	await rm(work, { recursive: true, force: true });
}
process.exit(passed ? 0 : 1);
