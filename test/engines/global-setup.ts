// The engine project's setup: four real llama.cpp servers (the main one, one with --embeddings,
// a pair for load routing and failover), the development engine as the web search backend only,
// and the gateway under `wrangler dev` in front of them. Without the llama-server binary the
// project's tests are skipped (engines.available is false) with the reason printed.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { startEngine } from "../../dev/engine.mjs";
import { startGateway } from "../../dev/gateway-process.mjs";
import { TEST_ADMIN_TOKEN, TEST_NODE_KEY, TEST_SEAL_SECRET } from "../support/test-config";
import { freePort, type LlamaServer, llamaPaths, startLlama } from "./llama";

export interface EngineStack {
	available: boolean;
	reason: string;
	gatewayUrl: string;
	adminToken: string;
	/** Proxy base URLs (the recording proxy in front of each llama-server) and their engines' own. */
	main: { url: string; directUrl: string };
	embed: { url: string; directUrl: string };
	pair: Array<{ url: string; directUrl: string }>;
}

declare module "vitest" {
	export interface ProvidedContext {
		engines: EngineStack;
	}
}

const PRICING = { input_usd_per_mtok: 1, cached_input_usd_per_mtok: 0.5, output_usd_per_mtok: 2 };

/** The catalog: each model points at real llama.cpp servers. */
export function enginesConfig(main: string, embed: string, pair: string[], searchUrl: string, deadPort: number) {
	const model = (id: string, nodes: unknown[], extra: Record<string, unknown> = {}) => ({
		id,
		engine_model: "tiny-qwen3",
		nodes,
		max_output_tokens: 400,
		context_length: 4096,
		pricing: PRICING,
		capabilities: ["tools", "web_search"],
		...extra,
	});
	return {
		models: [
			model("engines/qwen", [{ url: `${main}/v1`, tokenize: true }]),
			// A tokenizing node that is down, before the real one; and one alone (the estimate answers).
			model("engines/qwen-second", [
				{ url: `http://127.0.0.1:${deadPort}/v1`, tokenize: true },
				{ url: `${main}/v1`, tokenize: true, weight: 0.000001 },
			]),
			model("engines/no-tokenizer", [{ url: `http://127.0.0.1:${deadPort}/v1`, tokenize: true }]),
			model("engines/embed", [`${embed}/v1`], {
				capabilities: ["embeddings"],
				max_output_tokens: undefined,
				pricing: { input_usd_per_mtok: 1 },
			}),
			model(
				"engines/pair",
				pair.map((u) => `${u}/v1`),
			),
		],
		web_search: { provider: "searxng", url: `${searchUrl}/search`, price_usd_per_search: 0.005, timeout_ms: 3000 },
		// A busy 2-core machine: a grammar-constrained answer may take a while to its first token.
		first_byte_timeout_ms: 20_000,
		stream_idle_timeout_ms: 10_000,
		routing: { health_check_interval_ms: 300, max_attempts: 2, cooldown_ms: 60_000 },
	};
}

export default async function setup(project: TestProject) {
	const paths = llamaPaths();
	const empty = { url: "", directUrl: "" };
	if ("missing" in paths) {
		const reason = `llama-server not found (${paths.missing}): set LLAMA_SERVER to a llama.cpp server binary with tiny-qwen3.gguf beside it; the engine tests are skipped`;
		console.warn(`\n[engines] ${reason}\n`);
		project.provide("engines", {
			available: false,
			reason,
			gatewayUrl: "",
			adminToken: "",
			main: empty,
			embed: empty,
			pair: [],
		});
		return;
	}
	const started: LlamaServer[] = [];
	const cleanups: Array<() => Promise<unknown>> = [];
	const close = async () => {
		for (const c of cleanups.reverse()) await c().catch(() => {});
		await Promise.all(started.map((s) => s.close()));
	};
	try {
		// One at a time: four model loads at once on two cores slow each other past nothing gained.
		for (const extra of [[], ["--embeddings", "--pooling", "mean"], [], []]) started.push(await startLlama(paths, extra));
		const [main, embed, a, b] = started as [LlamaServer, LlamaServer, LlamaServer, LlamaServer];
		// The development engine serves only as the web search backend here (SearXNG's JSON).
		const search = await startEngine({ port: 0 });
		cleanups.push(() => search.close());
		const persistTo = await mkdtemp(join(tmpdir(), "venym-engines-"));
		cleanups.push(() => rm(persistTo, { recursive: true, force: true }));
		const config = enginesConfig(main.url, embed.url, [a.url, b.url], search.url, await freePort());
		const gateway = await startGateway({
			port: await freePort(),
			persistTo,
			quiet: true,
			timeoutMs: 90_000,
			vars: {
				GATEWAY_CONFIG: JSON.stringify(config),
				ADMIN_TOKEN: TEST_ADMIN_TOKEN,
				NODE_KEY: TEST_NODE_KEY,
				REASONING_SEAL_SECRET: TEST_SEAL_SECRET,
			},
		});
		cleanups.push(() => gateway.close());
		const pick = (s: LlamaServer) => ({ url: s.url, directUrl: s.directUrl });
		project.provide("engines", {
			available: true,
			reason: "",
			gatewayUrl: gateway.url,
			adminToken: TEST_ADMIN_TOKEN,
			main: pick(main),
			embed: pick(embed),
			pair: [pick(a), pick(b)],
		});
		return async () => {
			if (process.env.VENYM_E2E_LOG) console.log(gateway.log());
			await close();
		};
	} catch (err) {
		await close();
		throw err;
	}
}
