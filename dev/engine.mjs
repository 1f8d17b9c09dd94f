// The Venym development engine: an OpenAI-compatible stand-in for vLLM, SGLang,
// llama.cpp or Ollama. `npm start` runs it as the local engine and tests point the gateway
// at it over real HTTP. A `/s/<scenario>` path prefix picks a wire quirk, so a gateway
// config chooses a behaviour just by naming a node URL (http://127.0.0.1:PORT/s/cut/v1).
// Dependency-free on purpose: it must start on a bare Node 20 with no build step.

import http from "node:http";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const MODEL_IDS = ["venym-dev/echo", "venym-dev/reasoner"];
const REASONING_TEXT = "Thinking about it.";
const MULTIBYTE_TEXT = "héllo 👋 世界";
const FILLER = "and then some more words follow to pad the answer out".split(" ");
const FRAGMENT_CHARS = 8;

const nestedError = (message, type, code) => ({ error: { message, type, param: null, code } });
const flatError = (message, type, code) => ({ object: "error", message, type, param: null, code });

// Each scenario is one realistic quirk. `early` answers instead of the endpoint (every
// endpoint, so a broken node is broken for /v1/models too); the other keys tune the
// chat stream or the search endpoint.
const SCENARIOS = {
	ok: {},
	fail500: {
		early: (ctx) => sendJson(ctx.res, 500, { error: { message: "engine exploded", type: "server_error" } }),
	},
	fail503: { early: (ctx) => sendText(ctx.res, 503, "Service Unavailable") },
	fail429: {
		early: (ctx) =>
			sendJson(ctx.res, 429, nestedError("Rate limit reached, slow down", "rate_limit_error", 429), {
				"retry-after": "1",
			}),
	},
	bad400: {
		early: (ctx) =>
			sendJson(ctx.res, 400, {
				error: {
					message: "This model's maximum context length is 4096 tokens",
					type: "BadRequestError",
					param: "messages",
					code: 400,
				},
			}),
	},
	flat400: {
		early: (ctx) => sendJson(ctx.res, 400, flatError("flat: bad temperature", "BadRequestError", 400)),
	},
	// Never sends headers: the gateway's time-to-first-byte timeout must fire. The close
	// listener in watchClose() records the gateway walking away.
	hang: { early: () => {} },
	drop: { early: (ctx) => closeAbruptly(ctx) },
	midstream: {
		minWords: 6,
		failAfter: 3,
		failure: { error: { message: "CUDA out of memory", type: "server_error", code: 500 } },
	},
	midflat: { minWords: 6, failAfter: 3, failure: flatError("CUDA out of memory", "InternalServerError", 500) },
	cut: { minWords: 6, failAfter: 3, failure: "cut" },
	// Answers 200 with nothing but an error body (some servers do): no content ever arrives.
	error200: {
		failAfter: 0,
		failureStatus: 200,
		failure: { error: { message: "model is loading", type: "server_error", code: 503 } },
	},
	nousage: { usage: "none", prefix: "data:" },
	cumulative: { usage: "cumulative" },
	finishusage: { usage: "finish", eol: "\r\n" },
	comments: { comments: true, split: true, suffix: MULTIBYTE_TEXT },
	slow: { delayMs: 50, exactWords: 40 },
	reasoning: { reasoningField: "reasoning" },
	// Sends headers (and a few frames when streaming) and then nothing, holding the socket open.
	stall: { stallAfter: 2 },
	// Usage no engine could have produced: absurd and negative counts, on both lanes.
	hugeusage: { usageOverride: { prompt_tokens: 1e300, completion_tokens: 7, total_tokens: 1e300 } },
	negusage: { usageOverride: { prompt_tokens: -50, completion_tokens: 2.5, total_tokens: -47.5 } },
	// A stream whose one event never ends: 2 MB without a newline.
	noeol: {
		early: async (ctx) => {
			ctx.res.writeHead(200, { "content-type": "text/event-stream" });
			ctx.res.write("data: ");
			const piece = "x".repeat(64 * 1024);
			for (let i = 0; i < 32 && !ctx.gone; i++) {
				ctx.res.write(piece);
				await sleep(1);
			}
			if (!ctx.gone) ctx.res.end();
		},
	},
	// A refusal that echoes the request's Authorization header inside a 2 MB message.
	echoauth: {
		early: (ctx) =>
			sendJson(ctx.res, 400, {
				error: {
					message: `bad request from authorization=${ctx.req.headers.authorization ?? "none"} ${"y".repeat(2_000_000)}`,
					type: "BadRequestError",
					param: `messages ${ctx.req.headers.authorization ?? ""}`,
					code: 400,
				},
			}),
	},
	// Headers arrive late but within the first-byte timeout.
	slowheaders: { headerDelayMs: 600 },
	searchfail: { searchFail: true },
	searchslow: { searchDelayMs: 5000 },
};

