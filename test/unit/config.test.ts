import { describe, expect, it } from "vitest";
import { searchRoundSize } from "../../src/chat/search-tool";
import { loadConfig, modelNodes, parseConfig, resolveModel } from "../../src/config";
import { GatewayConfigSchema } from "../../src/config-schema";
import { GatewayError, toErrorResponse } from "../../src/errors";
import { addSizes, measureChatPrompt } from "../../src/estimate";
import { HOLD_TTL_MS } from "../../src/ledger/durable/holds";
import { promptBound, worstCaseHold } from "../../src/money/hold-bound";
import { MAX_REQUEST_NANOS } from "../../src/money/nanos";
import { costNanos } from "../../src/money/pricing";

function model(extra: Record<string, unknown> = {}) {
	return {
		id: "venym/qwen-27b",
		engine_model: "Qwen/Qwen3-27B",
		nodes: ["http://10.0.0.5:8000/v1", { url: "https://node-b.example/v1/", api_key_env: "NODE_B_KEY" }],
		max_output_tokens: 8192,
		context_length: 131072,
		pricing: { input_usd_per_mtok: 0.3, output_usd_per_mtok: 1.2 },
		capabilities: ["json", "tools", "reasoning", "web_search"],
		...extra,
	};
}

function config(extra: Record<string, unknown> = {}) {
	return {
		models: [model()],
		web_search: { provider: "searxng", url: "https://search.example/search" },
		...extra,
	};
}

/** The GatewayError a bad config raises (fails the test when none is thrown). */
function configError(raw: unknown): GatewayError {
	try {
		parseConfig(raw);
	} catch (err) {
		expect(err).toBeInstanceOf(GatewayError);
		return err as GatewayError;
	}
	throw new Error("parseConfig accepted an invalid config");
}

