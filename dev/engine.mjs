// The Venym development engine: an OpenAI-compatible stand-in for vLLM, SGLang,
// llama.cpp or Ollama. `npm start` runs it as the local engine and tests point the gateway
// at it over real HTTP. A `/s/<scenario>` path prefix picks a wire quirk
// (dev/engine-scenarios.mjs: each names the engine and documentation it imitates, and the fake
// keeps only what the real llama-server of test/engines/ cannot show; docs/engines.md); what to
// answer is planned in dev/engine-reply.mjs; this file is the HTTP server: routing, the request
// record, and writing the planned answer.
// A `/t/<tenant>` prefix before everything else gives a caller an engine of its own (its own
// request record) on the same port: test files running side by side each use one.
// Dependency-free on purpose: it must start on a bare Node 20 with no build step.

import http from "node:http";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { createGates, keepAliveUntil } from "./engine-gate.mjs";
import { createHooks, hookControl, hookRoute } from "./engine-hooks.mjs";
import { embeddings, legacyCompletions } from "./engine-legacy.mjs";
import { createNodes, health, isProbe, metrics, nodeControl, splitNode } from "./engine-nodes.mjs";
import {
	awkwardPieces,
	completion,
	encodeFrame,
	jsonEscaped,
	MODEL_IDS,
	planReply,
	promptTokens,
	searchResults,
	streamPayloads,
} from "./engine-reply.mjs";
import { SCENARIOS } from "./engine-scenarios.mjs";
import { tokenize } from "./engine-tool-loop.mjs";
import { cutAfterFlush, nestedError, sendJson, sleep, stallForever } from "./engine-wire.mjs";

export { scenarioNames } from "./engine-scenarios.mjs";

const ROUTES = {
	"GET /v1/models": models,
	"POST /v1/chat/completions": chat,
	"POST /v1/completions": legacyCompletions,
	"POST /v1/embeddings": embeddings,
	"POST /tokenize": tokenize,
	"GET /search": search,
	"GET /health": health,
	"GET /metrics": metrics,
};

async function writeFrame(ctx, text) {
	if (!ctx.behaviour.split) return void ctx.res.write(text);
	for (const piece of awkwardPieces(Buffer.from(text))) {
		if (ctx.gone) return;
		ctx.res.write(piece);
		// A short pause so the pieces leave as separate TCP segments instead of coalescing.
		await sleep(2);
	}
}

async function sendStream(ctx, payloads) {
	ctx.res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
	// `bodyMs` spreads a stream over that long too (the gateway always asks for a stream).
	const pause = ctx.delayMs > 0 ? ctx.delayMs : ctx.behaviour.bodyMs ? Math.ceil(ctx.behaviour.bodyMs / payloads.length) : 0;
	for (const [i, payload] of payloads.entries()) {
		if (ctx.behaviour.stallAfter !== undefined && i >= ctx.behaviour.stallAfter) return stallForever(ctx);
		if (i === 1 && ctx.behaviour.gate)
			await keepAliveUntil(ctx, ctx.released, encodeFrame(emptyChunk(payloads[0]), ctx.behaviour));
		if (i > 0 && pause > 0) await sleep(pause);
		if (i > 0 && ctx.behaviour.comments) ctx.res.write(": ping\n\n");
		if (ctx.gone) return;
		await writeFrame(ctx, encodeFrame(payload, ctx.behaviour));
	}
	if (ctx.behaviour.failure === "cut") return cutAfterFlush(ctx);
	ctx.res.end();
}

/** A chunk with nothing in it, as engines send while they work: keeps a gated stream from going idle. */
function emptyChunk(first) {
	const { id, object, created, model } = typeof first === "object" && first !== null ? first : {};
	return { id, object, created, model, choices: [{ index: 0, delta: {}, finish_reason: null }] };
}

