// Gemini CLI against the gateway, as a new user would run it: `gemini -p … -m <id>` with
// GOOGLE_GEMINI_BASE_URL and a vk-… key in GEMINI_API_KEY (GEMINI_CLI_TRUST_WORKSPACE=true: its
// folder-trust prompt would otherwise stop a headless run). Checks that it answers
// (venym/dev-echo), that a shell tool loop completes (venym/dev-qwen: the development engine calls
// run_shell_command with `echo hi`, Gemini CLI runs it and sends the result back, the engine
// answers "Tool said: …" with it), that a wrong key ends within 10 s with the gateway's message, and that
// an empty balance ends with the gateway's balance message. Its helper calls name Gemini models:
// the catalog's `aliases` sends them to venym/dev-echo.
//
//   node scripts/check-gemini-cli.mjs                        starts the engine and the gateway itself
//                                                            (ENGINE_PORT, default 8881; PORT, default 8880)
//   node scripts/check-gemini-cli.mjs --url http://localhost:8787 --key vk-…   uses a running `npm start`
//
// It also checks Gemini CLI's own default model (no -m: a Gemini name, served through the catalog's
// "gemini-*" alias) and the @google/genai SDK (a devDependency; GENAI_SDK=<an install's package
// directory> for another): generateContent, generateContentStream with a function call, countTokens.
//
// Gemini CLI is not a dependency of this repository: `npm i --prefix ~/tools/gemini @google/gemini-cli`,
// then GEMINI_BIN=~/tools/gemini/node_modules/.bin/gemini (default: `gemini` on PATH). It runs with a
// throwaway HOME, so your own Gemini CLI settings are untouched.
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { checkGateway, runCli } from "./check-stack.mjs";

const { values: args } = parseArgs({ options: { url: { type: "string" }, key: { type: "string" } } });
const GEMINI = process.env.GEMINI_BIN ?? "gemini";

function catalog(engineUrl) {
	const model = (id, scenario) => ({
		id,
		engine_model: id.replace("venym/", ""),
		nodes: [`${engineUrl}${scenario ? `/s/${scenario}` : ""}/v1`],
		max_output_tokens: 4096,
		context_length: 200_000,
		pricing: { input_usd_per_mtok: 0.3, output_usd_per_mtok: 1.2 },
		capabilities: ["tools", "reasoning"],
	});
	return {
		// The shell tool's scenario is Qwen Code's: Gemini CLI's shell tool has the same name.
		models: [model("venym/dev-echo", null), model("venym/dev-qwen", "qwen-loop")],
		// Gemini CLI names a new Gemini model every few releases (0.61: gemini-3.1-pro-preview,
		// gemini-3.5-flash-lite): one prefix alias covers them all.
		aliases: { "gemini-*": "venym/dev-echo" },
	};
}

/** Runs `gemini -p`; resolves with its output, rejects on a non-zero exit or the timeout. */
function gemini(gw, home, key, cliArgs, timeoutMs) {
	const env = {
		...process.env,
		HOME: home,
		GOOGLE_GEMINI_BASE_URL: gw.url,
		GEMINI_API_KEY: key,
		GEMINI_CLI_TRUST_WORKSPACE: "true",
	};
	return runCli({ bin: GEMINI, binEnv: "GEMINI_BIN", args: cliArgs, env, cwd: home, timeoutMs });
}

/**
 * A pass-through proxy that notes when the first request arrived: a run is timed from its request,
 * not from the start of a CLI that can take many seconds to start on a busy machine.
 */
async function timingProxy(target) {
	const times = [];
	const server = createServer((req, res) => {
		times.push(Date.now());
		const chunks = [];
		req.on("data", (c) => chunks.push(c));
		req.on("end", async () => {
			const headers = Object.fromEntries(Object.entries(req.headers).filter(([k, v]) => k !== "host" && typeof v === "string"));
			try {
				const body = chunks.length ? Buffer.concat(chunks) : undefined;
				const answer = await fetch(`${target}${req.url}`, { method: req.method, headers, body });
				const out = [...answer.headers].filter(([k]) => k !== "content-encoding" && k !== "content-length");
				res.writeHead(answer.status, Object.fromEntries(out));
				res.end(Buffer.from(await answer.arrayBuffer()));
			} catch {
				res.destroy();
			}
		});
	});
	await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
	return { url: `http://127.0.0.1:${server.address().port}`, times, close: () => server.close() };
}

/** A run that must fail: its output, and how long it took from its first request; never a rejection. */
async function failing(gw, home, key, cliArgs) {
	const proxy = await timingProxy(gw.url);
	try {
		const output = await gemini({ url: proxy.url }, home, key, cliArgs, 60_000).then(
			(out) => `(exited 0) ${out}`,
			(err) => err.message,
		);
		return { output, ms: Date.now() - (proxy.times[0] ?? Number.NaN) };
	} finally {
		proxy.close();
	}
}

