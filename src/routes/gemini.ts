import { type Context, Hono } from "hono";
import type { AppEnv } from "../app-env";
import { modelAllowed } from "../auth/scopes";
import { loadConfig, type ModelConfig, resolveModel } from "../config";
import { GatewayError } from "../errors";
import { countGeminiTokens, generateContent } from "../gemini/run-gemini";
import { readJsonBody } from "../http/read-json";
import { runOf } from "./chat";

const PREFIX = "/v1beta/models/";
const GENERATE = ["generateContent", "streamGenerateContent", "countTokens"] as const;

/** Whether a path is the Gemini lane's, whose errors are Google-shaped. */
export function isGeminiPath(path: string): boolean {
	return path.startsWith("/v1beta/");
}

/** `{model}:{method}` after /v1beta/models/: the model keeps its `/` (venym/dev-echo); the method follows the last `:`. */
export function splitModelPath(path: string): { model: string; method: string | null } {
	let rest = path.slice(PREFIX.length);
	try {
		rest = decodeURIComponent(rest);
	} catch {
		// Not percent-encoding after all: taken as sent.
	}
	const colon = rest.lastIndexOf(":");
	// `:online` is a model suffix, not a method.
	if (colon < 0 || rest.slice(colon + 1) === "online") return { model: rest, method: null };
	return { model: rest.slice(0, colon), method: rest.slice(colon + 1) };
}

/** A catalog model as Gemini's `Model`. */
function geminiModel(m: ModelConfig) {
	return {
		name: `models/${m.id}`,
		baseModelId: m.id,
		version: "1",
		displayName: m.id,
		inputTokenLimit: m.context_length ?? null,
		outputTokenLimit: m.max_output_tokens,
		supportedGenerationMethods: m.capabilities.includes("embeddings") ? [] : [...GENERATE],
	};
}

function notFound(model: string): GatewayError {
	return new GatewayError("model_not_found", `The model '${model}' does not exist or you do not have access to it.`, {
		param: "model",
	});
}

async function post(c: Context<AppEnv>): Promise<Response> {
	const { model, method } = splitModelPath(c.req.path);
	if (method === null || !(GENERATE as readonly string[]).includes(method)) {
		throw new GatewayError("not_found", `Unknown method '${method ?? ""}': this gateway serves ${GENERATE.join(", ")}.`);
	}
	const run = runOf(c);
	const body = await readJsonBody(c.req.raw, run.config.max_body_bytes);
	if (method === "countTokens") {
		const counted = await countGeminiTokens(run, model, body);
		return c.json(counted.body, 200, counted.headers);
	}
	const stream = method === "streamGenerateContent";
	run.log?.asked({ model, stream });
	const result = await generateContent(run, model, body, stream);
	if (result.kind === "stream") {
		run.log?.streaming();
		return new Response(result.stream, {
			headers: { ...result.headers, "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" },
		});
	}
	return c.json(result.body, 200, result.headers);
}

/** The Gemini API (`/v1beta/models…`): errors in Google's shape (app.onError). */
export const geminiRoutes = new Hono<AppEnv>()
	.get("/", (c) => {
		const config = loadConfig(c.env.GATEWAY_CONFIG);
		const principal = c.get("principal");
		return c.json({ models: config.models.filter((m) => modelAllowed(principal, m.id)).map(geminiModel) });
	})
	.get("/*", (c) => {
		const config = loadConfig(c.env.GATEWAY_CONFIG);
		const { model: id } = splitModelPath(c.req.path);
		const { model } = resolveModel(config, id);
		if (!modelAllowed(c.get("principal"), model.id)) throw notFound(id);
		return c.json(geminiModel(model));
	})
	.post("/*", post);