// Non-stream answers take as long as the stream would have, so slow and delay scenarios
// still give abort tests a window.
async function sendCompletion(ctx, plan, meta) {
	const { res, behaviour } = ctx;
	if (ctx.delayMs > 0) await sleep(ctx.delayMs * Math.max(plan.usage.completion_tokens, 1));
	if (behaviour.gate) await ctx.released;
	if (ctx.gone) return;
	if (behaviour.stallAfter !== undefined) {
		res.writeHead(200, { "content-type": "application/json" });
		res.write('{"id":"chatcmpl-stall","object":"chat.completion",');
		return stallForever(ctx);
	}
	if (behaviour.failure === "cut") {
		const text = JSON.stringify(completion(plan, meta, behaviour));
		res.writeHead(200, { "content-type": "application/json" });
		res.write(text.slice(0, text.length >> 1));
		return cutAfterFlush(ctx);
	}
	if (behaviour.failure) return sendJson(res, behaviour.failureStatus ?? 500, behaviour.failure);
	if (behaviour.bodyMs) return dribble(ctx, JSON.stringify(completion(plan, meta, behaviour)), behaviour.bodyMs);
	sendJson(res, 200, completion(plan, meta, behaviour));
}

// Headers at once, then the JSON body a few characters at a time over `ms`: a long non-stream
// answer that keeps sending data (never idle), for tests that need a request to last.
async function dribble(ctx, text, ms) {
	ctx.res.writeHead(200, { "content-type": "application/json" });
	const steps = Math.max(1, Math.floor(ms / 100));
	const size = Math.ceil(text.length / steps);
	for (let i = 0; i < text.length && !ctx.gone; i += size) {
		ctx.res.write(text.slice(i, i + size));
		if (i + size < text.length) await sleep(100);
	}
	if (!ctx.gone) ctx.res.end();
}

async function chat(ctx) {
	const { body, record } = ctx;
	// `afterTool`: how the scenario behaves once the conversation ends with a tool's result (a search round's second call).
	const behaviour =
		ctx.behaviour.afterTool && body?.messages?.at?.(-1)?.role === "tool"
			? { ...ctx.behaviour, ...ctx.behaviour.afterTool }
			: ctx.behaviour;
	ctx.behaviour = behaviour;
	if (!body || !Array.isArray(body.messages)) {
		return sendJson(ctx.res, 400, {
			error: { message: "messages must be an array", type: "BadRequestError", param: "messages", code: 400 },
		});
	}
	if (behaviour.contextLength) {
		// As vLLM: the prompt and the output asked for must fit the context.
		const asked = body.max_completion_tokens ?? body.max_tokens ?? 0;
		const prompt = promptTokens(body.messages);
		if (prompt + asked > behaviour.contextLength) {
			const message = `This model's maximum context length is ${behaviour.contextLength} tokens. However, you requested ${prompt + asked} tokens (${prompt} in the messages, ${asked} in the completion).`;
			return sendJson(ctx.res, 400, { error: { message, type: "BadRequestError", param: null, code: 400 } });
		}
	}
	if (behaviour.headerDelayMs) await sleep(behaviour.headerDelayMs);
	if (behaviour.prefillMsPerToken) await sleep(promptTokens(body.messages) * behaviour.prefillMsPerToken);
	if (ctx.gone) return;
	const plan = (behaviour.plan ?? planReply)(body, behaviour, record.id);
	const meta = { id: `chatcmpl-dev${record.id}`, created: Math.floor(Date.now() / 1000), model: body.model ?? MODEL_IDS[0] };
	if (body.stream !== true) return sendCompletion(ctx, plan, meta);
	const includeUsage = body.stream_options?.include_usage === true;
	return sendStream(ctx, streamPayloads(plan, meta, behaviour, includeUsage));
}

function models(ctx) {
	const data = MODEL_IDS.map((id) => ({ id, object: "model", created: 0, owned_by: "venym-dev" }));
	sendJson(ctx.res, 200, { object: "list", data });
}

async function search(ctx) {
	const { behaviour, res } = ctx;
	if (behaviour.searchFail) return sendJson(res, 500, nestedError("search backend failed", "server_error", 500));
	if (behaviour.searchDelayMs) await sleep(behaviour.searchDelayMs);
	if (behaviour.gateSearch) await ctx.released;
	if (ctx.gone) return;
	const found = searchResults(ctx.url.searchParams.get("q") ?? "");
	if (!behaviour.searchPadBytes) return sendJson(res, 200, found);
	// Valid JSON, its results first, then a padding field of that many bytes, sent in pieces.
	res.writeHead(200, { "content-type": "application/json" });
	res.write(`${JSON.stringify(found).slice(0, -1)},"padding":"`);
	const piece = "x".repeat(64 * 1024);
	for (let sent = 0; sent < behaviour.searchPadBytes && !ctx.gone; sent += piece.length) {
		if (!res.write(piece)) await new Promise((resolve) => res.once("drain", resolve));
	}
	if (!ctx.gone) res.end('"}');
}

