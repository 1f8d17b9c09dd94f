// llama.cpp's `llama-server` for the engine tests: started in a process group of its own (so a
// kill stops it whole), on a free port, behind a transparent recording proxy that keeps what the
// engine itself reported for each answer (`usage`, `timings`), so a test can hold the gateway's
// bill against the engine's own numbers.
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createNetServer } from "node:net";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** `LLAMA_SERVER`, else `../shared/engines/llama-server` from the repository root; the model beside it. */
export function llamaPaths(): { server: string; model: string } | { missing: string } {
	const server = resolve(ROOT, process.env.LLAMA_SERVER ?? "../shared/engines/llama-server");
	const model = join(dirname(server), "tiny-qwen3.gguf");
	if (!existsSync(server)) return { missing: server };
	if (!existsSync(model)) return { missing: model };
	return { server, model };
}

export function freePort(): Promise<number> {
	return new Promise((res, rej) => {
		const s = createNetServer();
		s.unref();
		s.once("error", rej);
		s.listen(0, "127.0.0.1", () => {
			const a = s.address();
			const port = typeof a === "object" && a ? a.port : 0;
			s.close(() => (port ? res(port) : rej(new Error("no free port"))));
		});
	});
}

/** One answer as the engine sent it: the request body, and the `usage` / `timings` it reported. */
export interface EngineAnswer {
	path: string;
	body: Record<string, unknown>;
	usage?: Record<string, number>;
	timings?: { prompt_n: number; cache_n: number; predicted_n: number };
	status: number;
}

export interface LlamaServer {
	/** The proxy's base (what the gateway's node URL points at, plus `/v1`). */
	url: string;
	/** The engine's own port, bypassing the proxy. */
	directUrl: string;
	pid: number;
	answers: EngineAnswer[];
	/** SIGKILL to the whole process group (the test's "node dies"). */
	kill(): void;
	close(): Promise<void>;
}

async function waitHealthy(url: string, child: ChildProcess, log: () => string): Promise<void> {
	const deadline = Date.now() + 60_000;
	while (Date.now() < deadline) {
		if (child.exitCode !== null) throw new Error(`llama-server exited with ${child.exitCode}:\n${log()}`);
		const ok = await fetch(`${url}/health`)
			.then((r) => r.ok)
			.catch(() => false);
		if (ok) return;
		await new Promise((r) => setTimeout(r, 100));
	}
	throw new Error(`llama-server did not become healthy at ${url}:\n${log()}`);
}

/** What the last `usage` and `timings` objects in an answer (SSE or JSON) said. */
function reported(text: string): Pick<EngineAnswer, "usage" | "timings"> {
	const out: Pick<EngineAnswer, "usage" | "timings"> = {};
	const bodies = text.includes("data:")
		? text.split("\n").flatMap((l) => (l.startsWith("data:") ? [l.slice(5).trim()] : []))
		: [text];
	for (const b of bodies) {
		try {
			const j = JSON.parse(b) as Record<string, unknown>;
			if (j.usage) out.usage = j.usage as EngineAnswer["usage"];
			if (j.timings) out.timings = j.timings as EngineAnswer["timings"];
		} catch {
			// [DONE] or a partial line
		}
	}
	return out;
}

/**
 * The test's own routes on the proxy (tests run in other processes than this setup):
 * `GET /_test/answers?contains=…` the recorded answers whose request contains the text,
 * `POST /_test/kill` the engine's whole process group.
 */
function control(req: IncomingMessage, res: ServerResponse, answers: EngineAnswer[], kill: () => void): boolean {
	const url = new URL(req.url ?? "/", "http://x");
	if (!url.pathname.startsWith("/_test/")) return false;
	if (url.pathname === "/_test/kill") {
		kill();
		res.writeHead(204).end();
		return true;
	}
	const contains = url.searchParams.get("contains") ?? "";
	const found = answers.filter((a) => JSON.stringify(a.body).includes(contains));
	res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(found));
	return true;
}

function proxy(target: () => string, answers: EngineAnswer[], kill: () => void): Server {
	return createServer(async (req: IncomingMessage, res: ServerResponse) => {
		if (control(req, res, answers, kill)) return;
		const chunks: Buffer[] = [];
		for await (const c of req) chunks.push(c as Buffer);
		const raw = Buffer.concat(chunks);
		const headers: Record<string, string> = {};
		for (const [k, v] of Object.entries(req.headers))
			if (typeof v === "string" && !["host", "connection", "content-length"].includes(k)) headers[k] = v;
		const abort = new AbortController();
		res.on("close", () => abort.abort());
		let upstream: Response;
		try {
			upstream = await fetch(`${target()}${req.url}`, {
				method: req.method,
				headers,
				body: raw.length ? raw : undefined,
				signal: abort.signal,
			});
		} catch {
			res.destroy();
			return;
		}
		// Hop-by-hop and framing headers are this connection's own (Node frames the body again).
		const out = Object.fromEntries(upstream.headers);
		for (const h of ["connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"]) delete out[h];
		res.writeHead(upstream.status, out);
		let text = "";
		const record = req.method === "POST" && /\/v1\/(chat\/)?completions|\/v1\/embeddings/.test(req.url ?? "");
		try {
			const reader = upstream.body?.getReader();
			for (;;) {
				const next = await reader?.read();
				if (!next || next.done) break;
				if (record && text.length < 4_000_000) text += Buffer.from(next.value).toString("utf8");
				res.write(next.value);
			}
			res.end();
		} catch {
			// The engine died mid-answer: the gateway sees the connection reset, as it would without the proxy.
			res.destroy();
		}
		if (record) {
			let body: Record<string, unknown> = {};
			try {
				body = JSON.parse(raw.toString("utf8"));
			} catch {}
			answers.push({ path: req.url ?? "", body, status: upstream.status, ...reported(text) });
		}
	});
}

/** Starts `llama-server` with the test flags, `extra` added (`--embeddings`). */
export async function startLlama(paths: { server: string; model: string }, extra: string[] = []): Promise<LlamaServer> {
	const port = await freePort();
	const args = ["-m", paths.model, "--host", "127.0.0.1", "--port", String(port), "--jinja", "-c", "4096"];
	args.push("--slots", "--metrics", "-t", "1", "--alias", "tiny-qwen3", ...extra);
	const child = spawn(paths.server, args, { detached: true, stdio: ["ignore", "pipe", "pipe"] });
	let log = "";
	const collect = (d: Buffer) => {
		log = (log + d.toString("utf8")).slice(-20_000);
	};
	child.stdout?.on("data", collect);
	child.stderr?.on("data", collect);
	const pid = child.pid as number;
	const kill = () => {
		try {
			process.kill(-pid, "SIGKILL");
		} catch {
			// already gone
		}
	};
	const directUrl = `http://127.0.0.1:${port}`;
	try {
		await waitHealthy(directUrl, child, () => log);
	} catch (err) {
		kill();
		throw err;
	}
	const answers: EngineAnswer[] = [];
	const server = proxy(() => directUrl, answers, kill);
	await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
	const address = server.address();
	const url = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`;
	return {
		url,
		directUrl,
		pid,
		answers,
		kill,
		close: async () => {
			kill();
			server.closeAllConnections();
			await new Promise((r) => server.close(() => r(undefined)));
		},
	};
}
