// What the development engine answers, decided before a byte is written: the reply plan
// (words, reasoning, tool call, usage), the stream as a list of payloads, the non-stream body
// and the search results. Pure functions of the request body and the scenario; dev/engine.mjs
// writes them to the socket. `response_format` answers come from dev/engine-structured.mjs.

import { structuredText } from "./engine-structured.mjs";

export const MODEL_IDS = ["venym-dev/echo", "venym-dev/reasoner"];
const REASONING_TEXT = "Thinking about it.";
const FILLER = "and then some more words follow to pad the answer out".split(" ");
const FRAGMENT_CHARS = 8;

export function textOf(content) {
	if (typeof content === "string") return content;
	if (!Array.isArray(content)) return "";
	return content
		.filter((part) => part?.type === "text" && typeof part.text === "string")
		.map((part) => part.text)
		.join(" ");
}

export const words = (text) => text.split(/\s+/).filter(Boolean);

export function promptTokens(messages) {
	const chars = messages.reduce((sum, message) => sum + textOf(message?.content).length, 0);
	return Math.ceil(chars / 4);
}

const IMAGE_PARTS = new Set(["image_url", "input_image", "image"]);

/**
 * Prompt tokens as an honest byte-level tokenizer may count them at worst: one per UTF-8 byte of
 * the text, `imageTokens` per image part (Qwen2.5-VL's largest image is 16,384), and 3 for each
 * message's template markers; and every string of `chat_template_kwargs`, which the chat template
 * renders when it reads them (vLLM and llama.cpp pass them to it: gpt-oss's `model_identity`,
 * SmolLM3's `custom_instructions` become system text).
 */
export function byteTokens(messages, imageTokens, kwargs) {
	let tokens = 0;
	const strings = (v) =>
		typeof v === "string"
			? Buffer.byteLength(v)
			: v && typeof v === "object"
				? Object.values(v).reduce((n, x) => n + strings(x), 0)
				: 0;
	tokens += strings(kwargs);
	for (const m of messages) {
		tokens += Buffer.byteLength(textOf(m?.content)) + 3;
		// Mistral's template renders a tool result's `tool_call_id` (and each call's `id`) as text.
		tokens +=
			strings(m?.tool_call_id) + (Array.isArray(m?.tool_calls) ? m.tool_calls.reduce((n, c) => n + strings(c?.id), 0) : 0);
		if (Array.isArray(m?.content)) tokens += m.content.filter((p) => IMAGE_PARTS.has(p?.type)).length * imageTokens;
	}
	return tokens;
}

/** The gateway's web search result (a search round's tool message), as src/search/grounding.ts writes it. */
export const isGrounding = (message) => message?.role === "tool" && textOf(message.content).startsWith("Web search results");

// Web-search grounding arrives as numbered sources in system text (or as the gateway's search
// tool's result); cite the first two so the gateway's source handling has something real to carry.
function citedSources(messages) {
	const system = messages.filter((m) => m?.role === "system" || m?.role === "developer" || isGrounding(m));
	const found = system.flatMap((m) => textOf(m.content).match(/\[\d+\]/g) ?? []);
	return [...new Set(found)].slice(0, 2);
}

function replyText(messages, last, userText) {
	if (last.role === "tool" && !isGrounding(last)) return `Tool said: ${textOf(last.content)}`;
	const [first, second] = citedSources(messages);
	if (first) return `According to ${first}, ${userText} is covered in the results${second ? ` ${second}` : ""}.`;
	return `Echo: ${userText}`;
}

/** The gateway's web search offered as a tool (`web_search`, or `venym_web_search[_n]` beside a client's own). */
const SEARCH_TOOL = /^(web_search|venym_web_search(_\d+)?)$/;

/**
 * The search tool this model calls: the gateway's (offered last), when the user asks to search
 * (or `tool_choice` names it); otherwise it is never called, as if not offered.
 */
export function searchToolCall(body, userText, n) {
	const tools = Array.isArray(body.tools) ? body.tools : [];
	const search = tools.findLast((t) => SEARCH_TOOL.test(t?.function?.name ?? ""))?.function?.name;
	const forced = body.tool_choice?.function?.name;
	if (!search || body.tool_choice === "none" || (forced && forced !== search)) return null;
	if (forced !== search && !/\bsearch\b/i.test(userText)) return null;
	return { id: `call_search${n}`, type: "function", function: { name: search, arguments: JSON.stringify({ query: userText }) } };
}