describe("parseConfig", () => {
	it("accepts the documented example as a JSON string and as an object, with the same result", () => {
		const fromString = parseConfig(JSON.stringify(config()));
		const fromObject = parseConfig(config());
		expect(fromString).toEqual(fromObject);
		expect(fromObject.models[0]?.id).toBe("venym/qwen-27b");
		expect(fromObject.models[0]?.engine_model).toBe("Qwen/Qwen3-27B");
		expect(fromObject.web_search?.url).toBe("https://search.example/search");
	});

	it("refuses a node listed twice for one model, trailing slashes and host case aside", () => {
		const err = configError(config({ models: [model({ nodes: ["http://10.0.0.5:8000/v1", "http://10.0.0.5:8000/v1/"] })] }));
		expect(err.message).toContain("models.0.nodes.1");
		expect(err.message).toContain("already listed");
		const byObject = configError(
			config({ models: [model({ nodes: ["https://Node-B.example/v1", { url: "https://node-b.example/v1/", weight: 2 }] })] }),
		);
		expect(byObject.message).toContain("models.0.nodes.1");
		// The default port written out, a fragment, a dot segment: the same node.
		for (const [a, b] of [
			["http://10.0.0.5/v1", "http://10.0.0.5:80/v1"],
			["https://node.example/v1", "HTTPS://node.example:443/./v1/#x"],
		]) {
			expect(configError(config({ models: [model({ nodes: [a, b] })] })).message).toContain("already listed");
		}
		// The same node may serve two models.
		expect(() => parseConfig(config({ models: [model(), model({ id: "venym/other" })] }))).not.toThrow();
	});

	it("refuses model ids that differ only in case", () => {
		const err = configError(config({ models: [model(), model({ id: "Venym/Qwen-27B" })] }));
		expect(err.message).toContain("models.1.id");
		expect(err.message).toContain("only in case");
		expect(configError(config({ models: [model(), model()] })).message).toContain('duplicate model id "venym/qwen-27b"');
	});

	it("fills defaults for optional settings", () => {
		const cfg = parseConfig({ models: [model({ context_length: undefined, capabilities: undefined })] });
		const m = cfg.models[0]!;
		expect(m.context_length).toBeUndefined();
		expect(m.capabilities).toEqual([]);
		expect(cfg.first_byte_timeout_ms).toBeGreaterThan(0);
		expect(cfg.request_timeout_ms).toBe(600_000);
		expect(cfg.max_body_bytes).toBe(4 * 1024 * 1024);
		expect(cfg.web_search).toBeUndefined();
	});

	it("refuses a missing or empty config", () => {
		for (const raw of [undefined, null, ""]) {
			const err = configError(raw);
			expect(err.kind).toBe("config_invalid");
			expect(err.message).toMatch(/GATEWAY_CONFIG/);
		}
	});

	it("refuses a string that is not JSON", () => {
		const err = configError("{ models: [");
		expect(err.kind).toBe("config_invalid");
		expect(err.message).toMatch(/JSON/);
	});

	it.each([
		["models is missing", { web_search: undefined, models: undefined }, "models"],
		["models is empty", { models: [] }, "models"],
		["a model lacks max_output_tokens", { models: [model({ max_output_tokens: undefined })] }, "models.0.max_output_tokens"],
		["max_output_tokens is not positive", { models: [model({ max_output_tokens: 0 })] }, "models.0.max_output_tokens"],
		["a node URL is not a URL", { models: [model({ nodes: ["not a url"] })] }, "models.0.nodes.0"],
		["a node URL is not http(s)", { models: [model({ nodes: ["ftp://node.example/v1"] })] }, "models.0.nodes.0"],
		["nodes is empty", { models: [model({ nodes: [] })] }, "models.0.nodes"],
		[
			"pricing is negative",
			{ models: [model({ pricing: { input_usd_per_mtok: -1, output_usd_per_mtok: 1 } })] },
			"models.0.pricing.input_usd_per_mtok",
		],
		[
			"the cached-input price exceeds the input price",
			{ models: [model({ pricing: { input_usd_per_mtok: 0.3, output_usd_per_mtok: 1, cached_input_usd_per_mtok: 0.4 } })] },
			"models.0.pricing.cached_input_usd_per_mtok",
		],
		["a model id has a colon", { models: [model({ id: "venym/qwen:online" })] }, "models.0.id"],
		["a model has an unknown field", { models: [model({ surprise: true })] }, "models.0"],
		["a second model repeats an id", { models: [model(), model()] }, "models.1.id"],
		["searxng has no url", { web_search: { provider: "searxng" } }, "web_search.url"],
		["a paid search provider has no key", { web_search: { provider: "brave" } }, "web_search.api_key_env"],
		["first_byte_timeout_ms is negative", { first_byte_timeout_ms: -5 }, "first_byte_timeout_ms"],
		["request_timeout_ms is over an hour", { request_timeout_ms: 3_600_001 }, "request_timeout_ms"],
		[
			"a node's prefill rate is zero",
			{ models: [model({ nodes: [{ url: "http://a.example/v1", prefill_tokens_per_s: 0 }] })] },
			"models.0.nodes.0",
		],
		// Every wait is bounded as the engine's are: a search that hangs longer would let the hold lapse.
		[
			"the search timeout is over ten minutes",
			{ web_search: { provider: "searxng", url: "https://search.example/search", timeout_ms: 3_600_000 } },
			"web_search.timeout_ms",
		],
	])("names the bad field when %s", (_label, patch, path) => {
		const err = configError(JSON.stringify(config(patch)));
		expect(err.kind).toBe("config_invalid");
		expect(err.message).toContain(path);
	});

	it("the error becomes a 500 config_invalid whose message names the field", () => {
		const { status, body } = toErrorResponse(configError({ models: [model({ max_output_tokens: "lots" })] }));
		expect(status).toBe(500);
		expect(body.error.code).toBe("config_invalid");
		expect(body.error.message).toContain("models.0.max_output_tokens");
	});

	it("exports a schema that agrees with parseConfig", () => {
		expect(GatewayConfigSchema.safeParse(config()).success).toBe(true);
		expect(GatewayConfigSchema.safeParse({ models: [] }).success).toBe(false);
	});
});

describe("loadConfig", () => {
	it("returns the parsed config and re-parses when the raw value changes", () => {
		const a = loadConfig(JSON.stringify(config()));
		expect(a.models[0]?.id).toBe("venym/qwen-27b");
		const b = loadConfig(JSON.stringify(config({ models: [model({ id: "venym/other" })] })));
		expect(b.models[0]?.id).toBe("venym/other");
	});

	it("throws the same config error on every call for a bad config", () => {
		const bad = JSON.stringify({ models: [] });
		expect(() => loadConfig(bad)).toThrow(/models/);
		expect(() => loadConfig(bad)).toThrow(/models/);
		// A good value afterwards is used, not the remembered failure.
		expect(loadConfig(config()).models).toHaveLength(1);
	});
});

