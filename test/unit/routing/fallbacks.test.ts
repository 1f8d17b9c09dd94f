import { describe, expect, it } from "vitest";
import { parseConfig } from "../../../src/config";
import { GatewayError, toErrorResponse } from "../../../src/errors";
import { fallbackChain, takeRequestFallbacks } from "../../../src/routing/fallback-chain";

const model = (id: string, extra: Record<string, unknown> = {}) => ({
	id,
	engine_model: id,
	nodes: ["http://n.example/v1"],
	max_output_tokens: 100,
	pricing: { input_usd_per_mtok: 1, output_usd_per_mtok: 2 },
	...extra,
});

const config = parseConfig({
	models: [
		model("a", { fallbacks: ["c", "b"] }),
		model("b"),
		model("c"),
		model("d"),
		model("e", { capabilities: ["embeddings"], max_output_tokens: undefined, pricing: { input_usd_per_mtok: 1 } }),
	],
});
const a = config.models[0]!;

function errorOf(fn: () => unknown) {
	try {
		fn();
	} catch (err) {
		expect(err).toBeInstanceOf(GatewayError);
		const { status, body } = toErrorResponse(err);
		return { status, ...body.error };
	}
	throw new Error("expected an error");
}

describe("takeRequestFallbacks", () => {
	it("reads OpenRouter's models and Venice's fallbacks, and strips both from the body", () => {
		const body: Record<string, unknown> = { model: "a", models: ["b", "c"] };
		expect(takeRequestFallbacks(body)).toEqual([
			{ id: "b", param: "models[0]" },
			{ id: "c", param: "models[1]" },
		]);
		expect(body).toEqual({ model: "a" });
		const venice: Record<string, unknown> = { model: "a", fallbacks: [{ model: "d" }] };
		expect(takeRequestFallbacks(venice)).toEqual([{ id: "d", param: "fallbacks[0].model" }]);
		expect(venice).toEqual({ model: "a" });
		expect(takeRequestFallbacks({ model: "a", models: null })).toEqual([]);
	});

	it.each([
		[{ models: "b" }, "models"],
		[{ models: ["b", 3] }, "models[1]"],
		[{ fallbacks: ["b"] }, "fallbacks[0]"],
		[{ fallbacks: [{ model: "" }] }, "fallbacks[0].model"],
		[{ models: ["b"], fallbacks: [{ model: "c" }] }, "fallbacks"],
		[{ models: Array.from({ length: 9 }, () => "b") }, "models"],
	])("refuses %j with a 400 naming %s", (extra, param) => {
		const e = errorOf(() => takeRequestFallbacks({ model: "a", ...extra }));
		expect(e.status).toBe(400);
		expect(e.param).toBe(param);
	});
});

describe("fallbackChain", () => {
	const all = () => true;

	it("tries the request's list first, then the model's configured fallbacks, without repeats", () => {
		const chain = fallbackChain({
			config,
			primary: a,
			requested: [
				{ id: "d", param: "models[0]" },
				{ id: "b", param: "models[1]" },
				{ id: "a", param: "models[2]" },
			],
			allowed: all,
		});
		expect(chain.map((f) => [f.model.id, f.from])).toEqual([
			["d", "request"],
			["b", "request"],
			["c", "config"],
		]);
	});

	it("refuses an unknown id (400) and one outside the key's allowlist (403), naming the entry", () => {
		const unknown = errorOf(() =>
			fallbackChain({ config, primary: a, requested: [{ id: "zz", param: "models[0]" }], allowed: all }),
		);
		expect(unknown).toMatchObject({ status: 400, param: "models[0]", code: "model_not_found" });
		const forbidden = errorOf(() =>
			fallbackChain({ config, primary: a, requested: [{ id: "d", param: "fallbacks[0].model" }], allowed: (id) => id !== "d" }),
		);
		expect(forbidden).toMatchObject({ status: 403, param: "fallbacks[0].model" });
		const suffix = errorOf(() =>
			fallbackChain({ config, primary: a, requested: [{ id: "b:online", param: "models[0]" }], allowed: all }),
		);
		expect(suffix).toMatchObject({ status: 400, param: "models[0]" });
		const embed = errorOf(() =>
			fallbackChain({ config, primary: a, requested: [{ id: "e", param: "models[0]" }], allowed: all }),
		);
		expect(embed).toMatchObject({ status: 400, param: "models[0]", code: "unsupported_model" });
	});

	it("skips configured fallbacks the key may not use", () => {
		const chain = fallbackChain({ config, primary: a, requested: [], allowed: (id) => id !== "c" });
		expect(chain.map((f) => f.model.id)).toEqual(["b"]);
	});
});
