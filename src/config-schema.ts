/**
 * The GATEWAY_CONFIG schema: every field, its bounds and defaults, and the checks across fields
 * (a model's largest hold within what one request may hold). config.ts parses with it.
 */
import { z } from "zod";
import { AlertRules } from "./alerts/rules";
import { BatchesSchema, BatchMultiplier } from "./config-batches";
import { NodeSchema } from "./config-node";
import { DEFAULT_IMAGE_TOKENS_MAX, holdFits, MAX_BATCH_INPUTS, worstCaseHold } from "./money/hold-bound";
import { MAX_REQUEST_NANOS } from "./money/nanos";
import { OUTPUT_FIELDS } from "./money/output-fields";

const url = z.url({ protocol: /^https?$/ });

/** A node URL as routing tells nodes apart: scheme, host and path, without trailing slashes. */
function nodeIdentity(raw: string): string {
	// Refinements run on a URL the schema already refused too; it is reported there.
	const u = URL.parse(raw);
	if (!u) return raw;
	return `${u.protocol}//${u.host}${u.pathname.replace(/\/+$/, "")}${u.search}`;
}

/** How the gateway spreads requests over a model's nodes and remembers their health. */
const RoutingSchema = z.strictObject({
	/** How long a node that just failed is skipped (growing while it keeps failing). */
	cooldown_ms: z.number().int().positive().max(3_600_000).default(15_000),
	/** How often node health and engine load are refreshed while the gateway serves traffic. */
	health_check_interval_ms: z.number().int().min(100).max(3_600_000).default(10_000),
	/** Nodes tried per candidate model in one request (each fallback model gets its own). */
	max_attempts: z.number().int().min(1).max(32).default(3),
	/** Bounded-load affinity: a node takes an affinity request while its load is under this × the fair share. */
	affinity_load_factor: z.number().min(1).max(100).default(1.25),
});

/**
 * Each number that reaches money has a ceiling of its own (so the arithmetic below stays finite),
 * and together they must keep every model's largest hold within what one request may hold
 * (GatewayConfigSchema's check, money/hold-bound.ts).
 */
const MAX_USD_PER_MTOK = 1_000_000;
const MAX_OUTPUT_TOKENS = 100_000_000;
const MAX_CONTEXT_LENGTH = 1_000_000_000;
const MAX_SEARCH_USD = 1_000;
const MAX_IMAGE_TOKENS = 1_000_000;
const MAX_BODY_BYTES = 100 * 1024 * 1024;
const UsdPerMtok = z.number().nonnegative().max(MAX_USD_PER_MTOK);

/** The longest any gateway wait may be: shorter than a hold's 15-minute life less its 5-minute renewal. */
export const MAX_WAIT_MS = 600_000;

/** The longest a request's overall deadline (`request_timeout_ms`) may be: a moving request keeps renewing its hold. */
export const MAX_REQUEST_TIMEOUT_MS = 3_600_000;

/** A model with this capability is served on /v1/embeddings only (and needs no output cap or price). */
export const EMBEDDINGS = "embeddings";

/**
 * An engine field a model lets through: never one that changes how many choices or tokens the
 * engine produces (money/output-fields.ts), which the hold could not cover.
 */
const PassThroughField = z
	.string()
	.regex(/^[A-Za-z][A-Za-z0-9_.-]{0,63}$/, "must be a field name (a letter, then letters, digits, '_', '.', '-')")
	.refine((f) => !OUTPUT_FIELDS.has(f), {
		error: (issue) =>
			`'${String(issue.input)}' can change how many choices or tokens the engine produces (or counts): it can never be passed through`,
	});