describe("modelNodes", () => {
	it("normalises string and object nodes and drops trailing slashes", () => {
		const cfg = parseConfig(config());
		expect(modelNodes(cfg.models[0]!)).toEqual([
			{ url: "http://10.0.0.5:8000/v1", weight: 1 },
			{ url: "https://node-b.example/v1", apiKeyEnv: "NODE_B_KEY", weight: 1 },
		]);
	});

	it("keeps weights, health and metrics URLs, cache_salt and the prefill rate", () => {
		const nodes = [
			{ url: "http://a.example/v1", weight: 3, health_url: "http://a.example/healthz", metrics_url: "http://a.example:9090/m" },
			{ url: "http://b.example/v1", weight: 0, cache_salt: true, prefill_tokens_per_s: 2500 },
			{ url: "http://c.example/v1", cache_salt: false },
		];
		const cfg = parseConfig(config({ models: [model({ nodes })] }));
		expect(modelNodes(cfg.models[0]!)).toEqual([
			{ url: "http://a.example/v1", weight: 3, healthUrl: "http://a.example/healthz", metricsUrl: "http://a.example:9090/m" },
			{ url: "http://b.example/v1", weight: 0, cacheSalt: true, prefillTokensPerS: 2500 },
			{ url: "http://c.example/v1", weight: 1 },
		]);
		// Normalised once per model: every request reads the same array.
		expect(modelNodes(cfg.models[0]!)).toBe(modelNodes(cfg.models[0]!));
	});
});

describe("routing and fallbacks", () => {
	it("fills the routing defaults", () => {
		const defaults = { cooldown_ms: 15_000, health_check_interval_ms: 10_000, max_attempts: 3, affinity_load_factor: 1.25 };
		expect(parseConfig(config()).routing).toEqual(defaults);
		const cfg = parseConfig(config({ routing: { max_attempts: 5, affinity_load_factor: 1 } }));
		expect(cfg.routing).toEqual({ ...defaults, max_attempts: 5, affinity_load_factor: 1 });
		expect(parseConfig(config()).models[0]?.fallbacks).toBeUndefined();
	});

	it.each([
		[{ routing: { cooldown_ms: 0 } }, "routing.cooldown_ms"],
		[{ routing: { max_attempts: 0 } }, "routing.max_attempts"],
		[{ routing: { health_check_interval_ms: 10 } }, "routing.health_check_interval_ms"],
		[{ routing: { retries: 2 } }, "routing"],
		[{ routing: { affinity_load_factor: 0.9 } }, "routing.affinity_load_factor"],
		[{ routing: { affinity_load_factor: "2" } }, "routing.affinity_load_factor"],
	])("refuses a bad routing setting %j naming %s", (extra, path) => {
		expect(configError(config(extra)).message).toContain(`${path}`);
	});

	it.each([
		[{ weight: -1 }, "models.0.nodes.0"],
		[{ weight: "2" }, "models.0.nodes.0"],
		[{ health_url: "ftp://x.example/h" }, "models.0.nodes.0"],
		[{ secret: "x" }, "models.0.nodes.0"],
		[{ cache_salt: "yes" }, "models.0.nodes.0"],
	])("refuses a bad node field %j", (extra, path) => {
		const nodes = [{ url: "http://a.example/v1", ...extra }];
		expect(configError(config({ models: [model({ nodes })] })).message).toContain(path);
	});

	it("accepts fallbacks to other models of the same kind", () => {
		const cfg = parseConfig(config({ models: [model({ fallbacks: ["venym/b"] }), model({ id: "venym/b" })] }));
		expect(cfg.models[0]?.fallbacks).toEqual(["venym/b"]);
	});

	it("refuses unknown, self and cross-endpoint fallbacks, naming the entry", () => {
		expect(configError(config({ models: [model({ fallbacks: ["venym/nope"] })] })).message).toContain(
			'models.0.fallbacks.0: unknown model id "venym/nope"',
		);
		expect(configError(config({ models: [model({ fallbacks: ["venym/qwen-27b"] })] })).message).toContain(
			"models.0.fallbacks.0: a model cannot fall back to itself",
		);
		const embed = model({ id: "venym/embed", capabilities: ["embeddings"] });
		expect(configError(config({ models: [model({ fallbacks: ["venym/embed"] }), embed] })).message).toContain(
			"models.0.fallbacks.0",
		);
	});
});

