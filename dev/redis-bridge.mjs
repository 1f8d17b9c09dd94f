#!/usr/bin/env node
// An Upstash-REST-compatible HTTP bridge in front of a real redis-server, so the gateway's
// @upstash/redis path runs locally and in tests without Upstash. It speaks what the client
// sends: `POST /` with a JSON command array, `/pipeline` and `/multi-exec` with arrays of
// them, path-style `/set/foo/bar`, Bearer or `?_token=` auth, and `Upstash-Encoding: base64`.
//
//   node dev/redis-bridge.mjs --spawn                      # own redis-server on a unix socket
//   node dev/redis-bridge.mjs --redis 127.0.0.1:6379 --port 8079 --token secret
//
// then UPSTASH_REDIS_REST_URL=http://127.0.0.1:8079 UPSTASH_REDIS_REST_TOKEN=secret (.dev.vars).
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:http";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

// ---- RESP2 client: one connection, commands pipelined in order ------------------------------

class RedisError extends Error {}
/** A RESP simple string ("+OK"): kept apart from bulk strings only to mirror Upstash's encoding. */
class Simple {
	constructor(value) {
		this.value = value;
	}
}

function encodeCommand(args) {
	const parts = [Buffer.from(`*${args.length}\r\n`)];
	for (const a of args) {
		const b = Buffer.from(String(a));
		parts.push(Buffer.from(`$${b.length}\r\n`), b, Buffer.from("\r\n"));
	}
	return Buffer.concat(parts);
}

/** Parses one RESP value at `offset`; returns [value, nextOffset] or null when incomplete. */
function parseReply(buf, offset) {
	const eol = buf.indexOf("\r\n", offset);
	if (eol < 0) return null;
	const type = String.fromCharCode(buf[offset]);
	const line = buf.toString("utf8", offset + 1, eol);
	const next = eol + 2;
	switch (type) {
		case "+":
			return [new Simple(line), next];
		case "-":
			return [new RedisError(line), next];
		case ":":
			return [Number(line), next];
		case "$": {
			const len = Number(line);
			if (len < 0) return [null, next];
			if (buf.length < next + len + 2) return null;
			return [buf.toString("utf8", next, next + len), next + len + 2];
		}
		case "*": {
			const n = Number(line);
			if (n < 0) return [null, next];
			const items = [];
			let at = next;
			for (let i = 0; i < n; i++) {
				const r = parseReply(buf, at);
				if (!r) return null;
				items.push(r[0]);
				at = r[1];
			}
			return [items, at];
		}
		default:
			throw new Error(`unexpected RESP type ${JSON.stringify(type)}`);
	}
}

export function connectRedis(target) {
	const socket = connect(target);
	const pending = [];
	let buf = Buffer.alloc(0);
	let failure = null;
	socket.on("data", (chunk) => {
		buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
		let offset = 0;
		for (;;) {
			const r = parseReply(buf, offset);
			if (!r) break;
			offset = r[1];
			pending.shift()?.resolve(r[0]);
		}
		buf = buf.subarray(offset);
	});
	const failAll = (err) => {
		failure = err;
		for (const p of pending.splice(0)) p.reject(err);
	};
	socket.on("error", failAll);
	socket.on("close", () => failAll(new Error("redis connection closed")));
	const ready = once(socket, "connect");
	return {
		ready,
		/** Sends several commands in one write (so nothing interleaves) and resolves with every reply. */
		send(commands) {
			if (failure) return Promise.reject(failure);
			const replies = commands.map(
				() =>
					new Promise((resolve, reject) => {
						pending.push({ resolve, reject });
					}),
			);
			socket.write(Buffer.concat(commands.map(encodeCommand)));
			return Promise.all(replies);
		},
		close() {
			socket.end();
			socket.destroy();
		},
	};
}

// ---- Upstash REST semantics ----------------------------------------------------------------

/** A reply as Upstash's JSON shows it; with base64 encoding every string except "OK" is base64. */
function toJson(value, base64) {
	if (value instanceof Simple) return base64 && value.value !== "OK" ? Buffer.from(value.value).toString("base64") : value.value;
	if (typeof value === "string") return base64 ? Buffer.from(value).toString("base64") : value;
	if (Array.isArray(value)) return value.map((v) => (v instanceof RedisError ? null : toJson(v, base64)));
	return value;
}

function entry(value, base64) {
	return value instanceof RedisError ? { error: value.message } : { result: toJson(value, base64) };
}

function isCommand(c) {
	return Array.isArray(c) && c.length > 0 && c.every((a) => ["string", "number", "boolean"].includes(typeof a));
}

async function readBody(req) {
	const chunks = [];
	for await (const c of req) chunks.push(c);
	return Buffer.concat(chunks).toString("utf8");
}

function send(res, status, body) {
	res.writeHead(status, { "content-type": "application/json" });
	res.end(JSON.stringify(body));
}