const ModelSchema = z
	.strictObject({
		id: z
			.string()
			.min(1)
			.regex(/^[^:\s]+$/, "must not contain ':' or spaces"),
		engine_model: z.string().min(1),
		nodes: z.array(NodeSchema).min(1),
		max_output_tokens: z.number().int().positive().max(MAX_OUTPUT_TOKENS).optional(),
		context_length: z.number().int().positive().max(MAX_CONTEXT_LENGTH).optional(),
		/** The most prompt tokens one image can cost: the hold counts every image part at this. */
		image_tokens_max: z.number().int().positive().max(MAX_IMAGE_TOKENS).default(DEFAULT_IMAGE_TOKENS_MAX),
		pricing: z.strictObject({
			input_usd_per_mtok: UsdPerMtok,
			output_usd_per_mtok: UsdPerMtok.optional(),
			/** Prompt tokens served from the engine's prefix cache; default: the input price. */
			cached_input_usd_per_mtok: UsdPerMtok.optional(),
			/** The batch lane's price as a share of these (default `batches.price_multiplier`). */
			batch_multiplier: BatchMultiplier.optional(),
		}),
		capabilities: z.array(z.string()).default([]),
		owned_by: z.string().default("venym"),
		/** Other model ids tried, in order, when every node of this one fails before the first byte. */
		fallbacks: z.array(z.string().min(1)).max(16).optional(),
		/** Repair tool-call arguments that are not valid JSON (src/stream/tool-call-repair.ts). */
		tool_call_repair: z.boolean().optional(),
		/** Engine fields this model's requests may carry beyond their lane's own (src/http/engine-fields.ts). */
		pass_through_fields: z.array(PassThroughField).max(64).optional(),
	})
	.superRefine((m, ctx) => {
		// A node listed twice would take twice its share, and its health is kept per URL anyway.
		const urls = new Set<string>();
		m.nodes.forEach((n, i) => {
			const key = nodeIdentity(typeof n === "string" ? n : n.url);
			if (urls.has(key))
				ctx.addIssue({ code: "custom", path: ["nodes", i], message: "this node is already listed for the model" });
			urls.add(key);
		});
		const cached = m.pricing.cached_input_usd_per_mtok;
		if (cached !== undefined && cached > m.pricing.input_usd_per_mtok) {
			ctx.addIssue({
				code: "custom",
				path: ["pricing", "cached_input_usd_per_mtok"],
				message: "may not exceed input_usd_per_mtok",
			});
		}
		if (m.capabilities.includes(EMBEDDINGS)) return;
		if (m.max_output_tokens === undefined) {
			ctx.addIssue({ code: "custom", path: ["max_output_tokens"], message: "required (except for embeddings models)" });
		}
		if (m.pricing.output_usd_per_mtok === undefined) {
			ctx.addIssue({
				code: "custom",
				path: ["pricing", "output_usd_per_mtok"],
				message: "required (except for embeddings models)",
			});
		}
	})
	.transform((m) => ({
		...m,
		max_output_tokens: m.max_output_tokens ?? 0,
		// Optional prices stay absent when not configured (the spread copies only the keys given).
		pricing: { ...m.pricing, output_usd_per_mtok: m.pricing.output_usd_per_mtok ?? 0 },
	}));

const WebSearchSchema = z
	.strictObject({
		provider: z.enum(["searxng", "brave", "tavily"]).default("searxng"),
		url: url.optional(),
		api_key_env: z.string().min(1).optional(),
		// At most MAX_WAIT_MS, as every wait: a search that hangs longer would let the hold lapse while it runs.
		timeout_ms: z.number().int().positive().max(MAX_WAIT_MS).default(5000),
		price_usd_per_search: z.number().nonnegative().max(MAX_SEARCH_USD).default(0),
	})
	.superRefine((ws, ctx) => {
		if (ws.provider === "searxng" && !ws.url)
			ctx.addIssue({ code: "custom", path: ["url"], message: "required for the searxng provider" });
		if (ws.provider !== "searxng" && !ws.api_key_env) {
			ctx.addIssue({ code: "custom", path: ["api_key_env"], message: `required for the ${ws.provider} provider` });
		}
	});

/** Raw usage records in D1: how long they are kept (the hourly rollups are kept for good). */
const UsageSchema = z.strictObject({
	/** Raw usage records older than this many days (counted in whole UTC days) are deleted by the scheduled cleanup. */
	retention_days: z.number().int().min(1).max(3650).default(90),
	/**
	 * `"r2"`: each UTC day's records must be written to the R2 bucket bound as `USAGE_ARCHIVE`
	 * before they are deleted; without that binding nothing is deleted. When absent, records are
	 * exported whenever the binding exists.
	 */
	archive: z.enum(["r2"]).optional(),
});

/** Edge allowances (docs/allowances.md): how isolates reserve a share of a key's balance ahead of need. */
const LedgerSchema = z.strictObject({
	/** How long an allowance lives without a refill; 0 turns allowances off (every request takes the synchronous hold). */
	allowance_ttl_ms: z.number().int().min(0).max(300_000).default(30_000),
	/** A key's available balance must cover this many of a request's holds before an isolate is granted an allowance. */
	allowance_min_headroom: z.number().int().min(2).max(1_000_000_000).default(100),
});

