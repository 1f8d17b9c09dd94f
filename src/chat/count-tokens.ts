/**
 * `POST /v1/messages/count_tokens`: the prompt's tokens as the model's own engine counts them,
 * else the gateway's estimate (about four characters a token, the same figure a hold starts
 * from). Nothing is held, billed or recorded.
 *
 * Asked: the model's undrained nodes with `tokenize: true`, in order, within one deadline. A node
 * is first asked the way llama.cpp counts a chat prompt: `POST {root}/apply-template` with the chat
 * body (its own chat template, tools included) gives `{prompt}`, and `POST {root}/tokenize` with
 * that text gives `{tokens}`, special tokens parsed as the chat path parses them. A node without
 * `/apply-template` (404/405/501: vLLM, SGLang) is remembered as one and asked its chat form of
 * `/tokenize` (`{model, messages, tools, add_generation_prompt}` → `{count, tokens}`).
 */
import { type EngineNode, type ModelConfig, modelNodes } from "../config";
import { estimatePromptTokens } from "../estimate";
import { readCappedText } from "../http/read-capped";
import { serverRoot } from "../routing/probe";
import { type Secrets, secretNamed } from "../secrets";

/** How long the nodes together may take to count; then the estimate answers. */
export const TOKENIZE_TIMEOUT_MS = 2_000;
/** Nodes asked at most, one after another, before the estimate answers. */
const MAX_NODES_ASKED = 2;
/** The most of a tokenizer or template answer read (a token list for a long prompt). */
const MAX_TOKENIZE_BYTES = 4 * 1024 * 1024;
/** A count above this is no engine's answer to a prompt that fits a request body. */
const MAX_COUNT = 50_000_000;

export interface TokenCount {
	input_tokens: number;
	/** Where the count came from (the `x-venym-token-count` header). */
	source: "engine" | "estimate";
}

export interface CountDeps {
	fetch: typeof fetch;
	secrets: Secrets;
	timeoutMs?: number;
}

/** Nodes known (in this isolate) to serve no `/apply-template`: asked the chat form of `/tokenize` directly. */
const chatFormNodes = new Set<string>();

/** The count in a tokenizer's answer: vLLM's `count`, else the length of `tokens`. */
export function countIn(json: unknown): number | null {
	if (typeof json !== "object" || json === null) return null;
	const { count, tokens } = json as { count?: unknown; tokens?: unknown };
	const n = typeof count === "number" ? count : Array.isArray(tokens) ? tokens.length : null;
	return n !== null && Number.isSafeInteger(n) && n >= 0 && n <= MAX_COUNT ? n : null;
}

type Post = (path: string, body: unknown) => Promise<{ status: number; json: unknown }>;

function poster(node: EngineNode, deps: CountDeps, signal: AbortSignal): Post {
	const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json" };
	const key = node.apiKeyEnv ? secretNamed(deps.secrets, node.apiKeyEnv) : undefined;
	if (typeof key === "string" && key) headers.authorization = `Bearer ${key}`;
	return async (path, body) => {
		// Called unbound: workerd's fetch refuses any other `this`.
		const send = deps.fetch;
		const res = await send(`${serverRoot(node.url)}${path}`, {
			method: "POST",
			headers,
			body: JSON.stringify(body),
			redirect: "manual",
			signal,
		});
		if (!res.ok) {
			await res.body?.cancel().catch(() => {});
			return { status: res.status, json: null };
		}
		// Read under the same deadline: a node that trickles its answer gets the estimate instead.
		const text = await readCappedText(res.body, MAX_TOKENIZE_BYTES);
		return { status: res.status, json: text === null ? null : JSON.parse(text) };
	};
}

const NOT_SERVED = new Set([404, 405, 501]);

/** llama.cpp's way: the chat template applied by the engine, then its tokenizer on that text. */
async function templateCount(post: Post, chat: Record<string, unknown>): Promise<number | null | "not served"> {
	const applied = await post("/apply-template", chat);
	if (NOT_SERVED.has(applied.status)) return "not served";
	const prompt = (applied.json as { prompt?: unknown } | null)?.prompt;
	if (typeof prompt !== "string") return null;
	// The chat path tokenizes its prompt with special tokens added and parsed (llama.cpp server-common).
	const tokenized = await post("/tokenize", { content: prompt, add_special: true, parse_special: true });
	return countIn(tokenized.json);
}

async function chatFormCount(post: Post, chat: Record<string, unknown>): Promise<number | null> {
	const { json } = await post("/tokenize", chat);
	const n = countIn(json);
	// llama.cpp's /tokenize answers a chat body it does not read with `{"tokens": []}`: no prompt is 0 tokens.
	return n === 0 ? null : n;
}

async function tokenize(node: EngineNode, post: Post, chatBody: Record<string, unknown>, model: ModelConfig) {
	const chat: Record<string, unknown> = { model: model.engine_model, messages: chatBody.messages, add_generation_prompt: true };
	if (chatBody.tools !== undefined) chat.tools = chatBody.tools;
	if (!chatFormNodes.has(node.url)) {
		const counted = await templateCount(post, chat);
		if (counted !== "not served") return counted;
		chatFormNodes.add(node.url);
	}
	return chatFormCount(post, chat);
}

/** The engine's count from the model's first tokenizing node that answers, else the estimate. */
export async function countTokens(model: ModelConfig, chatBody: Record<string, unknown>, deps: CountDeps): Promise<TokenCount> {
	const nodes = modelNodes(model)
		.filter((n) => n.weight > 0 && n.tokenize)
		.slice(0, MAX_NODES_ASKED);
	if (nodes.length > 0) {
		const controller = new AbortController();
		const timer = setTimeout(() => controller.abort(new Error("tokenize timeout")), deps.timeoutMs ?? TOKENIZE_TIMEOUT_MS);
		try {
			for (const node of nodes) {
				const counted = await tokenize(node, poster(node, deps, controller.signal), chatBody, model).catch(() => null);
				if (counted !== null) return { input_tokens: counted, source: "engine" };
				if (controller.signal.aborted) break;
			}
		} finally {
			clearTimeout(timer);
		}
	}
	return { input_tokens: estimatePromptTokens(chatBody), source: "estimate" };
}
