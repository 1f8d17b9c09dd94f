// The development engine's legacy `/v1/completions` and `/v1/embeddings`: what vLLM, llama.cpp
// and Ollama serve beside chat. Echoes the prompt back word by word (capped by max_tokens),
// reports usage as vLLM does, and streams `text_completion` chunks with a final usage chunk.
// With `response_format` (vLLM takes it here too) the text is JSON (dev/engine-structured.mjs).
import { keepAliveUntil } from "./engine-gate.mjs";
import { structuredText } from "./engine-structured.mjs";
import { sendJson } from "./engine-wire.mjs";

/** Stands for the escaped echo in an embeddings body until it is written out as is. */
const ECHO_MARK = "__venym_echo__";

const words = (text) => text.split(/\s+/).filter(Boolean);

function promptsOf(prompt) {
	if (typeof prompt === "string") return [prompt];
	if (Array.isArray(prompt) && prompt.every((p) => typeof p === "number")) return [prompt];
	return Array.isArray(prompt) ? prompt : [];
}

/** A prompt's tokens: about 4 characters a token, or (`byteTokens`) one per UTF-8 byte as a byte-level tokenizer at worst. */
const tokensOf = (p, behaviour) =>
	typeof p !== "string" ? p.length : behaviour?.byteTokens ? Buffer.byteLength(p) : Math.ceil(p.length / 4);

/** POST /v1/completions: one choice per prompt × n, "Echo: <prompt words>" (or JSON as asked) capped at max_tokens. */
export async function legacyCompletions(ctx) {
	const { body, res, record } = ctx;
	const prompts = promptsOf(body?.prompt);
	if (prompts.length === 0) {
		return sendJson(res, 400, { error: { message: "prompt is required", type: "BadRequestError", param: "prompt", code: 400 } });
	}
	const n = Number.isInteger(body.n) ? body.n : 1;
	const max = Number.isInteger(body.max_tokens) ? body.max_tokens : 16;
	const id = `cmpl-dev${record.id}`;
	const created = Math.floor(Date.now() / 1000);
	const model = body.model;
	const choices = [];
	let completionTokens = 0;
	const behaviour = ctx.behaviour ?? {};
	prompts.forEach((p, pi) => {
		const text = typeof p === "string" ? p : p.join(" ");
		const structured = structuredText(body.response_format, text);
		const echo = ctx.behaviour?.echo ? ["Authorization:", ...words(ctx.behaviour.echo)] : [];
		const all = structured !== null ? words(structured) : ["Echo:", ...words(text), ...echo];
		const out = all.slice(0, max);
		for (let k = 0; k < n; k++) {
			// `oneChoiceUsage`: only the first choice is counted (llama.cpp with `n` or a prompt array).
			if (!behaviour.oneChoiceUsage || (pi === 0 && k === 0)) completionTokens += out.length;
			choices.push({ index: pi * n + k, out, finish: all.length > max ? "length" : "stop" });
		}
	});
	const counted = {
		// SGLang renders `suffix` with each prompt into its fill-in-the-middle completion template.
		prompt_tokens: prompts.reduce(
			(a, p) => a + tokensOf(p, behaviour) + (typeof body.suffix === "string" ? tokensOf(body.suffix, behaviour) : 0),
			0,
		),
		completion_tokens: completionTokens,
		total_tokens: 0,
	};
	counted.total_tokens = counted.prompt_tokens + counted.completion_tokens;
	const usage = behaviour.usageOverride ?? counted;
	if (body.stream !== true) {
		return sendJson(res, 200, {
			id,
			object: "text_completion",
			created,
			model,
			choices: choices.map((c) => ({ index: c.index, text: c.out.join(" "), logprobs: null, finish_reason: c.finish })),
			usage,
		});
	}
	res.writeHead(200, { "content-type": "text/event-stream" });
	const frames = [];
	const frame = (v) => frames.push(`data: ${JSON.stringify(v)}\n\n`);
	for (const c of choices) {
		c.out.forEach((w, i) => {
			const text = i ? ` ${w}` : w;
			// An echoed token goes out in two halves, as in chat (engine-reply.mjs).
			const pieces =
				c.out[i - 1] === "Bearer" && w.length >= 8 ? [text.slice(0, text.length >> 1), text.slice(text.length >> 1)] : [text];
			for (const piece of pieces) {
				frame({
					id,
					object: "text_completion",
					created,
					model,
					choices: [{ index: c.index, text: piece, logprobs: null, finish_reason: null }],
				});
			}
		});
		frame({
			id,
			object: "text_completion",
			created,
			model,
			choices: [{ index: c.index, text: "", logprobs: null, finish_reason: c.finish }],
		});
	}
	// llama.cpp (`oneChoiceUsage`) sends its speed figures beside the usage it reports.
	const timings = behaviour.oneChoiceUsage
		? { timings: { prompt_n: usage.prompt_tokens, predicted_n: usage.completion_tokens } }
		: {};
	if (body.stream_options?.include_usage)
		frame({ id, object: "text_completion", created, model, choices: [], usage, ...timings });
	frames.push("data: [DONE]\n\n");
	// `gate`: after the first frame, empty chunks (as in chat) until the test releases the request.
	const empty = `data: ${JSON.stringify({ id, object: "text_completion", created, model, choices: [{ index: 0, text: "", logprobs: null, finish_reason: null }] })}\n\n`;
	for (const [i, f] of frames.entries()) {
		if (i === 1 && ctx.behaviour?.gate) await keepAliveUntil(ctx, ctx.released, empty);
		if (ctx.gone) return;
		res.write(f);
	}
	res.end();
}

/** POST /v1/embeddings: a deterministic 8-dimension vector per input (or `dimensions`), usage as vLLM reports it. */
export function embeddings(ctx) {
	const { body, res } = ctx;
	const inputs = promptsOf(body?.input);
	if (inputs.length === 0) {
		return sendJson(res, 400, { error: { message: "input is required", type: "BadRequestError", param: "input", code: 400 } });
	}
	const dims = Number.isInteger(body.dimensions) ? body.dimensions : 8;
	const data = inputs.map((input, index) => {
		const text = typeof input === "string" ? input : input.join(" ");
		const vector = Array.from({ length: dims }, (_, i) => Number((((text.length + 1) * (i + 1)) % 97) / 97).toFixed(6) * 1);
		const embedding =
			body.encoding_format === "base64" ? Buffer.from(new Float32Array(vector).buffer).toString("base64") : vector;
		// An echoing engine writes its escaped Authorization into the raw JSON (the client's JSON.parse decodes it).
		return { object: "embedding", index, embedding, ...(ctx.behaviour?.echoEscaped ? { echo: ECHO_MARK } : {}) };
	});
	const prompt = inputs.reduce((a, p) => a + tokensOf(p, ctx.behaviour), 0);
	const usage = ctx.behaviour?.usageOverride ?? { prompt_tokens: prompt, total_tokens: prompt };
	const answer = { object: "list", data, model: body.model, usage };
	if (!ctx.behaviour?.echoEscaped) return sendJson(res, 200, answer);
	const text = JSON.stringify(answer).replaceAll(`"${ECHO_MARK}"`, `"${ctx.behaviour.echo}"`);
	res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
	res.end(text);
}