/**
 * `text` as a JSON string's body with most characters escaped: `\\uXXXX` in lower- and upper-case
 * hex by turns, every third character as it is (`/` as `\\/`), spaces always escaped, so the
 * result is one word. A client that JSON-parses it reads `text`.
 */
export function jsonEscaped(text) {
	return Array.from(text, (c, i) => {
		const hex = c.charCodeAt(0).toString(16).padStart(4, "0");
		if (i % 3 === 0 || c === " ") return `\\u${hex}`;
		if (i % 3 === 1) return `\\u${hex.toUpperCase()}`;
		return c === "/" ? "\\/" : c;
	}).join("");
}

/**
 * The local catalog's chat models (`npm start`: venym/dev-echo and venym/dev-reasoner, engine models
 * `dev-echo` and `dev-reasoner`) answer a plain question with text, as a real model does when a
 * coding agent offers its tools; any other engine model (the test catalog's `engine-…`) calls the
 * first tool it is offered, which the gateway's tool tests rely on.
 */
export const PLAIN_MODELS = ["dev-echo", "dev-reasoner"];
const answersPlainly = (body) => PLAIN_MODELS.includes(String(body.model ?? ""));

// "use the lookup tool", "call the `Bash` tool", "use a tool": the name, when one is given.
const ASKS_FOR_TOOL = /\b(?:use|call|run)\s+(?:the\s+|a\s+|your\s+)?[`"']?([\w.:-]+)?[`"']?\s*tool\b/i;

/**
 * The tool a plainly answering model calls: the one `tool_choice` names, the first when it is
 * `required`, or the one the user's last message asks for ("use the … tool", else the first
 * offered when the name is not); null when nobody asked.
 */
export function askedTool(body, userText, tools) {
	const forced = body.tool_choice?.function?.name;
	if (forced) return forced;
	const first = tools[0]?.function?.name ?? null;
	if (body.tool_choice === "required") return first;
	const asked = ASKS_FOR_TOOL.exec(userText);
	if (!asked) return null;
	return tools.some((t) => t?.function?.name === asked[1]) ? asked[1] : first;
}

function chooseTool(body, last, userText, n, behaviour) {
	if (last.role === "tool") return null;
	const searched = searchToolCall(body, userText, n);
	if (searched) return searched;
	const search = (Array.isArray(body.tools) ? body.tools : []).findLast((t) => SEARCH_TOOL.test(t?.function?.name ?? ""));
	const tools = (Array.isArray(body.tools) ? body.tools : []).filter((t) => t !== search);
	if (tools.length === 0 || body.tool_choice === "none") return null;
	const name = answersPlainly(body)
		? askedTool(body, userText, tools)
		: (body.tool_choice?.function?.name ?? tools[0]?.function?.name ?? "tool");
	if (name === null) return null;
	// An echoing engine puts its escaped Authorization where the client JSON-parses it.
	const whole = behaviour.echoEscaped
		? `{"query":${JSON.stringify(userText)},"authorization":"${behaviour.echo}"}`
		: JSON.stringify({ query: userText });
	// A weak model's arguments: the closing quote and brace never come.
	const args = behaviour.brokenToolArgs ? whole.slice(0, -2) : whole;
	return { id: `call_${n}`, type: "function", function: { name, arguments: args } };
}

function shapeWords(list, behaviour) {
	const out = behaviour.suffix ? [...list, ...words(behaviour.suffix)] : [...list];
	const target = behaviour.exactWords ?? Math.max(out.length, behaviour.minWords ?? 0);
	for (let i = 0; out.length < target; i++) out.push(FILLER[i % FILLER.length]);
	return out.slice(0, target);
}

// Split on code points, never inside a surrogate pair.
export function fragments(text) {
	const chars = Array.from(text);
	const out = [];
	for (let i = 0; i < chars.length; i += FRAGMENT_CHARS) out.push(chars.slice(i, i + FRAGMENT_CHARS).join(""));
	return out;
}

// Everything the answer will contain, decided once so stream and non-stream agree.
// Tokens are whitespace-separated words; a tool call costs one token per argument fragment.
export function planReply(body, behaviour, n) {
	const messages = body.messages;
	const last = messages.at(-1) ?? {};
	const userText = textOf(messages.findLast((m) => m?.role === "user")?.content);
	const toolCall = chooseTool(body, last, userText, n, behaviour);
	// `n` choices, each the same answer (so a test knows what every one must say).
	const choices = Number.isInteger(body.n) && body.n > 1 ? Math.min(body.n, 8) : 1;
	const wantsReasoning = body.reasoning_effort != null || /reason/i.test(String(body.model ?? ""));
	const reasoningField = behaviour.reasoningField ?? (wantsReasoning ? "reasoning_content" : null);
	const reasoningWords = reasoningField ? words(REASONING_TEXT) : [];
	const reply = behaviour.echoEscaped
		? `{"authorization":"${behaviour.echo}"}`
		: behaviour.echo
			? `${replyText(messages, last, userText)} Authorization: ${behaviour.echo}`
			: replyText(messages, last, userText);
	// Structured output is JSON as asked, never padded by a scenario (a cap can still cut it, as engines do).
	const structured = toolCall ? null : structuredText(body.response_format, userText);
	// `sayBeforeTool`: a model that starts answering, then calls the tool in the same answer.
	const before = toolCall && behaviour.sayBeforeTool ? words(behaviour.sayBeforeTool) : [];
	const fullWords = toolCall ? before : structured !== null ? words(structured) : shapeWords(words(reply), behaviour);
	const cap = body.max_completion_tokens ?? body.max_tokens;
	const capped = Number.isInteger(cap) && cap >= 0 && fullWords.length > cap;
	const contentWords = capped ? fullWords.slice(0, cap) : fullWords;
	const argFragments = toolCall ? fragments(toolCall.function.arguments) : [];
	const prompt = behaviour.byteTokens
		? byteTokens(messages, behaviour.byteTokens.imageTokens, body.chat_template_kwargs)
		: promptTokens(messages);
	// `oneChoiceUsage`: llama.cpp with `n` counts the completion tokens of one choice only.
	const completion =
		(reasoningWords.length + contentWords.length + argFragments.length) * (behaviour.oneChoiceUsage ? 1 : choices);
	return {
		choices,
		reasoningField,
		reasoningWords,
		contentWords,
		toolCall,
		argFragments,
		finish: toolCall ? "tool_calls" : capped ? "length" : "stop",
		usage: behaviour.usageOverride ?? withCached(usageOf(prompt, completion), behaviour),
	};
}

const usageOf = (prompt, completion) => ({
	prompt_tokens: prompt,
	completion_tokens: completion,
	total_tokens: prompt + completion,
});

// A prefix-cache hit on `cachedShare` of the prompt: vLLM and SGLang report it in
// `prompt_tokens_details.cached_tokens`; llama.cpp (usage "finish") in `timings.cache_n` only.
function withCached(usage, behaviour) {
	if (behaviour.cachedShare === undefined) return usage;
	const cached = Math.floor(usage.prompt_tokens * behaviour.cachedShare);
	if (behaviour.usage === "finish") return { ...usage, cache_n: cached };
	return { ...usage, prompt_tokens_details: { cached_tokens: cached } };
}

// The usage object as sent: llama.cpp's cache count goes in `timings`, never in `usage`.
const usageOnly = ({ cache_n: _, ...usage }) => usage;

// llama.cpp reports speed figures beside usage; the values only need to look plausible.
// A scenario with a slow prefill reports the time it took.
const timingsOf = ({ cache_n, ...usage }, behaviour = {}) => ({
	...(cache_n !== undefined ? { cache_n } : {}),
	prompt_n: usage.prompt_tokens,
	prompt_ms: usage.prompt_tokens * (behaviour.prefillMsPerToken ?? 0.5),
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

// A word of 8+ characters after "Bearer" (an echoed token) goes out in two halves, as a
// tokenizer would split it: a gateway must catch a secret across frames. A word with JSON
// escapes goes out 8 characters a frame, so escapes are split too.
function contentDeltas(list) {
	return list.flatMap((w, i) => {
		const text = i === 0 ? w : ` ${w}`;
		if (w.includes("\\")) return fragments(text).map((piece) => ({ content: piece }));
		if (list[i - 1] !== "Bearer" || w.length < 8) return [{ content: text }];
		const half = text.length >> 1;
		return [{ content: text.slice(0, half) }, { content: text.slice(half) }];
	});
}

function streamDeltas(plan) {
	const spaced = (w, i) => (i === 0 ? w : ` ${w}`);
	const deltas = [
		...plan.reasoningWords.map((w, i) => ({ [plan.reasoningField]: spaced(w, i) })),
		...contentDeltas(plan.contentWords),
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
export function streamPayloads(plan, meta, behaviour, includeUsage) {
	const mode = behaviour.usage ?? "final";
	const chunk = (choices, extra = {}) => ({ ...header(meta, "chat.completion.chunk"), choices, ...extra });
	let emitted = 0;
	const indexes = Array.from({ length: plan.choices ?? 1 }, (_, i) => i);
	const payloads = streamDeltas(plan).flatMap((delta) =>
		indexes.map((index) => {
			emitted += carriesToken(delta) ? 1 : 0;
			const extra = mode === "cumulative" ? { usage: usageOf(plan.usage.prompt_tokens, emitted) } : {};
			return chunk([{ index, delta, finish_reason: null }], extra);
		}),
	);
	if (behaviour.failAfter !== undefined) {
		const head = payloads.slice(0, behaviour.failAfter);
		return behaviour.failure === "cut" ? head : [...head, behaviour.failure];
	}
	const finishExtra = {
		cumulative: { usage: plan.usage },
		finish: { usage: usageOnly(plan.usage), timings: timingsOf(plan.usage, behaviour) },
	};
	for (const index of indexes) {
		const last = index === (plan.choices ?? 1) - 1;
		payloads.push(chunk([{ index, delta: {}, finish_reason: plan.finish }], last ? finishExtra[mode] : {}));
	}
	// llama.cpp (`oneChoiceUsage`) sends its speed figures beside every usage it reports.
	const llama = behaviour.oneChoiceUsage ? { timings: timingsOf(plan.usage, behaviour) } : {};
	if (includeUsage && (mode === "final" || mode === "cumulative")) payloads.push(chunk([], { usage: plan.usage, ...llama }));
	payloads.push("[DONE]");
	return payloads;
}

export function encodeFrame(payload, behaviour) {
	const eol = behaviour.eol ?? "\n";
	const data = typeof payload === "string" ? payload : JSON.stringify(payload);
	return `${behaviour.prefix ?? "data: "}${data}${eol}${eol}`;
}

// Cut inside the JSON, one byte into the first multi-byte character and between the two
// newlines that end the frame, so a parser that assumes whole frames per read breaks.
export function awkwardPieces(bytes) {
	const cuts = new Set([Math.floor(bytes.length / 2), bytes.length - 1]);
	const multibyte = bytes.findIndex((b) => b >= 0x80);
	if (multibyte >= 0) cuts.add(multibyte + 1);
	const sorted = [...cuts].filter((c) => c > 0 && c < bytes.length).sort((a, b) => a - b);
	return [0, ...sorted].map((start, i) => bytes.subarray(start, sorted[i] ?? bytes.length));
}

export function completion(plan, meta, behaviour) {
	const { toolCall, reasoningField } = plan;
	const message = { role: "assistant", content: toolCall && !plan.contentWords.length ? null : plan.contentWords.join(" ") };
	if (reasoningField) message[reasoningField] = plan.reasoningWords.join(" ");
	if (toolCall) message.tool_calls = [toolCall];
	const choices = Array.from({ length: plan.choices ?? 1 }, (_, index) => ({ index, message, finish_reason: plan.finish }));
	const body = { ...header(meta, "chat.completion"), choices };
	if (behaviour.usage !== "none") body.usage = usageOnly(plan.usage);
	if (behaviour.usage === "finish") body.timings = timingsOf(plan.usage, behaviour);
	return body;
}

export function searchResults(query) {
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