export const scenarioNames = Object.keys(SCENARIOS);

const ROUTES = {
	"GET /v1/models": models,
	"POST /v1/chat/completions": chat,
	"GET /search": search,
};

// Unref'd so a pending pause never keeps a closed engine's process alive.
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms).unref());

function sendJson(res, status, value, headers = {}) {
	const body = JSON.stringify(value);
	res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body), ...headers });
	res.end(body);
}

function sendText(res, status, text) {
	res.writeHead(status, { "content-type": "text/plain", "content-length": Buffer.byteLength(text) });
	res.end(text);
}

// Engine-initiated breakage must not look like the client aborting in the record.
function closeAbruptly(ctx) {
	ctx.selfClosed = true;
	ctx.res.socket?.destroy();
}

// Give what was already written time to reach the client before the socket dies.
async function cutAfterFlush(ctx) {
	await sleep(20);
	closeAbruptly(ctx);
}

function textOf(content) {
	if (typeof content === "string") return content;
	if (!Array.isArray(content)) return "";
	return content
		.filter((part) => part?.type === "text" && typeof part.text === "string")
		.map((part) => part.text)
		.join(" ");
}

const words = (text) => text.split(/\s+/).filter(Boolean);

function promptTokens(messages) {
	const chars = messages.reduce((sum, message) => sum + textOf(message?.content).length, 0);
	return Math.ceil(chars / 4);
}

// Web-search grounding arrives as numbered sources in system text; cite the first two
// so the gateway's source handling has something real to carry.
function citedSources(messages) {
	const system = messages.filter((m) => m?.role === "system" || m?.role === "developer");
	const found = system.flatMap((m) => textOf(m.content).match(/\[\d+\]/g) ?? []);
	return [...new Set(found)].slice(0, 2);
}

function replyText(messages, last, userText) {
	if (last.role === "tool") return `Tool said: ${textOf(last.content)}`;
	const [first, second] = citedSources(messages);
	if (first) return `According to ${first}, ${userText} is covered in the results${second ? ` ${second}` : ""}.`;
	return `Echo: ${userText}`;
}

function chooseTool(body, last, userText, n) {
	const tools = Array.isArray(body.tools) ? body.tools : [];
	if (tools.length === 0 || last.role === "tool" || body.tool_choice === "none") return null;
	const name = body.tool_choice?.function?.name ?? tools[0]?.function?.name ?? "tool";
	const args = JSON.stringify({ query: userText });
	return { id: `call_${n}`, type: "function", function: { name, arguments: args } };
}

function shapeWords(list, behaviour) {
	const out = behaviour.suffix ? [...list, ...words(behaviour.suffix)] : [...list];
	const target = behaviour.exactWords ?? Math.max(out.length, behaviour.minWords ?? 0);
	for (let i = 0; out.length < target; i++) out.push(FILLER[i % FILLER.length]);
	return out.slice(0, target);
}

// Split on code points, never inside a surrogate pair.
function fragments(text) {
	const chars = Array.from(text);
	const out = [];
	for (let i = 0; i < chars.length; i += FRAGMENT_CHARS) out.push(chars.slice(i, i + FRAGMENT_CHARS).join(""));
	return out;
}

