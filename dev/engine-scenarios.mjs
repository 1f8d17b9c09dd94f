// The development engine's scenarios. A `/s/<name>` path prefix picks one, so a gateway
// config chooses an engine behaviour just by naming a node URL (http://127.0.0.1:PORT/s/cut/v1).
// Each is one realistic quirk of a real engine; a new quirk is one entry here, and
// dev/engine.mjs reads only the keys below, never a scenario's name.
//
// The rule (docs/engines.md, "The fake engine and the real one"): the fake keeps what the real
// llama-server of `npm run test:engines` cannot show (vLLM-only and SGLang-only behaviour, and
// faults), and each behaviour names the engine it imitates and where that is written down:
// "vLLM:", "SGLang:", "llama.cpp:", "Ollama:", "OpenAI:", or "fault:" (any engine or the network
// between; no engine documents its own breakage). Paths are files in the engine's repository.
// A behaviour the real llama-server also shows says where ("real: test/engines/<file>");
// it stays here because the workerd integration tests cannot start a real engine per test.
//
//   early(ctx)                 answers instead of the endpoint (every endpoint, so a broken
//                              node is broken for /v1/models too); ctx is
//                              { req, res, url, body, record, behaviour, delayMs, gone, selfClosed }
//                              [fault: any engine / network]
//   healthy                    `early` spares the health checks (/health, /metrics): a node
//                              that refuses bad requests is not a sick node [fault; llama.cpp's
//                              and vLLM's /health answer 200 while requests fail]
//   failAfter, failure,        the chat answer breaks after that many stream payloads with
//   failureStatus              `failure` (an error body, or "cut": the connection closes)
//                              [fault; the in-stream error frame is vLLM's,
//                              vllm/entrypoints/openai/serving_chat.py; real: a killed
//                              llama-server, test/engines/routing.test.ts]
//   usage                      "final" (default: OpenAI's usage-only last chunk, its API
//                              reference's chat completion chunk object; real: test/engines/chat.test.ts),
//                              "none" (fault: include_usage ignored), "cumulative" (vLLM:
//                              `stream_options.continuous_usage_stats`, vllm/entrypoints/openai/
//                              protocol.py StreamOptions) or "finish" (llama.cpp before
//                              github.com/ggml-org/llama.cpp/issues/15443: usage and `timings` on
//                              the finish chunk)
//   usageOverride              usage reported whatever was generated (chat, legacy, embeddings)
//                              [fault: an engine's counts taken on trust]
//   byteTokens                 { imageTokens }: prompt tokens counted as a byte-level tokenizer
//                              at worst (one per UTF-8 byte, imageTokens per image) [vLLM serving
//                              Qwen2.5-VL: vllm/model_executor/models/qwen2_5_vl.py]
//   oneChoiceUsage             completion tokens of the first choice only (llama.cpp with `n`;
//                              ../shared/engines/README.md; real: test/engines/chat.test.ts)
//   prefix, eol, comments,     SSE framing: "data:" without the space, CRLF, `: ping`
//   split                      comments between frames, frames cut into awkward TCP pieces
//                              [fault: any server or proxy may; the WHATWG SSE format allows all
//                              of it, html.spec.whatwg.org/multipage/server-sent-events.html]
//   suffix, minWords,          the answer's words [any engine: content only]
//   exactWords
//   reasoningField             streams reasoning deltas under that field [vLLM: `reasoning`
//                              (`reasoning_content` before), docs.vllm.ai/en/v0.11.2/features/
//                              reasoning_outputs/; SGLang's --reasoning-parser: `reasoning_content`]
//   delayMs, headerDelayMs     pause between stream frames (non-stream: the whole answer),
//                              and before the headers [fault: a slow engine or network]
//   prefillMsPerToken          the prompt is read at this many ms a token before the headers (a
//                              long prompt's slow prefill), and `timings.prompt_ms` says so
//                              [llama.cpp: `timings`, tools/server/README.md]
//   stallAfter                 headers (and that many frames), then silence [fault]
//   cachedShare                that share of the prompt reported as served from the prefix cache
//                              [vLLM: `prompt_tokens_details.cached_tokens` with
//                              --enable-prompt-tokens-details, vllm/entrypoints/openai/protocol.py
//                              PromptTokenUsageInfo; with usage "finish", llama.cpp's
//                              `timings.cache_n`, tools/server/README.md]
//   brokenToolArgs             tool-call arguments cut before their closing `"}` [fault: a weak
//                              model on any engine; vLLM's tool parsers and llama.cpp relay the
//                              model's raw arguments, ../shared/engines/README.md]
//   bodyMs                     the answer spread over that many ms, data throughout (a non-stream
//                              one dribbled, a stream's frames paced) [fault: a slow engine]
//   gate                       the answer waits after its first frame (a stream: empty chunks
//                              every 200 ms) until a test releases it (dev/engine-gate.mjs)
//                              [a test's control: a long answer, the empty chunks a working
//                              engine sends (no content, `finish_reason: null`)]
//   searchFail, searchDelayMs  the search endpoint fails or is slow [fault of the search backend,
//                              whose JSON is SearXNG's, docs.searxng.org/dev/search_api.html]
//   searchPadBytes             the search endpoint's JSON carries that many bytes of padding [fault]
//   contextLength              a chat request whose prompt and max tokens exceed it gets vLLM's 400
//                              [vLLM: vllm/entrypoints/openai/serving_engine.py; llama.cpp answers
//                              `exceed_context_size_error` instead, ../shared/engines/README.md]
//   sayBeforeTool              this text first, then the tool call, in one answer [llama.cpp and
//                              vLLM's hermes tool parser both stream content before a call;
//                              ../shared/engines/README.md]
//   afterTool                  behaviour merged in when the conversation ends with a tool's result
//                              (the second call of the gateway's search round) [a test's control]
//   failOn                     a request whose body contains this text answers 500 (an input
//                              that crashes the engine); others are served as usual [fault]
//   echoAuth                   the request's Authorization is echoed in the answer: in the
//                              content (a stream splits the token over two frames), the legacy
//                              text, and the `failure` message [fault: a hostile or broken node]
//   echoEscaped                with echoAuth: the echo written with JSON `\u` escapes (mixed-case
//                              hex), as the content a client parses (`{"authorization": …}`), in a
//                              tool call's arguments, and in each embedding's raw JSON; a stream
//                              splits it every 8 characters, escapes included [fault]
//   plan, toolName, toolInput  replaces planReply (engine-reply.mjs): tool-loop calls the tool
//                              `toolName` once with `toolInput`, then answers with its result
//                              [a model's choices; the calls are streamed as vLLM streams them
//                              (`call_` ids, arguments in fragments), vllm/entrypoints/openai/
//                              serving_chat.py; real tool calls: test/engines/chat.test.ts]
//   searchQuery                what a deferred tool is searched for (engine-tool-search.mjs)
//                              [a model's choice]
//   queue                      what `/metrics` reports: { waiting, running, kv_cache_usage }
//                              (a named node's queue is set at runtime, dev/engine-nodes.mjs)
//                              [vLLM: `vllm:num_requests_waiting`, `vllm:num_requests_running`,
//                              `vllm:kv_cache_usage_perc`, vllm/v1/metrics/loggers.py; llama.cpp's
//                              own /metrics and /slots: real, test/engines/routing.test.ts]

