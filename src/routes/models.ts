import { Hono } from "hono";
import type { AppEnv } from "../app-env";
import { loadConfig, type ModelConfig, resolveModel } from "../config";

const CREATED = 1_735_689_600; // 2025-01-01: the catalog has no per-model dates; a fixed value keeps responses stable.

export function modelObject(m: ModelConfig) {
	return {
		id: m.id,
		object: "model" as const,
		created: CREATED,
		owned_by: m.owned_by,
		max_output_tokens: m.max_output_tokens,
		context_length: m.context_length ?? null,
		pricing: m.pricing,
		capabilities: m.capabilities,
	};
}

export const modelsRoutes = new Hono<AppEnv>()
	.get("/", (c) => {
		const config = loadConfig(c.env.GATEWAY_CONFIG);
		return c.json({ object: "list", data: config.models.map(modelObject) });
	})
	.get("/:id{.+}", (c) => {
		const config = loadConfig(c.env.GATEWAY_CONFIG);
		return c.json(modelObject(resolveModel(config, c.req.param("id")).model));
	});
