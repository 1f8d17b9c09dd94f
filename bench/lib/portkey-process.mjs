// Portkey's open-source gateway (`@portkey-ai/gateway`, its Node server build), in its own
// process (forked by bench/lib/rig.mjs), so it is measured rather than quoted. It is started
// exactly as `npx @portkey-ai/gateway --headless` would start it, with two bench changes made
// from outside, before its module runs:
//   - port 0 (any free port), reported back over IPC with this process's pid (for /proc CPU);
//   - the HTTP server's keep-alive timeout raised from Node's 5 s to 30 s, as the engine's: the
//     load generator keeps connections open across phases, and a server closing an idle socket
//     while a request is being written on it would count as a Portkey error.
// Requests name the engine per request: `x-portkey-provider: openai` and
// `x-portkey-custom-host: <engine>/v1` (set by the rig as target headers).
import http from "node:http";
import { createRequire, syncBuiltinESMExports } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";

const require = createRequire(import.meta.url);
const pkgDir = path.dirname(require.resolve("@portkey-ai/gateway/package.json"));
const { version } = require("@portkey-ai/gateway/package.json");
const entry = path.join(pkgDir, require("@portkey-ai/gateway/package.json").bin ?? "build/start-server.js");

let server;
const createServer = http.createServer;
http.createServer = (...args) => {
	server = createServer(...args);
	server.keepAliveTimeout = 30_000;
	return server;
};
// @hono/node-server imports `createServer` by name: the ESM view of node:http must see the patch.
syncBuiltinESMExports();

process.argv = [process.argv[0], entry, "--port=0", "--headless"];
// Its start-up banner is a spinner on stdout; the rig forks this process with stdout ignored.
await import(pathToFileURL(entry).href);
http.createServer = createServer;
syncBuiltinESMExports();

if (!server) throw new Error("portkey: its HTTP server was not created through node:http createServer");
if (!server.listening) await new Promise((resolve) => server.once("listening", resolve));
const { port } = server.address();

process.on("message", (msg) => {
	if (msg?.type === "stop") server.close(() => process.exit(0));
});
process.on("disconnect", () => process.exit(0));
process.send?.({ type: "ready", url: `http://127.0.0.1:${port}`, pid: process.pid, version });
