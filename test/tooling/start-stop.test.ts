// `npm start` (dev/start.mjs) and dev/gateway-process.mjs leave nothing running once stopped:
// not npm, its shell, the gateway's host (dev/gateway-host.mjs), workerd or the watchdog, and no
// port bound, within 5 s, whatever stopped it: Ctrl-C (SIGINT), SIGTERM or SIGHUP to the start
// script or to npm's pid alone (npm passes SIGINT and SIGTERM on to the shell it runs the script
// in: `exec` makes that shell the start script), SIGKILL of npm (the start script notices its
// parent is gone) or of
// the start script (the watchdog), the gateway's workerd killed, or close(). And `npm start` shows
// the worker's warnings and errors on stderr. Each case starts a real gateway (ports 8862-8868 and 8874-8889).
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { startGateway } from "../../dev/gateway-process.mjs";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
/** Starting the gateway on a busy 2-core box takes a while; stopping must not (issue 35). */
const START_MS = 240_000;
const STOP_MS = 5_000;

interface Proc {
	pid: number;
	ppid: number;
	pgid: number;
	state: string;
	cmd: string;
}

/** Every process on the machine, from /proc. */
async function processes(): Promise<Proc[]> {
	const out: Proc[] = [];
	for (const entry of await readdir("/proc")) {
		if (!/^\d+$/.test(entry)) continue;
		try {
			const stat = await readFile(`/proc/${entry}/stat`, "utf8");
			const cmd = (await readFile(`/proc/${entry}/cmdline`, "utf8")).replaceAll("\0", " ");
			const [state = "", ppid, pgid] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
			out.push({ pid: Number(entry), ppid: Number(ppid), pgid: Number(pgid), state, cmd });
		} catch {
			// exited while we looked
		}
	}
	return out;
}

/** `root`'s children, their children, and so on. */
async function descendants(root: number): Promise<Proc[]> {
	const all = await processes();
	const found: Proc[] = [];
	let frontier = [root];
	while (frontier.length) {
		const next = all.filter((p) => frontier.includes(p.ppid));
		found.push(...next);
		frontier = next.map((p) => p.pid);
	}
	return found;
}

/** Those of `procs` still running (a zombie is not running). */
async function stillRunning(procs: Proc[]): Promise<Proc[]> {
	const live = new Map((await processes()).map((p) => [p.pid, p]));
	return procs.filter((p) => {
		const now = live.get(p.pid);
		return now !== undefined && now.state !== "Z" && now.cmd === p.cmd;
	});
}

function portFree(port: number): Promise<boolean> {
	return new Promise((resolve) => {
		const server = createServer();
		server.once("error", () => resolve(false));
		server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
	});
}

async function waitUntil(check: () => Promise<boolean> | boolean, timeoutMs: number, what: () => string): Promise<void> {
	const deadline = Date.now() + timeoutMs;
	while (!(await check())) {
		if (Date.now() > deadline) throw new Error(`${what()} (after ${timeoutMs} ms)`);
		await new Promise((resolve) => setTimeout(resolve, 100));
	}
}

/** Waits until none of `procs` runs and every port is free. */
async function expectAllGone(procs: Proc[], ports: number[]): Promise<void> {
	let left: Proc[] = [];
	let bound: number[] = [];
	await waitUntil(
		async () => {
			left = await stillRunning(procs);
			bound = [];
			for (const port of ports) if (!(await portFree(port))) bound.push(port);
			return left.length === 0 && bound.length === 0;
		},
		STOP_MS,
		() => `still running: ${left.map((p) => `${p.pid} ${p.cmd.slice(0, 80)}`).join("; ")}; ports bound: ${bound.join(", ")}`,
	);
}

