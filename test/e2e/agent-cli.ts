// What the coding agents' e2e tests share (claude-code-cli, codex-cli, qwen-code-cli): finding the
// agent's binary (its environment variable, else PATH; the test is skipped without one) and running
// it with a timeout, timed. The agents are not dependencies of this repository.
import { spawn, spawnSync } from "node:child_process";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** The binary `envName` points at, else `name` on PATH; undefined when neither is there. */
export function agentBin(envName: string, name: string): string | undefined {
	const given = process.env[envName];
	if (given) return given;
	const found = spawnSync("which", [name], { encoding: "utf8" });
	return found.status === 0 && found.stdout.trim() ? found.stdout.trim() : undefined;
}

export interface AgentRun {
	code: number | null;
	output: string;
	ms: number;
}

/** Runs `bin args…` (stdin closed); resolves with its exit code, stdout and stderr together, and how long it took. */
export function runAgent(
	bin: string,
	args: string[],
	opts: { env: NodeJS.ProcessEnv; cwd?: string; timeoutMs?: number },
): Promise<AgentRun> {
	const started = Date.now();
	return new Promise((resolve) => {
		const child = spawn(bin, args, { env: opts.env, cwd: opts.cwd, stdio: ["ignore", "pipe", "pipe"] });
		let output = "";
		const take = (d: Buffer) => {
			output += d;
		};
		child.stdout.on("data", take);
		child.stderr.on("data", take);
		const timer = setTimeout(() => child.kill("SIGKILL"), opts.timeoutMs ?? 120_000);
		child.on("exit", (code) => {
			clearTimeout(timer);
			resolve({ code, output, ms: Date.now() - started });
		});
	});
}

/** A throwaway folder (an agent's HOME or work directory), so nobody's own settings are read or touched. */
export function scratchDir(prefix: string): Promise<string> {
	return mkdtemp(join(tmpdir(), prefix));
}

/** What a wrong key gets from the gateway (src/auth/authenticate.ts). */
export const WRONG_KEY_MESSAGE = "Incorrect API key provided.";
/** A well-formed key nobody holds. */
export const WRONG_KEY = `vk-${"0".repeat(48)}`;

export interface ProxiedRequest {
	at: number;
	method: string;
	path: string;
	status: number;
}

/**
 * A pass-through proxy in front of the gateway that notes each request's time and answer status, so a
 * test times an agent from its first request (a busy machine can take many seconds to start one).
 */
export async function recordingProxy(
	target: string,
): Promise<{ url: string; seen: ProxiedRequest[]; close: () => Promise<void> }> {
	const { createServer } = await import("node:http");
	const seen: ProxiedRequest[] = [];
	const server = createServer((req, res) => {
		const at = Date.now();
		const chunks: Buffer[] = [];
		req.on("data", (c: Buffer) => chunks.push(c));
		req.on("end", async () => {
			const headers = Object.fromEntries(
				Object.entries(req.headers).filter((e): e is [string, string] => typeof e[1] === "string" && e[0] !== "host"),
			);
			const body = chunks.length ? Buffer.concat(chunks) : undefined;
			try {
				const answer = await fetch(`${target}${req.url}`, { method: req.method, headers, body });
				seen.push({ at, method: req.method ?? "", path: req.url ?? "", status: answer.status });
				const out = Object.fromEntries([...answer.headers].filter(([k]) => k !== "content-encoding" && k !== "content-length"));
				res.writeHead(answer.status, out);
				const reader = answer.body?.getReader();
				for (let r = await reader?.read(); r && !r.done; r = await reader?.read()) res.write(r.value);
				res.end();
			} catch {
				res.destroy();
			}
		});
	});
	await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
	const address = server.address();
	const port = typeof address === "object" && address ? address.port : 0;
	return {
		url: `http://127.0.0.1:${port}`,
		seen,
		close: () =>
			new Promise((resolve) => {
				server.close(() => resolve());
				server.closeAllConnections();
			}),
	};
}