export async function startRedisBridge({ redis, port = 0, host = "127.0.0.1", token = randomBytes(16).toString("hex") } = {}) {
	if (!redis) throw new Error("startRedisBridge: `redis` ({ path } or { host, port }) is required");
	const client = connectRedis(redis);
	await client.ready;

	const server = createServer(async (req, res) => {
		try {
			const url = new URL(req.url ?? "/", "http://bridge");
			const auth = req.headers.authorization ?? "";
			const given = auth.startsWith("Bearer ") ? auth.slice(7) : url.searchParams.get("_token");
			if (given !== token) return send(res, 401, { error: "Unauthorized" });
			const base64 = String(req.headers["upstash-encoding"] ?? "").toLowerCase() === "base64";
			const raw = req.method === "POST" ? await readBody(req) : "";
			const path = url.pathname.replace(/\/+$/, "");

			if (path === "/pipeline" || path === "/multi-exec") {
				const commands = raw ? JSON.parse(raw) : null;
				if (!Array.isArray(commands) || !commands.length || !commands.every(isCommand)) {
					return send(res, 400, { error: "ERR expected a JSON array of commands" });
				}
				if (path === "/pipeline") {
					const replies = await client.send(commands);
					return send(
						res,
						200,
						replies.map((r) => entry(r, base64)),
					);
				}
				const replies = await client.send([["MULTI"], ...commands, ["EXEC"]]);
				const queued = replies.slice(1, -1).find((r) => r instanceof RedisError);
				const exec = replies[replies.length - 1];
				if (queued) return send(res, 400, { error: queued.message });
				if (exec instanceof RedisError) return send(res, 400, { error: exec.message });
				if (exec === null) return send(res, 400, { error: "ERR transaction aborted" });
				return send(
					res,
					200,
					exec.map((r) => entry(r, base64)),
				);
			}

			let command;
			if (path === "" && req.method === "POST") {
				command = raw ? JSON.parse(raw) : null;
			} else {
				command = path.split("/").slice(1).map(decodeURIComponent);
				// Path style: a POST body is the last argument (`POST /set/foo` with body `bar`).
				if (raw) command.push(raw);
			}
			if (!isCommand(command)) return send(res, 400, { error: "ERR expected a command" });
			const [reply] = await client.send([command]);
			if (reply instanceof RedisError) return send(res, 400, { error: reply.message });
			return send(res, 200, { result: toJson(reply, base64) });
		} catch (err) {
			send(res, err instanceof SyntaxError ? 400 : 500, { error: `ERR ${err.message}` });
		}
	});
	server.listen(port, host);
	await once(server, "listening");
	const address = server.address();
	const actualPort = typeof address === "object" && address ? address.port : port;
	return {
		url: `http://${host}:${actualPort}`,
		token,
		/** Runs a command directly (for tests): resolves with the raw reply, throws a Redis error. */
		async command(...args) {
			const [reply] = await client.send([args]);
			if (reply instanceof RedisError) throw reply;
			return reply instanceof Simple ? reply.value : reply;
		},
		async close() {
			server.closeAllConnections?.();
			await new Promise((r) => server.close(() => r()));
			client.close();
		},
	};
}

/** Starts a throwaway redis-server on a unix socket in a temporary folder (no TCP port, no persistence). */
export async function startRedisServer({ bin = "redis-server", timeoutMs = 10_000 } = {}) {
	const dir = await mkdtemp(join(tmpdir(), "venym-redis-"));
	const socket = join(dir, "redis.sock");
	const child = spawn(
		bin,
		["--port", "0", "--unixsocket", socket, "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir", dir],
		{ stdio: ["ignore", "pipe", "pipe"] },
	);
	let log = "";
	child.stdout.on("data", (d) => {
		log += d;
	});
	child.stderr.on("data", (d) => {
		log += d;
	});
	const spawnError = new Promise((_, reject) => child.once("error", reject));
	const start = Date.now();
	for (;;) {
		if (child.exitCode !== null) throw new Error(`redis-server exited with ${child.exitCode}:\n${log}`);
		if (/Ready to accept connections/i.test(log)) break;
		if (Date.now() - start > timeoutMs) {
			child.kill("SIGKILL");
			throw new Error(`redis-server did not start within ${timeoutMs} ms:\n${log}`);
		}
		await Promise.race([new Promise((r) => setTimeout(r, 50)), spawnError]);
	}
	return {
		socket,
		async close() {
			if (child.exitCode === null) {
				child.kill("SIGTERM");
				await once(child, "exit");
			}
			await rm(dir, { recursive: true, force: true });
		},
	};
}

// ---- CLI ----------------------------------------------------------------------------------

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
	const args = process.argv.slice(2);
	const opt = (name) => {
		const i = args.indexOf(`--${name}`);
		return i >= 0 ? args[i + 1] : undefined;
	};
	const own = args.includes("--spawn") ? await startRedisServer() : null;
	let redis = { path: own?.socket };
	if (!own) {
		const [h, p] = (opt("redis") ?? "127.0.0.1:6379").split(":");
		redis = opt("socket") ? { path: opt("socket") } : { host: h, port: Number(p ?? 6379) };
	}
	const bridge = await startRedisBridge({ redis, port: Number(opt("port") ?? 8079), token: opt("token") });
	console.log(`UPSTASH_REDIS_REST_URL=${bridge.url}`);
	console.log(`UPSTASH_REDIS_REST_TOKEN=${bridge.token}`);
	const stop = async () => {
		await bridge.close();
		await own?.close();
		process.exit(0);
	};
	process.on("SIGINT", stop);
	process.on("SIGTERM", stop);
}