const cleanups: (() => Promise<void>)[] = [];
/** Processes the tests saw running (for the cleanup after a failed test). */
const seen: Proc[] = [];
afterEach(async () => {
	for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function tempDir(): Promise<string> {
	const dir = await mkdtemp(join(tmpdir(), "venym-start-"));
	cleanups.push(() => rm(dir, { recursive: true, force: true }));
	return dir;
}

interface DevRun {
	child: ChildProcess;
	stdout: () => string;
	stderr: () => string;
	exited: Promise<number | null>;
}

/**
 * `npm start -- --nodes 2` on other ports, with its state in a folder of its own: `node
 * dev/start.mjs` itself, or (`viaNpm`) through npm as a developer runs it.
 */
async function startDev(gatewayPort: number, enginePort: number, { viaNpm = false } = {}): Promise<DevRun> {
	const persistTo = await tempDir();
	const args = ["--nodes", "2", "--persist-to", persistTo];
	const [command, argv] = viaNpm ? ["npm", ["start", "--", ...args]] : [process.execPath, ["dev/start.mjs", ...args]];
	const child = spawn(command, argv, {
		cwd: ROOT,
		env: { ...process.env, PORT: String(gatewayPort), ENGINE_PORT: String(enginePort) },
		stdio: ["ignore", "pipe", "pipe"],
	});
	let out = "";
	let err = "";
	child.stdout?.on("data", (d) => {
		out += d;
	});
	child.stderr?.on("data", (d) => {
		err += d;
	});
	const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
	// Whatever a failed test left: every process group seen under it (treeOf), and the tree now.
	cleanups.push(async () => {
		const tree = [...seen, ...(await descendants(child.pid ?? 0))];
		child.kill("SIGKILL");
		// npm start itself runs in this process's group: never signal that one.
		const own = (await processes()).find((p) => p.pid === process.pid)?.pgid;
		for (const pgid of new Set(tree.map((p) => p.pgid))) {
			if (pgid === own || pgid <= 1) continue;
			try {
				process.kill(-pgid, "SIGKILL");
			} catch {}
		}
	});
	await waitUntil(
		() => out.includes("Engine fleet:") || child.exitCode !== null,
		START_MS,
		() => `npm start did not come up:\n${out}\n${err}`,
	);
	expect(child.exitCode, err).toBeNull();
	return { child, stdout: () => out, stderr: () => err, exited };
}

/** What `npm start` runs (and npm itself), with the gateway's workerd among it (else the check below proves nothing). */
async function treeOf(run: DevRun): Promise<Proc[]> {
	const self = (await processes()).filter((p) => p.pid === run.child.pid);
	const tree = [...self, ...(await descendants(run.child.pid ?? 0))];
	seen.push(...tree);
	expect(tree.some((p) => p.cmd.includes("workerd"))).toBe(true);
	expect(tree.some((p) => p.cmd.includes("group-watchdog.mjs"))).toBe(true);
	return tree;
}

describe.skipIf(!existsSync("/proc"))("stopping the local gateway", () => {
	it(
		"npm start shows the worker's warnings on stderr, and SIGTERM stops every process it started",
		async () => {
			const run = await startDev(8862, 8863);
			const key = /API key \(balance \$[\d.]+\): (vk-\S+)/.exec(run.stdout())?.[1];
			expect(key).toBeDefined();
			// Both nodes fail mid-stream: the gateway logs a warning (console.warn, written to stderr).
			for (const node of ["node-1", "node-2"]) {
				const res = await fetch(`http://127.0.0.1:8863/_engine/nodes/${node}`, {
					method: "POST",
					body: JSON.stringify({ scenario: "midstream" }),
				});
				expect(res.status).toBe(200);
			}
			const res = await fetch("http://127.0.0.1:8862/v1/chat/completions", {
				method: "POST",
				headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
				body: JSON.stringify({ model: "venym/dev-echo", messages: [{ role: "user", content: "hi" }], stream: true }),
			});
			expect(res.status).toBe(200);
			await res.text();
			await waitUntil(
				() => run.stderr().includes('"engine failed mid-stream'),
				20_000,
				() => `no warning on npm start's stderr:\n${run.stderr()}`,
			);
			// The request's own JSON line still goes to stdout.
			await waitUntil(
				() => /\{"message":"request".*"lane":"chat"/.test(run.stdout()),
				20_000,
				() => `no request log line on stdout:\n${run.stdout()}`,
			);

			const tree = await treeOf(run);
			run.child.kill("SIGTERM");
			expect(await run.exited).toBe(0);
			await expectAllGone(tree, [8862, 8863]);
		},
		START_MS + STOP_MS * 2 + 60_000,
	);

	it(
		"Ctrl-C (SIGINT) stops every process npm start started",
		async () => {
			const run = await startDev(8864, 8865);
			const tree = await treeOf(run);
			run.child.kill("SIGINT");
			expect(await run.exited).toBe(0);
			await expectAllGone(tree, [8864, 8865]);
		},
		START_MS + STOP_MS * 2,
	);

	it(
		"npm start killed outright (SIGKILL): its watchdog stops the gateway's host and workerd",
		async () => {
			const run = await startDev(8866, 8867);
			const tree = await treeOf(run);
			run.child.kill("SIGKILL");
			await run.exited;
			await expectAllGone(tree, [8866, 8867]);
		},
		START_MS + STOP_MS * 2,
	);

	it(
		"SIGHUP to the start script (a closed terminal) stops every process it started",
		async () => {
			const run = await startDev(8874, 8875);
			const tree = await treeOf(run);
			run.child.kill("SIGHUP");
			expect(await run.exited).toBe(0);
			await expectAllGone(tree, [8874, 8875]);
		},
		START_MS + STOP_MS * 2,
	);

	// A signal to npm's pid alone (`kill <pid>`, a process manager), not to its process group.
	it.each([
		["SIGTERM", 8876],
		["SIGINT", 8878],
		["SIGHUP", 8880],
		["SIGKILL", 8882],
	] as const)(
		"%s to npm's pid alone stops every process npm start started within 5 s",
		async (signal, port) => {
			const run = await startDev(port, port + 1, { viaNpm: true });
			const tree = await treeOf(run);
			expect(tree.some((p) => p.cmd.includes("dev/start.mjs"))).toBe(true);
			run.child.kill(signal);
			await expectAllGone(tree, [port, port + 1]);
		},
		START_MS + STOP_MS * 2,
	);

	it(
		"the start script killed outright under npm: its watchdog stops the gateway, and npm exits",
		async () => {
			const run = await startDev(8884, 8885, { viaNpm: true });
			const tree = await treeOf(run);
			const script = tree.find((p) => p.cmd.includes("dev/start.mjs") && !p.cmd.startsWith("sh "));
			expect(script).toBeDefined();
			process.kill(script?.pid ?? 0, "SIGKILL");
			await expectAllGone(tree, [8884, 8885]);
		},
		START_MS + STOP_MS * 2,
	);

	it(
		"the gateway's workerd killed: npm start stops the rest and exits 1",
		async () => {
			const run = await startDev(8886, 8887);
			const tree = await treeOf(run);
			const workerd = tree.find((p) => p.cmd.includes("workerd"));
			process.kill(workerd?.pid ?? 0, "SIGKILL");
			expect(await run.exited).toBe(1);
			await expectAllGone(tree, [8886, 8887]);
		},
		START_MS + STOP_MS * 2,
	);

	it(
		"gateway-process close() resolves once no process of the gateway's group is left and the port is free",
		async () => {
			const gateway = await startGateway({ port: 8868, persistTo: await tempDir(), quiet: true, timeoutMs: START_MS });
			let closed = false;
			cleanups.push(async () => {
				if (!closed) await gateway.close();
			});
			const group = (await processes()).filter((p) => p.pgid === gateway.pgid);
			expect(group.some((p) => p.cmd.includes("workerd"))).toBe(true);
			const watchdogs = (await descendants(process.pid)).filter((p) => p.cmd.includes(`group-watchdog.mjs ${gateway.pgid}`));
			expect(watchdogs).toHaveLength(1);

			await gateway.close();
			closed = true;
			expect(await stillRunning(group)).toEqual([]);
			expect(await portFree(8868)).toBe(true);
			await expectAllGone(watchdogs, []);
		},
		START_MS + STOP_MS * 2,
	);
});