// Everything the answer will contain, decided once so stream and non-stream agree.
// Tokens are whitespace-separated words; a tool call costs one token per argument fragment.
function planReply(body, behaviour, n) {
	const messages = body.messages;
	const last = messages.at(-1) ?? {};
	const userText = textOf(messages.findLast((m) => m?.role === "user")?.content);
	const toolCall = chooseTool(body, last, userText, n);
	const wantsReasoning = body.reasoning_effort != null || /reason/i.test(String(body.model ?? ""));
	const reasoningField = behaviour.reasoningField ?? (wantsReasoning ? "reasoning_content" : null);
	const reasoningWords = reasoningField ? words(REASONING_TEXT) : [];
	const fullWords = toolCall ? [] : shapeWords(words(replyText(messages, last, userText)), behaviour);
	const cap = body.max_completion_tokens ?? body.max_tokens;
	const capped = Number.isInteger(cap) && cap >= 0 && fullWords.length > cap;
	const contentWords = capped ? fullWords.slice(0, cap) : fullWords;
	const argFragments = toolCall ? fragments(toolCall.function.arguments) : [];
	const prompt = promptTokens(messages);
	const completion = reasoningWords.length + contentWords.length + argFragments.length;
	return {
		reasoningField,
		reasoningWords,
		contentWords,
		toolCall,
		argFragments,
		finish: toolCall ? "tool_calls" : capped ? "length" : "stop",
		usage: behaviour.usageOverride ?? usageOf(prompt, completion),
	};
}

const usageOf = (prompt, completion) => ({
	prompt_tokens: prompt,
	completion_tokens: completion,
	total_tokens: prompt + completion,
});

// llama.cpp reports speed figures beside usage; the values only need to look plausible.
const timingsOf = (usage) => ({
	prompt_n: usage.prompt_tokens,
	prompt_ms: usage.prompt_tokens * 0.5,
	predicted_n: usage.completion_tokens,
	predicted_ms: usage.completion_tokens * 20,
	predicted_per_second: 50,
});

function toolDeltas({ toolCall, argFragments }) {
	if (!toolCall) return [];
	const { id, type, function: fn } = toolCall;
	const head = { index: 0, id, type, function: { name: fn.name, arguments: "" } };
	const rest = argFragments.map((piece) => ({ index: 0, function: { arguments: piece } }));
	return [head, ...rest].map((call) => ({ tool_calls: [call] }));
}

function streamDeltas(plan) {
	const spaced = (w, i) => (i === 0 ? w : ` ${w}`);
	const deltas = [
		...plan.reasoningWords.map((w, i) => ({ [plan.reasoningField]: spaced(w, i) })),
		...plan.contentWords.map((w, i) => ({ content: spaced(w, i) })),
		...toolDeltas(plan),
	];
	if (deltas.length === 0) deltas.push({ content: "" });
	deltas[0] = { role: "assistant", ...deltas[0] };
	return deltas;
}

const carriesToken = (delta) =>
	Boolean(delta.content || delta.reasoning_content || delta.reasoning || delta.tool_calls?.[0].function.arguments);

// Key order as OpenAI sends it, which keeps recorded transcripts diffable against real ones.
const header = ({ id, created, model }, object) => ({ id, object, created, model });

// The whole stream as payloads (objects, "[DONE]" or a failure) before any byte is sent.
function streamPayloads(plan, meta, behaviour, includeUsage) {
	const mode = behaviour.usage ?? "final";
	const chunk = (choices, extra = {}) => ({ ...header(meta, "chat.completion.chunk"), choices, ...extra });
	let emitted = 0;
	const payloads = streamDeltas(plan).map((delta) => {
		emitted += carriesToken(delta) ? 1 : 0;
		const extra = mode === "cumulative" ? { usage: usageOf(plan.usage.prompt_tokens, emitted) } : {};
		return chunk([{ index: 0, delta, finish_reason: null }], extra);
	});
	if (behaviour.failAfter !== undefined) {
		const head = payloads.slice(0, behaviour.failAfter);
		return behaviour.failure === "cut" ? head : [...head, behaviour.failure];
	}
	const finishExtra = { cumulative: { usage: plan.usage }, finish: { usage: plan.usage, timings: timingsOf(plan.usage) } };
	payloads.push(chunk([{ index: 0, delta: {}, finish_reason: plan.finish }], finishExtra[mode]));
	if (includeUsage && (mode === "final" || mode === "cumulative")) payloads.push(chunk([], { usage: plan.usage }));
	payloads.push("[DONE]");
	return payloads;
}