describe("config numbers that reach money", () => {
	const pricing = (input: number, output = 1) => ({ input_usd_per_mtok: input, output_usd_per_mtok: output });

	it.each([
		["an input price of 1e300", { pricing: pricing(1e300) }, "models.0.pricing.input_usd_per_mtok"],
		["an output price of 1e300", { pricing: pricing(1, 1e300) }, "models.0.pricing.output_usd_per_mtok"],
		["max_output_tokens of 2^53 − 1", { max_output_tokens: Number.MAX_SAFE_INTEGER }, "models.0.max_output_tokens"],
		["a context_length of 2^53 − 1", { context_length: Number.MAX_SAFE_INTEGER }, "models.0.context_length"],
	])("refuses %s, naming the field", (_, extra, field) => {
		expect(configError(config({ models: [model(extra)] })).message).toContain(`${field}:`);
	});

	it("refuses a search price, max_n or max_body_bytes past their ceilings, naming the field", () => {
		const search = { provider: "searxng", url: "https://search.example/search", price_usd_per_search: 1e300 };
		expect(configError(config({ web_search: search })).message).toContain("web_search.price_usd_per_search:");
		expect(configError(config({ max_n: 1e6 })).message).toContain("max_n:");
		expect(configError(config({ max_body_bytes: 2 ** 40 })).message).toContain("max_body_bytes:");
	});

	it("refuses a model whose largest hold (prompts × best_of × output cap) is over $1M, naming the field", () => {
		// 2,048 prompts × best_of 128 × 100,000 tokens × $60/Mtok ≈ $1.57M.
		const output = configError(config({ max_n: 128, models: [model({ max_output_tokens: 100_000, pricing: pricing(1, 60) })] }));
		expect(output.message).toMatch(/models\.0\.max_output_tokens: the largest hold .* is \$1,57\d,\d{3} .*over the \$1,000,000/);
		// The same model with best_of at most 16 holds at most about $197k.
		expect(() =>
			parseConfig(config({ max_n: 16, models: [model({ max_output_tokens: 100_000, pricing: pricing(1, 60) })] })),
		).not.toThrow();
		// Without a context length a 4 MiB body bounds the prompt: at $10,000/Mtok that is over $1M.
		const input = configError(config({ models: [model({ context_length: undefined, pricing: pricing(10_000) })] }));
		expect(input.message).toMatch(/models\.0\.pricing\.input_usd_per_mtok: .*set context_length/);
		// The same price with a context of 8k: 2,048 inputs × 8,192 tokens × $10,000/Mtok ≈ $168k fits.
		expect(() => parseConfig(config({ models: [model({ context_length: 8192, pricing: pricing(10_000) })] }))).not.toThrow();
		// An embeddings model: inputs only, no output cap.
		const embed = model({ id: "e", capabilities: ["embeddings"], max_output_tokens: undefined, context_length: 1e6 });
		expect(configError(config({ models: [{ ...embed, pricing: { input_usd_per_mtok: 1_000 } }] })).message).toContain(
			"models.0.pricing.input_usd_per_mtok: the largest hold",
		);
	});

	it("counts each image at the model's image_tokens_max (default 16,384): a larger figure can make a hold too large", () => {
		const parsed = parseConfig(config({ models: [model({ context_length: undefined, pricing: pricing(100) })] }));
		expect(parsed.models[0]?.image_tokens_max).toBe(16_384);
		// 2 engine calls × 4 MiB × 2,048 tokens a byte (an image in 17 bytes) × $100/Mtok ≈ $1.7M.
		const big = configError(
			config({ models: [model({ context_length: undefined, image_tokens_max: 32_768, pricing: pricing(100) })] }),
		);
		expect(big.message).toMatch(/models\.0\.pricing\.input_usd_per_mtok: .*set context_length/);
	});

	it("holds at least what the worst chat body can be billed: images filling the body, two engine calls", () => {
		const cfg = parseConfig(config({ models: [model({ context_length: undefined, pricing: pricing(1) })] }));
		const m = cfg.models[0]!;
		const worst = worstCaseHold(m, { maxBodyBytes: cfg.max_body_bytes, maxN: cfg.max_n, searchUsd: 0 });
		const part = '{"type":"image"},';
		const images = Math.floor((cfg.max_body_bytes - 64) / part.length);
		const body = { messages: [{ role: "user", content: Array.from({ length: images }, () => ({ type: "image" })) }] };
		expect(JSON.stringify(body).length).toBeLessThanOrEqual(cfg.max_body_bytes);
		const bound = promptBound(m, addSizes(measureChatPrompt(body).size, searchRoundSize(10)));
		expect(worst.nanos).toBeGreaterThanOrEqual(costNanos(m.pricing, 2 * bound, 2 * m.max_output_tokens * cfg.max_n));
		// Text: a token a UTF-8 byte, however many characters.
		const text = "\uA000".repeat(Math.floor((cfg.max_body_bytes - 64) / 3));
		const textBound = promptBound(m, measureChatPrompt({ messages: [{ role: "user", content: text }] }).size);
		expect(textBound).toBeGreaterThanOrEqual(3 * text.length);
		expect(worst.nanos).toBeGreaterThanOrEqual(costNanos(m.pricing, 2 * textBound, 0));
	});

	it("keeps every hold of the accepted catalogs a safe integer at most $1M", () => {
		const cfg = parseConfig(config({ max_n: 128 }));
		const m = cfg.models[0]!;
		const worst = worstCaseHold(m, { maxBodyBytes: cfg.max_body_bytes, maxN: cfg.max_n, searchUsd: 0 });
		expect(Number.isSafeInteger(worst.nanos)).toBe(true);
		expect(worst.nanos).toBeLessThanOrEqual(MAX_REQUEST_NANOS);
	});
});

