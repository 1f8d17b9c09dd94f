/** GATEWAY_CONFIG parsed (config-schema.ts), its types, and the lookups on it every request makes. */
import type { z } from "zod";
import { GatewayConfigSchema } from "./config-schema";
import { GatewayError } from "./errors";

export type GatewayConfig = z.infer<typeof GatewayConfigSchema>;
export type ModelConfig = GatewayConfig["models"][number];
export type RoutingConfig = GatewayConfig["routing"];
export type LedgerConfig = GatewayConfig["ledger"];
export type BatchesConfig = GatewayConfig["batches"];
export interface EngineNode {
	/** The node's OpenAI base URL (ending in /v1), without a trailing slash; it names the node everywhere. */
	url: string;
	apiKeyEnv?: string;
	/** 1 unless configured; 0 = drained. */
	weight: number;
	healthUrl?: string;
	metricsUrl?: string;
	/** Requests carry the paying key's `cache_salt` (engine/cache-salt.ts). */
	cacheSalt?: true;
	/** The configured prefill rate (tokens a second); learned per node when absent (routing/node-state.ts). */
	prefillTokensPerS?: number;
	/** Serves `POST {server root}/tokenize`: asked for exact token counts (chat/count-tokens.ts). */
	tokenize?: true;
	/** Schedules by request `priority`: batch lines carry a lower one (batches/schedule.ts). */
	priority?: true;
	/** How many requests the engine runs at once, when configured (batches/schedule.ts `lineLimit`). */
	maxNumSeqs?: number;
}

// Normalised once per model object: every request of a model reads the same array.
const nodesOf = new WeakMap<ModelConfig, EngineNode[]>();

/** Node entries normalised to one shape, base URL without a trailing slash. */
export function modelNodes(model: ModelConfig): EngineNode[] {
	let nodes = nodesOf.get(model);
	if (!nodes) {
		nodes = model.nodes.map((n) => {
			if (typeof n === "string") return { url: n.replace(/\/+$/, ""), weight: 1 };
			const node: EngineNode = { url: n.url.replace(/\/+$/, ""), weight: n.weight ?? 1 };
			if (n.api_key_env) node.apiKeyEnv = n.api_key_env;
			if (n.health_url) node.healthUrl = n.health_url;
			if (n.metrics_url) node.metricsUrl = n.metrics_url;
			if (n.cache_salt) node.cacheSalt = true;
			if (n.prefill_tokens_per_s) node.prefillTokensPerS = n.prefill_tokens_per_s;
			if (n.tokenize) node.tokenize = true;
			if (n.priority) node.priority = true;
			if (n.max_num_seqs) node.maxNumSeqs = n.max_num_seqs;
			return node;
		});
		nodesOf.set(model, nodes);
	}
	return nodes;
}

function describeIssue(issue: z.core.$ZodIssue): string {
	const path = issue.path.length ? issue.path.join(".") : "(root)";
	return `${path}: ${issue.message}`;
}

/** Parses GATEWAY_CONFIG (a JSON string or an object). Throws a GatewayError naming the bad field. */
export function parseConfig(raw: unknown): GatewayConfig {
	let value = raw;
	if (raw === undefined || raw === null || raw === "") {
		throw new GatewayError("config_invalid", "GATEWAY_CONFIG is not set");
	}
	if (typeof raw === "string") {
		try {
			value = JSON.parse(raw);
		} catch (e) {
			throw new GatewayError("config_invalid", `GATEWAY_CONFIG is not valid JSON: ${(e as Error).message}`);
		}
	}
	const result = GatewayConfigSchema.safeParse(value);
	if (!result.success) {
		throw new GatewayError("config_invalid", `GATEWAY_CONFIG is invalid: ${result.error.issues.map(describeIssue).join("; ")}`);
	}
	// An alias names a served model (config-schema.ts `aliases`); one ending in `*` is a prefix, never
	// `*` alone: every unknown name would then be served, and a typo never a 404.
	const ids = new Set(result.data.models.map((m) => m.id));
	const pattern = Object.keys(result.data.aliases).find(
		(name) => name.indexOf("*") >= 0 && (name === "*" || name.indexOf("*") < name.length - 1),
	);
	if (pattern)
		throw new GatewayError(
			"config_invalid",
			`GATEWAY_CONFIG is invalid: aliases.${pattern}: an alias may end in one '*' (a prefix, like 'gemini-*'), and is more than '*'`,
		);
	const stray = Object.entries(result.data.aliases).find(([, id]) => !ids.has(id));
	if (stray)
		throw new GatewayError("config_invalid", `GATEWAY_CONFIG is invalid: aliases.${stray[0]}: unknown model id "${stray[1]}"`);
	return result.data;
}

// Parsed once per isolate per distinct raw value; a bad config is remembered too so every request fails fast.
let cachedRaw: unknown;
let cached: { config?: GatewayConfig; error?: GatewayError } | undefined;

export function loadConfig(raw: unknown): GatewayConfig {
	if (cached === undefined || cachedRaw !== raw) {
		cachedRaw = raw;
		try {
			cached = { config: parseConfig(raw) };
		} catch (e) {
			cached = { error: e as GatewayError };
		}
	}
	if (cached.error) throw cached.error;
	return cached.config as GatewayConfig;
}

/**
 * The served id an alias gives `name`: its own entry, else the longest prefix pattern (`"gemini-*"`)
 * it starts with. Gemini CLI names a new Gemini model every few releases: one pattern covers them.
 */
export function aliasOf(aliases: Readonly<Record<string, string>>, name: string): string | undefined {
	if (Object.hasOwn(aliases, name)) return aliases[name];
	let best: string | undefined;
	let bestLength = -1;
	for (const [pattern, id] of Object.entries(aliases)) {
		if (!pattern.endsWith("*")) continue;
		const prefix = pattern.slice(0, -1);
		if (prefix.length > bestLength && name.startsWith(prefix)) {
			best = id;
			bestLength = prefix.length;
		}
	}
	return best;
}

export interface ResolvedModel {
	model: ModelConfig;
	/** The id exactly as the client sent it (with any `:online` suffix); echoed in responses. */
	requestedId: string;
	online: boolean;
}

/** Finds the catalog entry for a client model id; `:online` turns on web search. */
export function resolveModel(config: GatewayConfig, requested: string): ResolvedModel {
	const online = requested.endsWith(":online");
	const baseId = online ? requested.slice(0, -":online".length) : requested;
	// A served id first; else the config's alias for one (Gemini CLI's helper models, on every lane).
	const served = config.models.find((m) => m.id === baseId);
	const aliased = served ? undefined : aliasOf(config.aliases, baseId);
	const model = served ?? (aliased === undefined ? undefined : config.models.find((m) => m.id === aliased));
	if (!model) {
		throw new GatewayError("model_not_found", `The model '${requested}' does not exist or you do not have access to it.`, {
			param: "model",
		});
	}
	return { model, requestedId: requested, online };
}
