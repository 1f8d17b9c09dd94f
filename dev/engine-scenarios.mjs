// The development engine's scenarios. A `/s/<name>` path prefix picks one, so a gateway
// config chooses an engine behaviour just by naming a node URL (http://127.0.0.1:PORT/s/cut/v1).
// Each is one realistic quirk of a real engine; a new quirk is one entry here, and
// dev/engine.mjs reads only the keys below, never a scenario's name.
//
//   early(ctx)                 answers instead of the endpoint (every endpoint, so a broken
//                              node is broken for /v1/models too); ctx is
//                              { req, res, url, body, record, behaviour, delayMs, gone, selfClosed }
//   healthy                    `early` spares the health checks (/health, /metrics): a node
//                              that refuses bad requests is not a sick node
//   failAfter, failure,        the chat answer breaks after that many stream payloads with
//   failureStatus              `failure` (an error body, or "cut": the connection closes)
//   usage                      "final" (default), "none", "cumulative" or "finish"
//   usageOverride              usage reported whatever was generated (chat, legacy, embeddings)
//   byteTokens                 { imageTokens }: prompt tokens counted as a byte-level tokenizer
//                              at worst (one per UTF-8 byte, imageTokens per image)
//   oneChoiceUsage             completion tokens of the first choice only (llama.cpp with `n`)
//   prefix, eol, comments,     SSE framing: "data:" without the space, CRLF, `: ping`
//   split                      comments between frames, frames cut into awkward TCP pieces
//   suffix, minWords,          the answer's words
//   exactWords
//   reasoningField             streams reasoning deltas under that field
//   delayMs, headerDelayMs     pause between stream frames (non-stream: the whole answer),
//                              and before the headers
//   prefillMsPerToken          the prompt is read at this many ms a token before the headers (a
//                              long prompt's slow prefill), and `timings.prompt_ms` says so
//   stallAfter                 headers (and that many frames), then silence
//   cachedShare                that share of the prompt reported as served from the prefix cache
//   brokenToolArgs             tool-call arguments cut before their closing `"}`
//   bodyMs                     the answer spread over that many ms, data throughout (a non-stream
//                              one dribbled, a stream's frames paced)
//   gate                       the answer waits after its first frame (a stream: empty chunks
//                              every 200 ms) until a test releases it (dev/engine-gate.mjs)
//   searchFail, searchDelayMs  the search endpoint fails or is slow
//   searchPadBytes             the search endpoint's JSON carries that many bytes of padding
//   contextLength              a chat request whose prompt and max tokens exceed it gets vLLM's 400
//   sayBeforeTool              this text first, then the tool call, in one answer
//   afterTool                  behaviour merged in when the conversation ends with a tool's result
//                              (the second call of the gateway's search round)
//   failOn                     a request whose body contains this text answers 500 (an input
//                              that crashes the engine); others are served as usual
//   echoAuth                   the request's Authorization is echoed in the answer: in the
//                              content (a stream splits the token over two frames), the legacy
//                              text, and the `failure` message
//   echoEscaped                with echoAuth: the echo written with JSON `\u` escapes (mixed-case
//                              hex), as the content a client parses (`{"authorization": …}`), in a
//                              tool call's arguments, and in each embedding's raw JSON; a stream
//                              splits it every 8 characters, escapes included
//   plan, toolName, toolInput  replaces planReply (engine-reply.mjs): tool-loop calls the tool
//                              `toolName` once with `toolInput`, then answers with its result
//   searchQuery                what a deferred tool is searched for (engine-tool-search.mjs)
//   queue                      what `/metrics` reports: { waiting, running, kv_cache_usage }
//                              (a named node's queue is set at runtime, dev/engine-nodes.mjs)

import { planCodex } from "./engine-codex.mjs";
import { planSearchAgain, planToolLoop } from "./engine-tool-loop.mjs";
import { planDeferredTool } from "./engine-tool-search.mjs";
import { closeAbruptly, flatError, nestedError, sendJson, sendText, sleep } from "./engine-wire.mjs";

const MULTIBYTE_TEXT = "héllo 👋 世界";