function encodeFrame(payload, behaviour) {
	const eol = behaviour.eol ?? "\n";
	const data = typeof payload === "string" ? payload : JSON.stringify(payload);
	return `${behaviour.prefix ?? "data: "}${data}${eol}${eol}`;
}

// Cut inside the JSON, one byte into the first multi-byte character and between the two
// newlines that end the frame, so a parser that assumes whole frames per read breaks.
function awkwardPieces(bytes) {
	const cuts = new Set([Math.floor(bytes.length / 2), bytes.length - 1]);
	const multibyte = bytes.findIndex((b) => b >= 0x80);
	if (multibyte >= 0) cuts.add(multibyte + 1);
	const sorted = [...cuts].filter((c) => c > 0 && c < bytes.length).sort((a, b) => a - b);
	return [0, ...sorted].map((start, i) => bytes.subarray(start, sorted[i] ?? bytes.length));
}

async function writeFrame(ctx, text) {
	if (!ctx.behaviour.split) return void ctx.res.write(text);
	for (const piece of awkwardPieces(Buffer.from(text))) {
		if (ctx.gone) return;
		ctx.res.write(piece);
		// A short pause so the pieces leave as separate TCP segments instead of coalescing.
		await sleep(2);
	}
}

// Headers are out, then silence until the gateway gives up and closes the connection.
function stallForever(ctx) {
	return new Promise((resolve) => ctx.res.on("close", resolve));
}

async function sendStream(ctx, payloads) {
	ctx.res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
	for (const [i, payload] of payloads.entries()) {
		if (ctx.behaviour.stallAfter !== undefined && i >= ctx.behaviour.stallAfter) return stallForever(ctx);
		if (i > 0 && ctx.delayMs > 0) await sleep(ctx.delayMs);
		if (i > 0 && ctx.behaviour.comments) ctx.res.write(": ping\n\n");
		if (ctx.gone) return;
		await writeFrame(ctx, encodeFrame(payload, ctx.behaviour));
	}
	if (ctx.behaviour.failure === "cut") return cutAfterFlush(ctx);
	ctx.res.end();
}

function completion(plan, meta, behaviour) {
	const { toolCall, reasoningField } = plan;
	const message = { role: "assistant", content: toolCall ? null : plan.contentWords.join(" ") };
	if (reasoningField) message[reasoningField] = plan.reasoningWords.join(" ");
	if (toolCall) message.tool_calls = [toolCall];
	const body = { ...header(meta, "chat.completion"), choices: [{ index: 0, message, finish_reason: plan.finish }] };
	if (behaviour.usage !== "none") body.usage = plan.usage;
	if (behaviour.usage === "finish") body.timings = timingsOf(plan.usage);
	return body;
}

// Non-stream answers take as long as the stream would have, so slow and delay scenarios
// still give abort tests a window.
async function sendCompletion(ctx, plan, meta) {
	const { res, behaviour } = ctx;
	if (ctx.delayMs > 0) await sleep(ctx.delayMs * Math.max(plan.usage.completion_tokens, 1));
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
	sendJson(res, 200, completion(plan, meta, behaviour));
}

async function chat(ctx) {
	const { body, behaviour, record } = ctx;
	if (!body || !Array.isArray(body.messages)) {
		return sendJson(ctx.res, 400, {
			error: { message: "messages must be an array", type: "BadRequestError", param: "messages", code: 400 },
		});
	}
	if (behaviour.headerDelayMs) await sleep(behaviour.headerDelayMs);
	if (ctx.gone) return;
	const plan = planReply(body, behaviour, record.id);
	const meta = { id: `chatcmpl-dev${record.id}`, created: Math.floor(Date.now() / 1000), model: body.model ?? MODEL_IDS[0] };
	if (body.stream !== true) return sendCompletion(ctx, plan, meta);
	const includeUsage = body.stream_options?.include_usage === true;
	return sendStream(ctx, streamPayloads(plan, meta, behaviour, includeUsage));
}

