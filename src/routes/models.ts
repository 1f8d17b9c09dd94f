import { Hono } from "hono";
import type { AppEnv } from "../app-env";
import { modelAllowed } from "../auth/scopes";
import { loadConfig, type ModelConfig, resolveModel } from "../config";
import { GatewayError } from "../errors";

const CREATED = 1_735_689_600; // 2025-01-01: the catalog has no per-model dates; a fixed value keeps responses stable.

export function modelObject(m: ModelConfig) {
	return {
		id: m.id,
		object: "model" as const,
		created: CREATED,
		owned_by: m.owned_by,
		max_output_tokens: m.max_output_tokens,
		context_length: m.context_length ?? null,
		// The same window under the name Codex's model catalog uses (`context_window`).
		context_window: m.context_length ?? null,
		// Anthropic's Models API names (what Claude Code caches from `models.list()`): the window and the output cap.
		max_input_tokens: m.context_length ?? null,
		max_tokens: m.max_output_tokens,
		// The cached-input price is the input price unless the operator set a lower one.
		pricing: { ...m.pricing, cached_input_usd_per_mtok: m.pricing.cached_input_usd_per_mtok ?? m.pricing.input_usd_per_mtok },
		capabilities: m.capabilities,
	};
}

/** The catalog as the caller's key sees it: a key with `allowed_models` sees only those. */
export const modelsRoutes = new Hono<AppEnv>()
	.get("/", (c) => {
		const config = loadConfig(c.env.GATEWAY_CONFIG);
		const principal = c.get("principal");
		const visible = config.models.filter((m) => modelAllowed(principal, m.id));
		// One page, as both SDKs page it: OpenAI's `object: "list"`, Anthropic's `has_more`.
		return c.json({ object: "list", data: visible.map(modelObject), has_more: false });
	})
	.get("/:id{.+}", (c) => {
		const config = loadConfig(c.env.GATEWAY_CONFIG);
		const id = c.req.param("id");
		const { model } = resolveModel(config, id);
		if (!modelAllowed(c.get("principal"), model.id)) {
			throw new GatewayError("model_not_found", `The model '${id}' does not exist or you do not have access to it.`, {
				param: "model",
			});
		}
		return c.json(modelObject(model));
	});
