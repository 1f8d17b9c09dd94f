/**
 * Model fallbacks: the request's own list (OpenRouter's `models`, a list of ids, or Venice's
 * `fallbacks`, a list of `{model}`), then the requested model's configured `fallbacks`. Pure:
 * the config and the key's allowlist come in as values.
 */
import type { GatewayConfig, ModelConfig } from "../config";
import { EMBEDDINGS } from "../config-schema";
import { GatewayError } from "../errors";

/** Most entries a request may list. */
export const MAX_REQUEST_FALLBACKS = 8;

export interface RequestedFallback {
	id: string;
	/** Where it was in the body, for errors: `models[1]`, `fallbacks[0].model`. */
	param: string;
}

function invalid(message: string, param: string): GatewayError {
	return new GatewayError("invalid_request", message, { param });
}

/**
 * Reads and removes `models` / `fallbacks` from a request body (they are the gateway's, never
 * the engine's). Only their shape is checked here; `fallbackChain` checks the ids.
 */
export function takeRequestFallbacks(body: Record<string, unknown>): RequestedFallback[] {
	const hasModels = body.models !== undefined && body.models !== null;
	const hasFallbacks = body.fallbacks !== undefined && body.fallbacks !== null;
	const models = body.models;
	const fallbacks = body.fallbacks;
	delete body.models;
	delete body.fallbacks;
	if (hasModels && hasFallbacks) throw invalid("Send either 'models' or 'fallbacks', not both.", "fallbacks");
	const field = hasModels ? "models" : "fallbacks";
	const list = hasModels ? models : hasFallbacks ? fallbacks : undefined;
	if (list === undefined) return [];
	if (!Array.isArray(list)) throw invalid(`Invalid type for '${field}': expected an array.`, field);
	if (list.length > MAX_REQUEST_FALLBACKS) {
		throw invalid(`Invalid '${field}': at most ${MAX_REQUEST_FALLBACKS} models.`, field);
	}
	return list.map((entry, i) => {
		let id: unknown = entry;
		let param = `${field}[${i}]`;
		if (!hasModels) {
			if (typeof entry !== "object" || entry === null || Array.isArray(entry)) {
				throw invalid(`Invalid type for '${param}': expected an object with a 'model'.`, param);
			}
			id = (entry as Record<string, unknown>).model;
			param = `${param}.model`;
		}
		if (typeof id !== "string" || id === "") throw invalid(`Invalid type for '${param}': expected a model id.`, param);
		return { id, param };
	});
}

export interface FallbackChainInput {
	config: GatewayConfig;
	primary: ModelConfig;
	requested: readonly RequestedFallback[];
	/** Whether the calling key may use a model (its allowlist). */
	allowed: (modelId: string) => boolean;
}

export interface FallbackModel {
	model: ModelConfig;
	/** From the request (listed by the client) or from the primary model's configuration. */
	from: "request" | "config";
}

/**
 * The models to try after the primary, in order, without repeats. A listed id that is unknown
 * is a 400, one the key may not use a 403, one of another kind (embeddings vs chat) a 400, each
 * naming the entry; configured fallbacks the key may not use are skipped.
 */
export function fallbackChain(input: FallbackChainInput): FallbackModel[] {
	const { config, primary } = input;
	const seen = new Set<string>([primary.id]);
	const out: FallbackModel[] = [];
	const embeddings = primary.capabilities.includes(EMBEDDINGS);
	for (const { id, param } of input.requested) {
		if (id.includes(":")) {
			throw invalid(`Invalid value for '${param}': '${id}' is not a model id (a ':online' suffix goes on 'model').`, param);
		}
		const model = config.models.find((m) => m.id === id);
		if (!model) {
			throw new GatewayError("invalid_request", `Invalid value for '${param}': the model '${id}' does not exist.`, {
				param,
				code: "model_not_found",
			});
		}
		if (!input.allowed(id)) {
			throw new GatewayError("forbidden", `This key is not allowed to use the model '${id}'.`, { param });
		}
		if (model.capabilities.includes(EMBEDDINGS) !== embeddings) {
			throw new GatewayError("invalid_request", `Invalid value for '${param}': '${id}' serves another endpoint.`, {
				param,
				code: "unsupported_model",
			});
		}
		if (seen.has(id)) continue;
		seen.add(id);
		out.push({ model, from: "request" });
	}
	for (const id of primary.fallbacks ?? []) {
		const model = config.models.find((m) => m.id === id);
		if (!model || seen.has(id) || !input.allowed(id)) continue;
		seen.add(id);
		out.push({ model, from: "config" });
	}
	return out;
}