describe("resolveModel", () => {
	const cfg = parseConfig(config());

	it("finds a catalog model and keeps the requested id", () => {
		const r = resolveModel(cfg, "venym/qwen-27b");
		expect(r.model.engine_model).toBe("Qwen/Qwen3-27B");
		expect(r.requestedId).toBe("venym/qwen-27b");
		expect(r.online).toBe(false);
	});

	it("turns web search on for an :online suffix and echoes the suffixed id", () => {
		const r = resolveModel(cfg, "venym/qwen-27b:online");
		expect(r.model.id).toBe("venym/qwen-27b");
		expect(r.requestedId).toBe("venym/qwen-27b:online");
		expect(r.online).toBe(true);
	});

	it("throws model_not_found with param model for an unknown id", () => {
		for (const id of ["venym/nope", "venym/nope:online", "Qwen/Qwen3-27B"]) {
			let err: unknown;
			try {
				resolveModel(cfg, id);
			} catch (e) {
				err = e;
			}
			expect(err).toBeInstanceOf(GatewayError);
			const { status, body } = toErrorResponse(err);
			expect(status).toBe(404);
			expect(body.error.code).toBe("model_not_found");
			expect(body.error.param).toBe("model");
		}
	});
});

describe("idle timeouts that outlive a hold", () => {
	const base = {
		models: [
			{
				id: "a/m",
				engine_model: "m",
				nodes: ["http://10.0.0.1:8000/v1"],
				max_output_tokens: 100,
				context_length: 8192,
				pricing: { input_usd_per_mtok: 1, output_usd_per_mtok: 2 },
			},
		],
	};
	// A request that moves nothing is not renewed (hold-keep-alive.ts): with an idle timeout past
	// HOLD_TTL_MS the hold lapses while the request still runs, the ledger hands the balance out
	// again, and the late settlement debits it anyway (key-ledger.ts settle has no hold to check):
	// one paused stream per hold overspends the key. The config should refuse such a timeout.
	for (const field of ["client_idle_timeout_ms", "stream_idle_timeout_ms"]) {
		it(`refuses ${field} longer than a hold lives`, () => {
			expect(() => parseConfig(JSON.stringify({ ...base, [field]: HOLD_TTL_MS + 60_000 }))).toThrow(new RegExp(field));
		});
	}
});

