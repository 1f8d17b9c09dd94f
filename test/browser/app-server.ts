// A tiny web app for the browser test: one page that streams a chat completion through the
// official openai SDK in browser mode, the SDK bundled for the browser with esbuild, and a
// server-side /token endpoint that mints a short-lived vk-tmp- token with a server key.
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** The openai package as one browser ESM module exporting `OpenAI`. */
export async function bundleSdk(): Promise<string> {
	const result = await build({
		stdin: { contents: 'export { default as OpenAI } from "openai";', resolveDir: ROOT, loader: "js" },
		bundle: true,
		format: "esm",
		platform: "browser",
		target: "es2022",
		write: false,
		logLevel: "silent",
	});
	return result.outputFiles[0]?.text ?? "";
}

// The page: `?key=` uses that key; `?token=1` first asks this app's server for a vk-tmp- token.
// It shows the streamed text in #out, and any error's message in #error.
const PAGE = `<!doctype html>
<html>
<head><meta charset="utf-8"><title>venym browser test</title></head>
<body>
<p id="status" data-state="running">running</p>
<pre id="out"></pre>
<pre id="error"></pre>
<script type="module">
import { OpenAI } from "/sdk.js";
const params = new URLSearchParams(location.search);
const status = document.getElementById("status");
const set = (state) => { status.dataset.state = state; status.textContent = state; };
try {
	let apiKey = params.get("key");
	if (params.get("token")) apiKey = (await (await fetch("/token", { method: "POST" })).json()).token;
	const client = new OpenAI({ apiKey, baseURL: params.get("base"), dangerouslyAllowBrowser: true, maxRetries: 0 });
	const stream = await client.chat.completions.create({
		model: "test/ok",
		stream: true,
		messages: [{ role: "user", content: params.get("prompt") ?? "hello from the browser" }],
	});
	for await (const chunk of stream) {
		document.getElementById("out").textContent += chunk.choices[0]?.delta?.content ?? "";
	}
	set("done");
} catch (err) {
	document.getElementById("error").textContent = String(err && err.message);
	status.dataset.httpStatus = String(err && err.status);
	set("error");
}
</script>
</body>
</html>`;

export interface AppServer {
	origin: string;
	close(): Promise<void>;
}

/** Serves the page on 127.0.0.1; `/token` mints a token for this origin with `serverKey`. */
export async function startAppServer(opts: { sdk: string; gatewayUrl: string; serverKey: string }): Promise<AppServer> {
	let origin = "";
	const server: Server = createServer(async (req, res) => {
		const path = new URL(req.url ?? "/", "http://app").pathname;
		if (path === "/") {
			res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
			res.end(PAGE);
		} else if (path === "/sdk.js") {
			res.writeHead(200, { "content-type": "text/javascript; charset=utf-8" });
			res.end(opts.sdk);
		} else if (path === "/token" && req.method === "POST") {
			// What a real app's backend does: keep the server key, hand the browser a scoped token.
			const minted = await fetch(`${opts.gatewayUrl}/v1/tokens`, {
				method: "POST",
				headers: { authorization: `Bearer ${opts.serverKey}`, "content-type": "application/json" },
				body: JSON.stringify({ ttl_seconds: 300, allowed_origins: [origin], allowed_models: ["test/ok"] }),
			});
			res.writeHead(minted.status, { "content-type": "application/json" });
			res.end(await minted.text());
		} else {
			res.writeHead(404);
			res.end();
		}
	});
	server.listen(0, "127.0.0.1");
	await once(server, "listening");
	const address = server.address();
	origin = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`;
	return {
		origin,
		close: () =>
			new Promise<void>((resolve) => {
				server.closeAllConnections();
				server.close(() => resolve());
			}),
	};
}