function models(ctx) {
	const data = MODEL_IDS.map((id) => ({ id, object: "model", created: 0, owned_by: "venym-dev" }));
	sendJson(ctx.res, 200, { object: "list", data });
}

function searchResults(query) {
	const slug =
		query
			.toLowerCase()
			.replace(/[^a-z0-9]+/g, "-")
			.replace(/^-|-$/g, "") || "empty";
	const results = Array.from({ length: 10 }, (_, i) => ({
		url: `https://example.com/${slug}/${i + 1}`,
		title: `${query} — result ${i + 1}`,
		content: `Result ${i + 1} explains ${query} in a few plain sentences.`,
		engine: "venym-dev",
		score: Number((1 - i / 10).toFixed(2)),
	}));
	return {
		query,
		number_of_results: results.length,
		results,
		answers: [],
		suggestions: [],
		infoboxes: [],
		unresponsive_engines: [],
	};
}

async function search(ctx) {
	const { behaviour, res } = ctx;
	if (behaviour.searchFail) return sendJson(res, 500, nestedError("search backend failed", "server_error", 500));
	if (behaviour.searchDelayMs) await sleep(behaviour.searchDelayMs);
	if (ctx.gone) return;
	sendJson(res, 200, searchResults(ctx.url.searchParams.get("q") ?? ""));
}

function readJson(req) {
	return new Promise((resolve, reject) => {
		const chunks = [];
		req.on("data", (chunk) => chunks.push(chunk));
		req.on("error", reject);
		req.on("end", () => {
			const text = Buffer.concat(chunks).toString("utf8");
			try {
				resolve(text ? JSON.parse(text) : null);
			} catch {
				resolve(null);
			}
		});
	});
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
		record.finished = res.writableFinished;
		record.aborted = !res.writableFinished && !ctx.selfClosed;
		if (!quiet)
			console.log(
				`${record.method} ${record.path} [${record.scenario}] ${res.headersSent ? res.statusCode : "---"}${record.aborted ? " aborted" : ""}`,
			);
	});
}

function control(req, res, route, state) {
	if (req.method === "GET" && route === "/_engine/requests") return sendJson(res, 200, state.requests);
	if (req.method === "POST" && route === "/_engine/reset") {
		state.reset();
		return sendJson(res, 200, { ok: true });
	}
	sendJson(res, 404, nestedError(`no control route ${req.method} ${route}`, "not_found_error", 404));
}

async function handle(req, res, state, quiet) {
	const url = new URL(req.url ?? "/", "http://engine.local");
	const { scenario, route } = splitScenario(url.pathname);
	if (url.pathname.startsWith("/_engine/")) return control(req, res, url.pathname, state);
	const body = await readJson(req);
	const record = state.record({
		method: req.method,
		path: url.pathname,
		query: Object.fromEntries(url.searchParams),
		scenario,
		headers: req.headers,
		body,
	});
	const behaviour = Object.hasOwn(SCENARIOS, scenario) ? SCENARIOS[scenario] : null;
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
	};
	watchClose(ctx, quiet);
	if (!behaviour) return sendJson(res, 404, nestedError(`unknown scenario "${scenario}"`, "not_found_error", 404));
	const endpoint = ROUTES[`${req.method} ${route}`];
	if (!endpoint) return sendJson(res, 404, nestedError(`no route ${req.method} ${route}`, "not_found_error", 404));
	if (behaviour.early) return behaviour.early(ctx);
	return endpoint(ctx);
}

function createState() {
	// One array for the engine's lifetime: callers keep the reference startEngine returned.
	const requests = [];
	let nextId = 1;
	return {
		requests,
		record(fields) {
			const entry = { id: nextId++, ...fields, aborted: false, finished: false };
			requests.push(entry);
			return entry;
		},
		reset() {
			requests.length = 0;
		},
	};
}

export async function startEngine({ port = 0, host = "127.0.0.1", quiet = true } = {}) {
	const state = createState();
	const server = http.createServer((req, res) => {
		handle(req, res, state, quiet).catch((err) => {
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
