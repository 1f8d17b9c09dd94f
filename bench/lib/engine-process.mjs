// The fake engine for the bench, in its own process (forked by bench/run.mjs).
// It is dev/engine.mjs unchanged, plus two path prefixes: `/p/<ms>/…` paces streamed chunks
// by <ms> exactly like the `x-engine-delay-ms` header does. The gateway builds its own
// engine headers, so a path is the only way a paced node can be named in GATEWAY_CONFIG.
// `/n/<label>/…` is dropped: several distinct node URLs for one engine (routing variants).
// The prefixes are applied in the same request listener: no extra hop for any target.
import http from "node:http";
import { startEngine } from "../../dev/engine.mjs";

const PACED = /^\/p\/(\d+)(\/.*)$/;
const NAMED = /^\/n\/[^/]+(\/.*)$/;

let server;
const createServer = http.createServer;
http.createServer = (...args) => {
	server = createServer(...args);
	return server;
};
const engine = await startEngine({ port: Number(process.env.BENCH_ENGINE_PORT ?? 0) });
http.createServer = createServer;

const [listener] = server.listeners("request");
server.removeAllListeners("request");
server.on("request", (req, res) => {
	const n = NAMED.exec(req.url ?? "");
	if (n) req.url = n[1];
	const m = PACED.exec(req.url ?? "");
	if (m) {
		req.url = m[2];
		req.headers["x-engine-delay-ms"] = m[1];
	}
	listener(req, res);
});
// A long run would otherwise keep every request (headers, body) in the engine's record.
server.keepAliveTimeout = 30_000;
setInterval(() => engine.reset(), 1000).unref();

let served = 0;
server.on("request", () => {
	served++;
});

process.on("message", (msg) => {
	if (msg?.type === "stats") process.send?.({ type: "stats", served, cpu: process.cpuUsage() });
	if (msg?.type === "stop") engine.close().then(() => process.exit(0));
});
process.on("disconnect", () => process.exit(0));
process.send?.({ type: "ready", url: engine.url, pid: process.pid });
