/**
 * `POST /v1/messages/count_tokens`: the prompt's tokens as the model's own engine counts them
 * (vLLM's and SGLang's `POST {root}/tokenize` with the chat messages), else the gateway's
 * estimate (about four characters a token, the same figure a hold starts from). Nothing is held,
 * billed or recorded.
 */
import { type EngineNode, type ModelConfig, modelNodes } from "../config";
import { estimatePromptTokens } from "../estimate";
import { readCappedText } from "../http/read-capped";
import { serverRoot } from "../routing/probe";
import { type Secrets, secretNamed } from "../secrets";

/** How long the node may take to count; then the estimate answers. */
export const TOKENIZE_TIMEOUT_MS = 2_000;
/** The most of a tokenizer answer read (a token list for a long prompt). */
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

/** The count in a tokenizer's answer: vLLM's `count`, else the length of `tokens`. */
export function countIn(json: unknown): number | null {
	if (typeof json !== "object" || json === null) return null;
	const { count, tokens } = json as { count?: unknown; tokens?: unknown };
	const n = typeof count === "number" ? count : Array.isArray(tokens) ? tokens.length : null;
	return n !== null && Number.isSafeInteger(n) && n >= 0 && n <= MAX_COUNT ? n : null;
}

async function tokenize(
	node: EngineNode,
	model: ModelConfig,
	chatBody: Record<string, unknown>,
	deps: CountDeps,
): Promise<number | null> {
	const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json" };
	const key = node.apiKeyEnv ? secretNamed(deps.secrets, node.apiKeyEnv) : undefined;
	if (typeof key === "string" && key) headers.authorization = `Bearer ${key}`;
	const body: Record<string, unknown> = { model: model.engine_model, messages: chatBody.messages, add_generation_prompt: true };
	if (chatBody.tools !== undefined) body.tools = chatBody.tools;
	const controller = new AbortController();
	const timer = setTimeout(() => controller.abort(new Error("tokenize timeout")), deps.timeoutMs ?? TOKENIZE_TIMEOUT_MS);
	try {
		// Called unbound: workerd's fetch refuses any other `this`.
		const send = deps.fetch;
		const res = await send(`${serverRoot(node.url)}/tokenize`, {
			method: "POST",
			headers,
			body: JSON.stringify(body),
			redirect: "manual",
			signal: controller.signal,
		});
		if (!res.ok) {
			await res.body?.cancel().catch(() => {});
			return null;
		}
		// Read under the same timeout: a node that trickles its answer gets the estimate instead.
		const text = await readCappedText(res.body, MAX_TOKENIZE_BYTES);
		return text === null ? null : countIn(JSON.parse(text));
	} catch {
		return null;
	} finally {
		clearTimeout(timer);
	}
}

/** The engine's count from the model's first node that is not drained, else the estimate. */
export async function countTokens(model: ModelConfig, chatBody: Record<string, unknown>, deps: CountDeps): Promise<TokenCount> {
	const node = modelNodes(model).find((n) => n.weight > 0);
	const counted = node ? await tokenize(node, model, chatBody, deps) : null;
	if (counted !== null) return { input_tokens: counted, source: "engine" };
	return { input_tokens: estimatePromptTokens(chatBody), source: "estimate" };
}