/** The body as text, and parsed (null when there was none or it was not JSON). */
function readBody(req) {
	return new Promise((resolve, reject) => {
		const chunks = [];
		req.on("data", (chunk) => chunks.push(chunk));
		req.on("error", reject);
		req.on("end", () => {
			const text = Buffer.concat(chunks).toString("utf8");
			try {
				resolve({ text, json: text ? JSON.parse(text) : null });
			} catch {
				resolve({ text, json: null });
			}
		});
	});
}

function splitTenant(pathname) {
	const match = /^\/t\/([^/]+)(\/.*)$/.exec(pathname);
	return match ? { tenant: decodeURIComponent(match[1]), pathname: match[2] } : { tenant: null, pathname };
}

function splitScenario(pathname) {
	const match = /^\/s\/([^/]+)(\/.*)$/.exec(pathname);
	return match ? { scenario: decodeURIComponent(match[1]), route: match[2] } : { scenario: "ok", route: pathname };
}

function delayFrom(req, behaviour) {
	const header = Number(req.headers["x-engine-delay-ms"]);
	return Number.isFinite(header) && header >= 0 ? Math.min(header, 60_000) : (behaviour.delayMs ?? 0);
}

function watchClose(ctx, quiet) {
	const { res, record } = ctx;
	res.on("close", () => {
		ctx.gone = true;
		record.closedAt = Date.now();
		record.finished = res.writableFinished;
		record.aborted = !res.writableFinished && !ctx.selfClosed;
		if (!quiet)
			console.log(
				`${record.method} ${record.path} [${record.scenario}] ${res.headersSent ? res.statusCode : "---"}${record.aborted ? " aborted" : ""}`,
			);
	});
}

// The log lives as long as the engine and bodies can be megabytes, so a test asks only for
// its own requests: `since` (ids after it), `contains` (text in the raw body), `tail` (the
// last n of what is left). Without parameters: every request.
function selectRequests(state, params) {
	let out = state.requests;
	if (params.has("since")) {
		const since = Number(params.get("since"));
		out = out.filter((r) => r.id > since);
	}
	const contains = params.get("contains");
	if (contains) out = out.filter((r) => state.bodyText(r).includes(contains));
	if (params.has("tail")) out = out.slice(Math.max(0, out.length - Number(params.get("tail"))));
	return out;
}

async function control(req, res, route, params, state) {
	if (req.method === "GET" && route === "/_engine/requests") return sendJson(res, 200, selectRequests(state, params));
	const body = req.method === "POST" ? (await readBody(req)).json : null;
	if (nodeControl(req, res, route, body, state.nodes)) return;
	if (hookControl(req, res, route, body, state.hooks)) return;
	if (req.method === "POST" && route === "/_engine/release") {
		return sendJson(res, 200, { released: state.gates.release(String(body?.contains ?? "")) });
	}
	if (req.method === "POST" && route === "/_engine/reset") {
		state.reset();
		return sendJson(res, 200, { ok: true });
	}
	sendJson(res, 404, nestedError(`no control route ${req.method} ${route}`, "not_found_error", 404));
}