describe("pass_through_fields", () => {
	it("accepts engine fields that change no amount", () => {
		const cfg = parseConfig(config({ models: [model({ pass_through_fields: ["guided_regex", "skip_special_tokens"] })] }));
		expect(cfg.models[0]?.pass_through_fields).toEqual(["guided_regex", "skip_special_tokens"]);
		expect(parseConfig(config()).models[0]?.pass_through_fields).toBeUndefined();
	});

	it.each([
		"n",
		"n_cmpl",
		"n_predict",
		"num_predict",
		"best_of",
		"n_probs",
		"min_tokens",
		"ignore_eos",
		"use_beam_search",
		"max_new_tokens",
		"min_new_tokens",
		"prompt_logprobs",
		"max_tokens",
		"options",
		// Prompt tokens the body does not show: image and video processing (vLLM's max_pixels,
		// num_frames; SGLang's image tiles), and a session's earlier context (SGLang).
		"mm_processor_kwargs",
		"media_io_kwargs",
		"images_config",
		"max_dynamic_patch",
		"min_dynamic_patch",
		"use_audio_in_video",
		"session_id",
		"session_params",
	])("refuses %s, which can change how many choices or tokens the engine produces", (field) => {
		const message = configError(config({ models: [model({ pass_through_fields: ["top_a", field] })] })).message;
		expect(message).toContain("models.0.pass_through_fields.1");
		expect(message).toContain(`'${field}' can change how many choices or tokens the engine produces`);
		expect(GatewayConfigSchema.safeParse(config({ models: [model({ pass_through_fields: [field] })] })).success).toBe(false);
	});

	it("refuses what is not a field name", () => {
		for (const name of ["__proto__", "", "a b"]) {
			expect(configError(config({ models: [model({ pass_through_fields: [name] })] })).message).toContain(
				"pass_through_fields.0",
			);
		}
	});
});

describe("aliases", () => {
	it("resolves an alias to the model it names; a served id wins over an alias of the same name", () => {
		const cfg = parseConfig(
			config({
				models: [model(), model({ id: "venym/b" })],
				aliases: { "gemini-3-flash-preview": "venym/b", "venym/b": "venym/qwen-27b" },
			}),
		);
		expect(resolveModel(cfg, "gemini-3-flash-preview")).toMatchObject({
			model: { id: "venym/b" },
			requestedId: "gemini-3-flash-preview",
		});
		expect(resolveModel(cfg, "venym/b").model.id).toBe("venym/b");
		expect(() => resolveModel(cfg, "toString")).toThrow("'toString' does not exist");
		expect(parseConfig(config()).aliases).toEqual({});
	});

	it("resolves a prefix pattern ('gemini-*'): an exact alias first, then the longest prefix", () => {
		const cfg = parseConfig(
			config({
				models: [model(), model({ id: "venym/b" })],
				aliases: { "gemini-*": "venym/qwen-27b", "gemini-3.5-flash*": "venym/b", "gemini-3.5-flash-lite": "venym/qwen-27b" },
			}),
		);
		expect(resolveModel(cfg, "gemini-3.1-pro-preview")).toMatchObject({
			model: { id: "venym/qwen-27b" },
			requestedId: "gemini-3.1-pro-preview",
		});
		expect(resolveModel(cfg, "gemini-3.5-flash").model.id).toBe("venym/b");
		expect(resolveModel(cfg, "gemini-3.5-flash-lite").model.id).toBe("venym/qwen-27b");
		expect(resolveModel(cfg, "gemini-3.8-flash:online")).toMatchObject({ model: { id: "venym/qwen-27b" }, online: true });
		expect(() => resolveModel(cfg, "gemma-3")).toThrow("'gemma-3' does not exist");
	});

	it("refuses '*' alone and a '*' anywhere but at the end", () => {
		for (const name of ["*", "gem*ini", "gemini-**"]) {
			expect(configError(config({ aliases: { [name]: "venym/qwen-27b" } })).message).toContain("an alias may end in one '*'");
		}
	});

	it("refuses an alias naming no served model", () => {
		expect(configError(config({ aliases: { "gemini-3-pro-preview": "venym/nope" } })).message).toContain(
			'aliases.gemini-3-pro-preview: unknown model id "venym/nope"',
		);
	});
});