import { planCodex } from "./engine-codex.mjs";
import { planSearchAgain, planToolLoop } from "./engine-tool-loop.mjs";
import { planDeferredTool } from "./engine-tool-search.mjs";
import { closeAbruptly, flatError, nestedError, sendJson, sendText, sleep } from "./engine-wire.mjs";

const MULTIBYTE_TEXT = "héllo 👋 世界";

export const SCENARIOS = {
	// OpenAI: a healthy stream, usage alone on a last chunk with no choices (OpenAI's API reference, the chat
	// completion chunk object). Also checked against the real llama-server: test/engines/chat.test.ts.
	// The default for every path without `/s/<name>`.
	ok: {},
	// fault: an engine's 500 before any byte, in the nested error shape of vLLM's ErrorResponse
	// (vllm/entrypoints/openai/protocol.py).
	fail500: {
		early: (ctx) => sendJson(ctx.res, 500, { error: { message: "engine exploded", type: "server_error" } }),
	},
	// fault: crashes on one input only: every node answers 500 to a request that carries "POISON".
	poison: { failOn: "POISON" },
	// fault: a plain-text 503 from whatever sits in front of the engine (a load balancer or proxy with no
	// upstream).
	fail503: { early: (ctx) => sendText(ctx.res, 503, "Service Unavailable") },
	// OpenAI: a 429 with `retry-after`, as OpenAI and the proxies in front of engines send it
	// (platform.openai.com/docs/guides/error-codes).
	fail429: {
		early: (ctx) =>
			sendJson(ctx.res, 429, nestedError("Rate limit reached, slow down", "rate_limit_error", 429), {
				"retry-after": "1",
			}),
	},
	// vLLM: a refusal in the nested error shape with vLLM's context-length wording
	// (vllm/entrypoints/openai/serving_engine.py); `healthy`: the node is not sick.
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
	// SGLang: a refusal in the flat error shape (`object: "error"`, no `error` wrapper), SGLang's and older
	// vLLM's ErrorResponse (python/sglang/srt/entrypoints/openai/protocol.py, vllm/entrypoints/openai/protocol.py).
	flat400: {
		healthy: true,
		early: (ctx) => sendJson(ctx.res, 400, flatError("flat: bad temperature", "BadRequestError", 400)),
	},
	// fault: never sends headers: the gateway's time-to-first-byte timeout must fire. The close
	// listener in watchClose() records the gateway walking away.
	hang: { early: () => {} },
	// fault on llama.cpp: passes its health checks but never answers a request: llama.cpp's /health says ok
	// while a request waits on a slot that never frees (a stuck generation); the probes cannot tell
	// (GET /health, tools/server/README.md).
	stuck: { healthy: true, early: () => {} },
	// fault: the connection closes before any byte (a node that died). Also checked against the real
	// llama-server, killed: test/engines/routing.test.ts.
	drop: { early: (ctx) => closeAbruptly(ctx) },
	// fault on vLLM's wire: an error frame mid-stream, as vLLM writes one when generation fails
	// (vllm/entrypoints/openai/serving_chat.py). A killed real llama-server: test/engines/routing.test.ts.
	midstream: {
		minWords: 6,
		failAfter: 3,
		failure: { error: { message: "CUDA out of memory", type: "server_error", code: 500 } },
	},
	// fault on SGLang's wire: the same mid-stream failure in the flat error shape
	// (python/sglang/srt/entrypoints/openai/protocol.py ErrorResponse).
	midflat: { minWords: 6, failAfter: 3, failure: flatError("CUDA out of memory", "InternalServerError", 500) },
	// fault: the connection closes mid-stream without an error frame. Also checked against the real
	// llama-server, killed mid-stream: test/engines/routing.test.ts.
	cut: { minWords: 6, failAfter: 3, failure: "cut" },
	// fault: answers 200 with nothing but an error body (some servers and proxies do): no content ever arrives.
	error200: {
		failAfter: 0,
		failureStatus: 200,
		failure: { error: { message: "model is loading", type: "server_error", code: 503 } },
	},
	// fault: an engine or proxy that ignores `stream_options.include_usage` (no usage at all), framed with
	// "data:" without the space (allowed by html.spec.whatwg.org/multipage/server-sent-events.html).
	nousage: { usage: "none", prefix: "data:" },
	// vLLM: usage on every chunk, running totals (`stream_options.continuous_usage_stats`,
	// vllm/entrypoints/openai/protocol.py StreamOptions).
	cumulative: { usage: "cumulative" },
	// llama.cpp: usage and `timings` on the finish chunk, as llama-server sent them before
	// github.com/ggml-org/llama.cpp/issues/15443, with CRLF line ends (a proxy's rewrite; the SSE format
	// allows it). The current llama-server's usage chunk: test/engines/chat.test.ts.
	finishusage: { usage: "finish", eol: "\r\n" },
	// fault: `: ping` comments between frames (sse-starlette's keep-alive, sse_starlette/sse.py, as
	// Python servers send it), frames split into awkward TCP pieces, multibyte text split mid-character.
	comments: { comments: true, split: true, suffix: MULTIBYTE_TEXT },
	// fault: a slow engine: 50 ms between tokens, 40 words.
	slow: { delayMs: 50, exactWords: 40 },
	// vLLM: reasoning deltas under `reasoning` (docs.vllm.ai/en/v0.11.2/features/reasoning_outputs/;
	// `reasoning_content` before, and SGLang's --reasoning-parser, is what a `reasoning_effort` request gets).
	reasoning: { reasoningField: "reasoning" },
	// fault: sends headers (and a few frames when streaming) and then nothing, holding the socket open.
	stall: { stallAfter: 2 },
	// fault: usage no engine could have produced: absurd counts, on both lanes.
	hugeusage: { usageOverride: { prompt_tokens: 1e300, completion_tokens: 7, total_tokens: 1e300 } },
	// llama.cpp: a big but honest prompt count: within the context, far over the gateway's estimate (the chat
	// template's own tokens; measured against the real llama-server: test/engines/token-estimate.test.ts).
	bigprompt: { usageOverride: { prompt_tokens: 1040, completion_tokens: 1, total_tokens: 1041 } },
	// vLLM: an honest byte-level tokenizer on CJK, rare 3-byte characters and images (16,384 tokens each,
	// Qwen2.5-VL's largest, vllm/model_executor/models/qwen2_5_vl.py): far more tokens than the gateway's
	// chars/4 estimate, within its bound.
	bytetok: { byteTokens: { imageTokens: 16_384 } },
	// llama.cpp: with `n: 2` (or a legacy prompt array) every choice returned, one choice's tokens counted
	// (../shared/engines/README.md). Also checked against the real llama-server: test/engines/chat.test.ts.
	onechoice: { oneChoiceUsage: true },
	// fault: 0/0 usage beside a whole answer.
	zerousage: { usageOverride: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 } },
	// fault: negative and fractional counts.
	negusage: { usageOverride: { prompt_tokens: -50, completion_tokens: 2.5, total_tokens: -47.5 } },
	// fault: a stream whose one event never ends: 2 MB without a newline.
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
	// fault: a refusal that echoes the request's Authorization header inside a 2 MB message.
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
	// fault: echoes its Authorization header in the completion text, the token split over two frames.
	echoauthcontent: { echoAuth: true },
	// fault: echoes its Authorization header written with JSON escapes, where the client decodes them.
	echoauthescaped: { echoAuth: true, echoEscaped: true },
	// fault: fails mid-stream with its Authorization header in the error message.
	echoauthmid: {
		echoAuth: true,
		minWords: 6,
		failAfter: 3,
		failure: { error: { message: "CUDA out of memory", type: "server_error", code: 500 } },
	},
	// fault: answers 200 with an error body that echoes its Authorization header.
	echoauth200: {
		echoAuth: true,
		failAfter: 0,
		failureStatus: 200,
		failure: { error: { message: "model is loading", type: "server_error", code: 503 } },
	},
	// fault: keep-alives forever and nothing else: one chunk then `: ping` comments (stream), or
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
	// fault: a whole answer and `data: [DONE]`, then the response left open with `: ping` comments until
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
	// fault on vLLM's wire: a node that accepts a stream and never produces a token (vLLM sends a stream's
	// headers and role chunk at once, vllm/entrypoints/openai/serving_chat.py): then `: ping` keep-alives
	// until the gateway gives up. A non-stream request gets nothing at all (vLLM answers it only when done).
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
	// vLLM: half the prompt served from the prefix cache, in `prompt_tokens_details.cached_tokens`
	// (--enable-prompt-tokens-details; vllm/entrypoints/openai/protocol.py PromptTokenUsageInfo).
	cached: { cachedShare: 0.5 },
	// llama.cpp: the same hit in `timings.cache_n` on the finish chunk only (tools/server/README.md).
	// The current llama-server also sends `prompt_tokens_details`: real, test/engines/chat.test.ts, lanes.test.ts.
	cachedllama: { cachedShare: 0.5, usage: "finish" },
	// fault: an engine claiming more cached tokens than the prompt.
	overcached: { cachedShare: 3 },
	// fault: a long answer as a real engine makes one, sped up for tests: 90 words 30 ms apart (2.7 s,
	// longer than the tests' first-byte and idle timeouts together), first token at once.
	long: { delayMs: 30, exactWords: 90 },
	// fault: a weak model that never closes its tool call's arguments (`{"query":"…` with no `"}`); the
	// engines relay the model's raw text (../shared/engines/README.md, llama.cpp's cut call).
	brokentool: { brokenToolArgs: true },
	// fault: headers arrive late but within the first-byte timeout.
	slowheaders: { headerDelayMs: 600 },
	// llama.cpp: on a slow machine the prompt's prefill (0.5 ms a token: 2,000 tokens a second)
	// comes before the headers, and the finish chunk's `timings.prompt_n`/`prompt_ms` report it
	// (tools/server/README.md, "timings"). The real llama-server's timings: test/engines/chat.test.ts.
	slowprefill: { prefillMsPerToken: 0.5, usage: "finish" },
	// fault: an answer that lasts until the test releases it (POST /_engine/release), data throughout.
	gated: { gate: true, minWords: 40 },
	// fault: a non-stream answer that takes about 3 s, sending data throughout.
	slowbody: { bodyMs: 3000, minWords: 40 },
	// vLLM: tool calls streamed as vLLM streams them (`call_` ids, arguments in fragments,
	// vllm/entrypoints/openai/serving_chat.py), for an agent's tool loop (Claude Code): call Bash with
	// `echo hi` once, then answer with what it printed. Real llama.cpp tool calls: test/engines/chat.test.ts.
	"tool-loop": { plan: planToolLoop },
	// vLLM: tool calls as in tool-loop, for Claude Code's WebSearch tool, deferred (its default): found with
	// ToolSearch, then called once with a query; Claude Code then asks the gateway with Anthropic's web
	// search server tool, whose search round this engine's search call starts (dev/engine-tool-search.mjs).
	// No test names it: `npm start`'s catalog (wrangler.toml) and scripts/check-claude-code.mjs do.
	"websearch-loop": { plan: planDeferredTool, toolName: "WebSearch", toolInput: { query: "search volcano eruptions" } },
	// vLLM: tool calls as in tool-loop, for a deferred tool found by keywords (Claude Code's ToolSearch, or the
	// gateway's venym_tool_search), then called: Claude Code's CronList, which lists nothing and needs no permission.
	"deferred-tool": { plan: planDeferredTool, toolName: "CronList", searchQuery: "cron list", toolInput: {} },
	// vLLM: tool calls as in tool-loop, for Qwen Code's shell tool: `run_shell_command` with `echo hi` once, then
	// what it printed.
	"qwen-loop": {
		plan: planToolLoop,
		toolName: "run_shell_command",
		toolInput: { command: "echo hi", description: "Print hi", is_background: false },
	},
	// vLLM: Codex CLI (dev/engine-codex.mjs) against a reasoning model: `reasoning_content` in every answer
	// and taken back on assistant messages (docs.vllm.ai/en/v0.11.2/features/reasoning_outputs/); runs
	// `exec_command` with `echo hi` when asked to run something, answers with the tool's output, and says
	// what earlier reasoning it was given.
	codex: { plan: planCodex },
	// fault: the search backend answers 500 (its JSON is SearXNG's: docs.searxng.org/dev/search_api.html).
	searchfail: { searchFail: true },
	// fault: a search round's second call (the conversation ends with the search's result) answers slowly.
	"search-slow-answer": { afterTool: { bodyMs: 3000, minWords: 40 } },
	// fault: the search round's second call fails (500).
	"search-failed-answer": { failOn: '"tool_call_id"' },
	// fault: the second call starts answering, then goes silent (the stream idle timeout ends it).
	"search-mute-answer": { afterTool: { stallAfter: 2 } },
	// fault: the second call's headers come late (within the first-byte timeout).
	"search-late-answer": { afterTool: { headerDelayMs: 5000 } },
	// llama.cpp: says something first, then calls the tool in the same answer (the real llama-server
	// puts free text before a call, ../shared/engines/README.md; vLLM's hermes parser streams both).
	"search-late": { sayBeforeTool: "Let me look that up." },
	// fault: the search backend answers after 5 s.
	searchslow: { searchDelayMs: 5000 },
	// fault: a search backend that answers once the test releases it (POST /_engine/release with text of the query).
	searchgated: { gateSearch: true },
	// vLLM: a context of 4096 tokens, enforced as vLLM does (prompt + max tokens; its 400,
	// vllm/entrypoints/openai/serving_engine.py). llama.cpp refuses differently (`exceed_context_size_error`).
	ctx4096: { contextLength: 4096 },
	// fault: a search backend whose answer is valid JSON of 16 MiB.
	searchhuge: { searchPadBytes: 16 * 1024 * 1024 },
	// fault: a model that calls web_search again in the search round's second call, after a few words.
	"search-again": { afterTool: { plan: planSearchAgain, sayBeforeTool: "Here is what I found." } },
};

export const scenarioNames = Object.keys(SCENARIOS);