async function handle(req, res, engine, quiet) {
	const url = new URL(req.url ?? "/", "http://engine.local");
	const { tenant, pathname } = splitTenant(url.pathname);
	const state = engine.state(tenant);
	// A named node (`/n/<name>`) behaves as the scenario last set for it (engine-nodes.mjs).
	const named = splitNode(pathname);
	const { scenario, route } = named
		? { scenario: state.nodes.scenarioOf(named.name), route: named.rest }
		: splitScenario(pathname);
	if (pathname.startsWith("/_engine/")) return control(req, res, pathname, url.searchParams, state);
	const { text, json: body } = await readBody(req);
	if (hookRoute(req, res, pathname, text, state.hooks)) return;
	const fields = {
		method: req.method,
		path: pathname,
		query: Object.fromEntries(url.searchParams),
		scenario,
		node: named?.name ?? null,
		headers: req.headers,
		body,
	};
	// Health checks are counted, not recorded: a test's request list never shows the gateway's probes.
	const probe = isProbe(req.method, route);
	const record = probe ? { id: 0, ...fields, aborted: false, finished: false } : state.record(fields, text);
	const nodeEntry = state.nodes.entry(named?.name ?? null, scenario);
	if (probe) nodeEntry.probes++;
	else {
		nodeEntry.requests++;
		nodeEntry.inFlight++;
		res.on("close", () => nodeEntry.inFlight--);
	}
	const behaviour = echoing(Object.hasOwn(SCENARIOS, scenario) ? SCENARIOS[scenario] : null, req);
	const ctx = {
		req,
		res,
		url,
		body,
		record,
		behaviour,
		delayMs: delayFrom(req, behaviour ?? {}),
		gone: false,
		selfClosed: false,
		nodeEntry,
	};
	watchClose(ctx, quiet || probe);
	if (behaviour?.gate && !probe) ctx.released = state.gates.wait(ctx, text);
	if (behaviour?.gateSearch && route === "/search") ctx.released = state.gates.wait(ctx, url.searchParams.get("q") ?? "");
	if (!behaviour) return sendJson(res, 404, nestedError(`unknown scenario "${scenario}"`, "not_found_error", 404));
	const endpoint = ROUTES[`${req.method} ${route}`];
	if (!endpoint) return sendJson(res, 404, nestedError(`no route ${req.method} ${route}`, "not_found_error", 404));
	if (behaviour.failOn && !probe && text.includes(behaviour.failOn)) {
		return sendJson(res, 500, nestedError("engine crashed on this input", "server_error", 500));
	}
	// A node that refuses bad requests is still a healthy node: its health checks pass.
	if (behaviour.early && !(probe && behaviour.healthy)) return behaviour.early(ctx);
	return endpoint(ctx);
}

// An engine that echoes its request: the Authorization it was sent goes into its words (after
// "Authorization:"), and into its failure's message.
function echoing(behaviour, req) {
	if (!behaviour?.echoAuth) return behaviour;
	const auth = String(req.headers.authorization ?? "none");
	const failure = behaviour.failure?.error
		? { error: { ...behaviour.failure.error, message: `${behaviour.failure.error.message} (request authorization: ${auth})` } }
		: behaviour.failure;
	return { ...behaviour, echo: behaviour.echoEscaped ? jsonEscaped(auth) : auth, failure };
}

function createState() {
	// One array for the engine's lifetime: callers keep the reference startEngine returned.
	const requests = [];
	// Raw bodies beside the records, out of their JSON.
	const bodies = new WeakMap();
	let nextId = 1;
	return {
		requests,
		nodes: createNodes(),
		hooks: createHooks(),
		gates: createGates(),
		record(fields, bodyText) {
			const entry = { id: nextId++, ...fields, aborted: false, finished: false, receivedAt: Date.now(), closedAt: null };
			requests.push(entry);
			bodies.set(entry, bodyText);
			return entry;
		},
		bodyText: (entry) => bodies.get(entry) ?? "",
		reset() {
			requests.length = 0;
		},
	};
}

/** The engine's own record, and one per tenant (made on first use, kept for the engine's lifetime). */
function createEngineState() {
	const root = createState();
	const tenants = new Map();
	return {
		root,
		state(tenant) {
			if (tenant === null) return root;
			if (!tenants.has(tenant)) tenants.set(tenant, createState());
			return tenants.get(tenant);
		},
	};
}

export async function startEngine({ port = 0, host = "127.0.0.1", quiet = true } = {}) {
	const engine = createEngineState();
	const state = engine.root;
	const server = http.createServer((req, res) => {
		handle(req, res, engine, quiet).catch((err) => {
			if (!quiet) console.error("engine error:", err);
			if (res.headersSent) res.destroy();
			else sendJson(res, 500, nestedError("engine internal error", "server_error", 500));
		});
	});
	await new Promise((resolve, reject) => {
		server.once("error", reject);
		server.listen(port, host, resolve);
	});
	const bound = server.address().port;
	return {
		url: `http://${host.includes(":") ? `[${host}]` : host}:${bound}`,
		port: bound,
		requests: state.requests,
		reset: state.reset,
		close: () =>
			new Promise((resolve) => {
				server.close(() => resolve());
				// Hanging and streaming requests would otherwise hold close() open.
				server.closeAllConnections();
			}),
	};
}

async function main() {
	const { values } = parseArgs({ options: { port: { type: "string" }, host: { type: "string" }, quiet: { type: "boolean" } } });
	const engine = await startEngine({
		port: Number(values.port ?? 8788),
		host: values.host ?? "127.0.0.1",
		quiet: values.quiet ?? false,
	});
	console.log(`engine listening on ${engine.url}`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