export const GatewayConfigSchema = z
	.strictObject({
		models: z.array(ModelSchema).min(1),
		web_search: WebSearchSchema.optional(),
		/**
		 * How long a node may take to produce its first token before the next node is tried, plus
		 * the prompt's prefill time (its tokens at the node's `prefill_tokens_per_s`). Every
		 * wait is at most 10 minutes (MAX_WAIT_MS): a request that moves nothing for longer would let
		 * its hold (15 minutes, renewed every 5 only while the request moves) lapse while it runs.
		 */
		first_byte_timeout_ms: z.number().int().positive().max(MAX_WAIT_MS).default(30_000),
		/**
		 * The request's overall deadline, across every attempt, fallback model and search round, and
		 * its answer's stream: past it the request ends as 504 upstream_timeout (a stream that
		 * started ends with an in-band error frame).
		 */
		request_timeout_ms: z.number().int().positive().max(MAX_REQUEST_TIMEOUT_MS).default(600_000),
		/** How long a started engine answer may go without sending a byte before it is ended (stream: error frame; otherwise 504). */
		stream_idle_timeout_ms: z.number().int().positive().max(MAX_WAIT_MS).default(60_000),
		/**
		 * How long a streaming client may go without taking a frame before its stream is ended as
		 * client_disconnected (engine request aborted, hold settled): an open socket that is not
		 * read cannot pin a hold and an engine slot.
		 */
		client_idle_timeout_ms: z.number().int().positive().max(MAX_WAIT_MS).default(300_000),
		/** Most choices (`n`) one chat request may ask for. */
		max_n: z.number().int().positive().max(128).default(16),
		/** Most background responses one key may have queued or running at once (over it: 429). */
		max_queued_responses: z.number().int().positive().max(1000).default(8),
		/** Largest accepted request body. */
		max_body_bytes: z
			.number()
			.int()
			.positive()
			.max(MAX_BODY_BYTES)
			.default(4 * 1024 * 1024),
		/** Other names for served models, on every lane: `{"gemini-3-flash-preview": "venym/a", "gemini-*": "venym/b"}` (config.ts). */
		aliases: z.record(z.string().min(1).max(256), z.string().min(1)).default({}),
		routing: RoutingSchema.prefault({}),
		usage: UsageSchema.prefault({}),
		ledger: LedgerSchema.prefault({}),
		/** Operator-wide spend alerts: each applies to every key, beside its own (docs/operations.md, "Alerts"). */
		alerts: AlertRules.default([]),
		batches: BatchesSchema.prefault({}),
	})
	.superRefine((cfg, ctx) => {
		// Ids are matched exactly, so two that differ only in case would be two models a client
		// (and an operator reading the console) can hardly tell apart.
		const seen = new Map<string, string>();
		cfg.models.forEach((m, i) => {
			const earlier = seen.get(m.id.toLowerCase());
			if (earlier !== undefined) {
				const message =
					earlier === m.id ? `duplicate model id "${m.id}"` : `model id "${m.id}" differs from "${earlier}" only in case`;
				ctx.addIssue({ code: "custom", path: ["models", i, "id"], message });
			}
			seen.set(m.id.toLowerCase(), m.id);
		});
		cfg.models.forEach((m, i) => {
			const issue = holdIssue(m, cfg);
			if (issue) ctx.addIssue({ code: "custom", path: ["models", i, ...issue.path], message: issue.message });
		});
		cfg.models.forEach((m, i) => {
			m.fallbacks?.forEach((id, j) => {
				const path = ["models", i, "fallbacks", j];
				const target = cfg.models.find((t) => t.id === id);
				if (!target) ctx.addIssue({ code: "custom", path, message: `unknown model id "${id}"` });
				else if (id === m.id) ctx.addIssue({ code: "custom", path, message: "a model cannot fall back to itself" });
				else if (target.capabilities.includes(EMBEDDINGS) !== m.capabilities.includes(EMBEDDINGS)) {
					ctx.addIssue({
						code: "custom",
						path,
						message: `"${id}" serves another endpoint (embeddings and chat models do not mix)`,
					});
				}
			});
		});
	});

/**
 * A model whose largest possible hold (money/hold-bound.ts) is over $1M: the issue names the
 * term that dominates it (the input price, or the output cap) and says what bounds the rest.
 */
function holdIssue(
	m: z.infer<typeof ModelSchema>,
	cfg: { max_body_bytes: number; max_n: number; web_search?: { price_usd_per_search: number } },
): { path: string[]; message: string } | null {
	const worst = worstCaseHold(m, {
		maxBodyBytes: cfg.max_body_bytes,
		maxN: cfg.max_n,
		searchUsd: cfg.web_search?.price_usd_per_search ?? 0,
	});
	if (holdFits(worst.nanos)) return null;
	const usd = Number.isFinite(worst.nanos) ? `$${Math.ceil(worst.nanos / 1e9).toLocaleString("en-US")}` : "unbounded";
	const limit = `$${(MAX_REQUEST_NANOS / 1e9).toLocaleString("en-US")}`;
	const why =
		worst.dominant === "output"
			? `max_output_tokens × max_n (${cfg.max_n}) × ${MAX_BATCH_INPUTS} prompts × the output price`
			: m.context_length === undefined
				? `the largest prompt max_body_bytes (${cfg.max_body_bytes}) allows × the input price: set context_length to bound it`
				: `context_length × ${MAX_BATCH_INPUTS} inputs × the input price`;
	return {
		path: worst.dominant === "output" ? ["max_output_tokens"] : ["pricing", "input_usd_per_mtok"],
		message: `the largest hold one request can place on this model is ${usd} (${why}), over the ${limit} one request may hold; lower it`,
	};
}

/** The routing settings of a config that sets none: the schema's defaults, stated once there. */
export const ROUTING_DEFAULTS: z.output<typeof RoutingSchema> = RoutingSchema.parse({});