/** The @google/genai SDK against the gateway (GENAI_SDK), as its README uses it. */
async function sdkChecks(gw) {
	const { GoogleGenAI } = await import(
		process.env.GENAI_SDK ? pathToFileURL(join(process.env.GENAI_SDK, "dist/node/index.mjs")).href : "@google/genai"
	);
	const ai = new GoogleGenAI({ apiKey: gw.key, httpOptions: { baseUrl: gw.url } });
	const one = await ai.models.generateContent({ model: "venym/dev-echo", contents: "Hello from the SDK" });
	const tools = [{ functionDeclarations: [{ name: "run_shell_command", parametersJsonSchema: { type: "object" } }] }];
	const calls = [];
	let finish;
	for await (const chunk of await ai.models.generateContentStream({
		model: "venym/dev-qwen",
		contents: "Run echo hi",
		config: { tools },
	})) {
		calls.push(...(chunk.functionCalls ?? []));
		finish = chunk.candidates?.[0]?.finishReason ?? finish;
	}
	const counted = await ai.models.countTokens({ model: "venym/dev-echo", contents: "count these words" });
	return [
		check("SDK generateContent", one.text ?? "", "Echo: Hello from the SDK"),
		check(
			"SDK generateContentStream with a function call",
			JSON.stringify({ calls, finish }),
			'"command":"echo hi"',
			calls.length === 1,
		),
		check("SDK countTokens", JSON.stringify(counted), "totalTokens", counted.totalTokens > 0),
	].every(Boolean);
}

function check(name, output, expected, extra = true) {
	const ok = output.includes(expected) && extra;
	console.log(`${ok ? "ok  " : "FAIL"} ${name}\n     ${output.split("\n").join("\n     ")}`);
	return ok;
}

async function emptyKey(gw) {
	const admin = process.env.ADMIN_TOKEN;
	if (!gw.adminToken && !admin) return null;
	const res = await fetch(`${gw.url}/admin/keys`, {
		method: "POST",
		headers: { authorization: `Bearer ${gw.adminToken ?? admin}`, "content-type": "application/json" },
		body: JSON.stringify({ name: "gemini-cli check: empty", balance_usd: 0 }),
	});
	return res.status === 201 ? (await res.json()).key : null;
}

const gw = await checkGateway({ ...args, catalog, enginePort: 8881, gatewayPort: 8880, name: "gemini-cli check" });
const home = await mkdtemp(join(tmpdir(), "venym-gemini-home-"));
// Gemini CLI 0.61 takes GOOGLE_GEMINI_BASE_URL for its `gateway` auth type, which its own check then
// refuses ("Invalid auth method selected."): the API-key type, chosen in settings, uses the same URL.
await mkdir(join(home, ".gemini"));
await writeFile(
	join(home, ".gemini", "settings.json"),
	JSON.stringify({ security: { auth: { selectedType: "gemini-api-key" } } }),
);
let passed = false;
try {
	console.log(`Gemini CLI (${GEMINI}) against ${gw.url}`);
	const answer = await gemini(gw, home, gw.key, ["-p", "Hello from the check", "-m", "venym/dev-echo"]);
	const loop = await gemini(gw, home, gw.key, [
		"-p",
		"Run echo hi in the shell and tell me what it printed",
		"-m",
		"venym/dev-qwen",
		"--yolo",
	]);
	const own = await gemini(gw, home, gw.key, ["-p", "Hello on your own model"]);
	const wrong = await failing(gw, home, "vk-wrong-key", ["-p", "hi", "-m", "venym/dev-echo"]);
	const answered = check("answers a prompt", answer, "Hello from the check");
	const aliased = check("answers on its own default model (a Gemini name, aliased)", own, "Hello on your own model");
	// Gemini CLI hands the command's output back wrapped (`<untrusted_context> Output: hi …`).
	const looped = check("completes a run_shell_command tool loop", loop, "Tool said: ", /Output: hi\b/.test(loop));
	const refused = check(
		`a wrong key ends within 10 s of its request (${wrong.ms} ms)`,
		wrong.output,
		"Incorrect API key",
		wrong.ms < 10_000,
	);
	let broke = true;
	const empty = await emptyKey(gw);
	if (empty) {
		const poor = await failing(gw, home, empty, ["-p", "hi", "-m", "venym/dev-echo"]);
		broke = check(
			`an empty balance ends with the gateway's message within 10 s of its request (${poor.ms} ms)`,
			poor.output,
			"Insufficient balance",
			poor.ms < 10_000 && poor.output.includes("RESOURCE_EXHAUSTED"),
		);
	} else console.log("skip an empty balance: set ADMIN_TOKEN with --url");
	const sdk = await sdkChecks(gw);
	passed = answered && aliased && looped && refused && broke && sdk;
} finally {
	await gw.close();
	await rm(home, { recursive: true, force: true });
}
process.exit(passed ? 0 : 1);