export const SCENARIOS = {
	ok: {},
	fail500: {
		early: (ctx) => sendJson(ctx.res, 500, { error: { message: "engine exploded", type: "server_error" } }),
	},
	// Crashes on one input only: every node answers 500 to a request that carries "POISON".
	poison: { failOn: "POISON" },
	fail503: { early: (ctx) => sendText(ctx.res, 503, "Service Unavailable") },
	fail429: {
		early: (ctx) =>
			sendJson(ctx.res, 429, nestedError("Rate limit reached, slow down", "rate_limit_error", 429), {
				"retry-after": "1",
			}),
	},
	bad400: {
		healthy: true,
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
		healthy: true,
		early: (ctx) => sendJson(ctx.res, 400, flatError("flat: bad temperature", "BadRequestError", 400)),
	},
	// Never sends headers: the gateway's time-to-first-byte timeout must fire. The close
	// listener in watchClose() records the gateway walking away.
	hang: { early: () => {} },
	// Passes its health checks but never answers a request: llama.cpp's /health says ok while a
	// request waits on a slot that never frees (a stuck generation); the probes cannot tell.
	stuck: { healthy: true, early: () => {} },
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
	// A big but honest prompt count: within the context, far over the gateway's estimate.
	bigprompt: { usageOverride: { prompt_tokens: 1040, completion_tokens: 1, total_tokens: 1041 } },
	// An honest byte-level tokenizer on CJK, rare 3-byte characters and images (16,384 tokens each,
	// Qwen2.5-VL's largest): far more tokens than the gateway's chars/4 estimate, within its bound.
	bytetok: { byteTokens: { imageTokens: 16_384 } },
	// llama.cpp with `n: 2` (or a legacy prompt array): every choice returned, one choice's tokens counted.
	onechoice: { oneChoiceUsage: true },
	// 0/0 usage beside a whole answer.
	zerousage: { usageOverride: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 } },
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
		healthy: true,
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
	// Echoes its Authorization header in the completion text, the token split over two frames.
	echoauthcontent: { echoAuth: true },
	// Echoes its Authorization header written with JSON escapes, where the client decodes them.
	echoauthescaped: { echoAuth: true, echoEscaped: true },
	// Fails mid-stream with its Authorization header in the error message.
	echoauthmid: {
		echoAuth: true,
		minWords: 6,
		failAfter: 3,
		failure: { error: { message: "CUDA out of memory", type: "server_error", code: 500 } },
	},
	// Answers 200 with an error body that echoes its Authorization header.
	echoauth200: {
		echoAuth: true,
		failAfter: 0,
		failureStatus: 200,
		failure: { error: { message: "model is loading", type: "server_error", code: 503 } },
	},
	// Keep-alives forever and nothing else: one chunk then `: ping` comments (stream), or
	// whitespace (non-stream), every 200 ms, until the gateway gives up.
	trickle: {
		early: async (ctx) => {
			const stream = ctx.body?.stream === true;
			ctx.res.writeHead(200, { "content-type": stream ? "text/event-stream" : "application/json" });
			if (stream) {
				const chunk = { id: "chatcmpl-trickle", object: "chat.completion.chunk", created: 1, model: "m" };
				ctx.res.write(
					`data: ${JSON.stringify({ ...chunk, choices: [{ index: 0, delta: { role: "assistant", content: "Hi" } }] })}\n\n`,
				);
			}
			while (!ctx.gone) {
				await sleep(200);
				if (!ctx.gone) ctx.res.write(stream ? ": ping\n\n" : " ");
			}
		},
	},
	// A whole answer and `data: [DONE]`, then the response left open with `: ping` comments until
	// the gateway goes (a proxy that keeps the stream alive): the gateway must not wait on it.
	doneopen: {
		early: async (ctx) => {
			ctx.res.writeHead(200, { "content-type": "text/event-stream" });
			const chunk = { id: "chatcmpl-doneopen", object: "chat.completion.chunk", created: 1, model: "m" };
			const choice = (delta, finish) => ({ ...chunk, choices: [{ index: 0, delta, finish_reason: finish }] });
			ctx.res.write(`data: ${JSON.stringify(choice({ role: "assistant", content: "Hello there" }, null))}\n\n`);
			ctx.res.write(`data: ${JSON.stringify(choice({}, "stop"))}\n\n`);
			const usage = { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 };
			ctx.res.write(`data: ${JSON.stringify({ ...chunk, choices: [], usage })}\n\ndata: [DONE]\n\n`);
			while (!ctx.gone) {
				await sleep(200);
				if (!ctx.gone) ctx.res.write(": ping\n\n");
			}
		},
	},
	// A node that accepts a stream and never produces a token (vLLM sends a stream's headers at
	// once): headers, the role chunk, then `: ping` keep-alives until the gateway gives up. A
	// non-stream request gets nothing at all (vLLM answers it only when it is done).
	mute: {
		early: async (ctx) => {
			if (ctx.body?.stream !== true) return;
			ctx.res.writeHead(200, { "content-type": "text/event-stream" });
			const chunk = { id: "chatcmpl-mute", object: "chat.completion.chunk", created: 1, model: "m" };
			ctx.res.write(
				`data: ${JSON.stringify({ ...chunk, choices: [{ index: 0, delta: { role: "assistant", content: "" } }] })}\n\n`,
			);
			while (!ctx.gone) {
				await sleep(200);
				if (!ctx.gone) ctx.res.write(": ping\n\n");
			}
		},
	},
	// Prefix-cache hits: half the prompt cached, reported as vLLM does (`prompt_tokens_details`), as
	// llama.cpp does (`timings.cache_n` on the finish chunk), and an engine claiming more than the prompt.
	cached: { cachedShare: 0.5 },
	cachedllama: { cachedShare: 0.5, usage: "finish" },
	overcached: { cachedShare: 3 },
	// A long answer as a real engine makes one, sped up for tests: 90 words 30 ms apart (2.7 s,
	// longer than the tests' first-byte and idle timeouts together), first token at once.
	long: { delayMs: 30, exactWords: 90 },
	// A weak model that never closes its tool call's arguments (`{"query":"…` with no `"}`).
	brokentool: { brokenToolArgs: true },
	// Headers arrive late but within the first-byte timeout.
	slowheaders: { headerDelayMs: 600 },
	// llama.cpp on a slow machine: the prompt's prefill (0.5 ms a token: 2,000 tokens a second)
	// comes before the headers, and the finish chunk's `timings.prompt_n`/`prompt_ms` report it
	// (llama.cpp server README, "timings" of /completion and the OpenAI-compatible stream).
	slowprefill: { prefillMsPerToken: 0.5, usage: "finish" },
	// An answer that lasts until the test releases it (POST /_engine/release), data throughout.
	gated: { gate: true, minWords: 40 },
	// A non-stream answer that takes about 3 s, sending data throughout.
	slowbody: { bodyMs: 3000, minWords: 40 },
	// An agent's tool loop (Claude Code): call Bash with `echo hi` once, then answer with what it printed.
	"tool-loop": { plan: planToolLoop },
	// Claude Code's WebSearch tool, deferred (its default): found with ToolSearch, then called once with
	// a query; Claude Code then asks the gateway with Anthropic's web search server tool, whose search
	// round this engine's search call starts (dev/engine-tool-search.mjs).
	"websearch-loop": { plan: planDeferredTool, toolName: "WebSearch", toolInput: { query: "search volcano eruptions" } },
	// A deferred tool found by keywords (Claude Code's ToolSearch, or the gateway's venym_tool_search),
	// then called: Claude Code's CronList, which lists nothing and needs no permission.
	"deferred-tool": { plan: planDeferredTool, toolName: "CronList", searchQuery: "cron list", toolInput: {} },
	// Qwen Code's shell tool: `run_shell_command` with `echo hi` once, then what it printed.
	"qwen-loop": {
		plan: planToolLoop,
		toolName: "run_shell_command",
		toolInput: { command: "echo hi", description: "Print hi", is_background: false },
	},
	// Codex CLI (dev/engine-codex.mjs): reasons, runs `exec_command` with `echo hi` when asked to
	// run something, answers with the tool's output, and says what earlier reasoning it was given.
	codex: { plan: planCodex },
	searchfail: { searchFail: true },
	// A search round's second call (the conversation ends with the search's result) answers slowly, or fails.
	"search-slow-answer": { afterTool: { bodyMs: 3000, minWords: 40 } },
	"search-failed-answer": { failOn: '"tool_call_id"' },
	// The second call starts answering, then goes silent (the stream idle timeout ends it).
	"search-mute-answer": { afterTool: { stallAfter: 2 } },
	// The second call's headers come late (within the first-byte timeout).
	"search-late-answer": { afterTool: { headerDelayMs: 5000 } },
	// Says something first, then calls the tool in the same answer.
	"search-late": { sayBeforeTool: "Let me look that up." },
	searchslow: { searchDelayMs: 5000 },
	// A search backend that answers once the test releases it (POST /_engine/release with text of the query).
	searchgated: { gateSearch: true },
	// A context of 4096 tokens, enforced as vLLM does (prompt + max tokens).
	ctx4096: { contextLength: 4096 },
	// A search backend whose answer is valid JSON of 16 MiB.
	searchhuge: { searchPadBytes: 16 * 1024 * 1024 },
	// Calls web_search again in the search round's second call, after a few words.
	"search-again": { afterTool: { plan: planSearchAgain, sayBeforeTool: "Here is what I found." } },
};

export const scenarioNames = Object.keys(SCENARIOS);
