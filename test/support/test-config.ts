/** The catalog the integration and end-to-end tests run with: one model per engine behaviour. */
export function testGatewayConfig(engineUrl: string) {
	const node = (scenario?: string) => (scenario ? `${engineUrl}/s/${scenario}/v1` : `${engineUrl}/v1`);
	const model = (id: string, nodes: unknown[], extra: Record<string, unknown> = {}) => ({
		id,
		engine_model: `engine-${id.replace(/^test\//, "")}`,
		nodes,
		max_output_tokens: 1000,
		context_length: 8192,
		pricing: { input_usd_per_mtok: 1, output_usd_per_mtok: 2 },
		capabilities: ["tools", "reasoning", "web_search"],
		...extra,
	});
	return {
		models: [
			model("test/ok", [{ url: node(), api_key_env: "NODE_KEY", tokenize: true }]),
			model("test/failover", [node("fail500"), node("drop"), node("fail429"), node("hang"), node("fail503"), node("ok")]),
			model("test/all-down", [node("fail500"), node("drop")]),
			model("test/all-busy", [node("fail429"), node("fail503")]),
			model("test/bad400", [node("bad400"), node("ok")]),
			model("test/flat400", [node("flat400")]),
			model("test/midstream", [node("midstream")]),
			model("test/midflat", [node("midflat")]),
			model("test/cut", [node("cut")]),
			model("test/error200", [node("error200")]),
			model("test/nousage", [node("nousage")]),
			model("test/cumulative", [node("cumulative")]),
			model("test/finishusage", [node("finishusage")]),
			model("test/comments", [node("comments")]),
			model("test/slow", [node("slow")]),
			model("test/reasoning", [node("reasoning")]),
			model("test/small-context", [node()], { context_length: 300, max_output_tokens: 5000 }),
			model("test/stall", [node("stall")]),
			model("test/hugeusage", [node("hugeusage")]),
			model("test/negusage", [node("negusage")]),
			model("test/noeol", [node("noeol")]),
			model("test/echoauth", [{ url: node("echoauth"), api_key_env: "NODE_KEY" }]),
			model("test/slowheaders", [node("slowheaders")]),
			model("test/slowbody", [node("slowbody")]),
			model("test/trickle", [node("trickle")]),
			// Answers once the test releases it (test/support/gateway.ts releaseEngine): a request that lasts as long as a test needs.
			model("test/gated", [node("gated")]),
			// Gated too (the test sets the named node's scenario), each on its own node and dispatcher: batch
			// lines there never wait for room behind other files' gated requests in a shared workerd.
			model("test/gated-lines-a", [`${engineUrl}/n/gated-lines-a/v1`]),
			model("test/gated-lines-b", [`${engineUrl}/n/gated-lines-b/v1`]),
			model("test/bigprompt", [node("bigprompt")]),
			// Billed at least what was delivered (test/integration/chat/billed-delivered.test.ts): an honest
			// byte-level count of CJK text and images (a context that takes them), llama.cpp's one-choice
			// count with `n`, 0/0 beside an answer.
			model("test/bytetok", [node("bytetok")], { context_length: 200_000 }),
			model("test/onechoice", [node("onechoice")]),
			model("test/zerousage", [node("zerousage")]),
			model("test/zero-embed", [node("zerousage")], {
				capabilities: ["embeddings"],
				context_length: 512,
				max_output_tokens: undefined,
				pricing: { input_usd_per_mtok: 1 },
			}),
			// An agent's tool loop (the Messages lane, Claude Code): calls Bash once, then answers with its result.
			model("test/tool-loop", [node("tool-loop")]),
			// A deferred tool (CronList) found with a tool search (Claude Code's ToolSearch, the gateway's venym_tool_search), then called.
			model("test/deferred-tool", [{ url: node("deferred-tool"), tokenize: true }]),
			// A prefix-cache hit on half of every prompt, reported as vLLM does (the console's cache columns).
			model("test/cached", [node("cached")]),
			model("test/codex", [node("codex")], { context_length: 200_000 }),
			// The coding agents' e2e tests (test/e2e/*-cli.test.ts): the local catalog's plainly answering
			// dev-echo (a tool only when asked for one), and Qwen Code's shell tool loop.
			model("test/dev-echo", [node()], { engine_model: "dev-echo", context_length: 200_000 }),
			model("test/qwen-loop", [node("qwen-loop")], { context_length: 200_000 }),
			model("test/agent-tools", [node("tool-loop")], { context_length: 200_000 }),
			// The same engine, for a model the catalog does not say reasons: no reasoning goes back to it.
			model("test/codex-plain", [node("codex")], { context_length: 200_000, capabilities: ["tools"] }),
			// An embeddings model: served on /v1/embeddings only, priced on input alone, no output cap.
			model("test/embed", [{ url: node(), api_key_env: "NODE_KEY" }], {
				capabilities: ["embeddings"],
				context_length: 512,
				max_output_tokens: undefined,
				pricing: { input_usd_per_mtok: 1 },
			}),
			model("test/all-hang", [node("hang")]),
			// Lets two engine fields through (`pass_through_fields`), for the allowlist test.
			model("test/passthrough", [node()], { pass_through_fields: ["guided_regex", "skip_special_tokens"] }),
			model("test/embed-passthrough", [node()], {
				capabilities: ["embeddings"],
				context_length: 512,
				max_output_tokens: undefined,
				pricing: { input_usd_per_mtok: 1 },
				pass_through_fields: ["normalize"],
			}),
			// A node that refuses every request, alone: nothing to fail over to, whatever order the router picks.
			model("test/refuses", [node("bad400")]),
			// Megabyte-sized Responses inputs and long previous_response_id chains.
			model("test/big", [node()], { context_length: 10_000_000 }),
			// Fallbacks where a test's own config cannot reach (background Responses run with this one):
			// every node of the first fails, the second serves at ten times the price.
			model("test/fb-down", [node("fail500")], { fallbacks: ["test/fb-dear"] }),
			model("test/fb-dear", [node()], { pricing: { input_usd_per_mtok: 10, output_usd_per_mtok: 20 } }),
			// The batch lane's own fleet (test/integration/batches): a named node whose queue a test sets, scheduling by priority.
			model("test/batch-idle", [{ url: `${engineUrl}/n/batch-idle/v1`, priority: true }]),
			// Two nodes, the first of which a test makes fail: a failed line is tried again on the other.
			model("test/batch-retry", [`${engineUrl}/n/batch-bad/v1`, `${engineUrl}/n/batch-good/v1`]),
		],
		// Gemini CLI's helper models, on a served one (every lane resolves them); a prefix for Gemini
		// CLI 0.61's own (gemini-3.1-pro-preview, gemini-3.5-flash-lite), whose prompts need a long context.
		aliases: { "gemini-3-flash-preview": "test/ok", "gemini-2.5-flash-lite": "test/ok", "gemini-3.*": "test/dev-echo" },
		web_search: { provider: "searxng", url: `${engineUrl}/search`, price_usd_per_search: 0.005, timeout_ms: 1500 },
		// Time to the first token (the engine is always asked for a stream): room for a busy 2-core box.
		first_byte_timeout_ms: 2000,
		stream_idle_timeout_ms: 800,
		// Enough attempts for test/failover to reach its healthy node whatever order the router picks.
		routing: { max_attempts: 6 },
		// Edge allowances (docs/allowances.md) only for keys holding 200 million holds: a one-token embedding
		// (1,000 nanos) needs $200, a small chat (about 1e6 nanos) about $210,000. The other tests' keys ($100 at
		// most) keep the synchronous hold and their exact held amounts; test/integration/ledger/allowance.test.ts uses
		// keys of up to $1,000,000. A short lifetime, so that test sees allowances expire.
		ledger: { allowance_ttl_ms: 3000, allowance_min_headroom: 200_000_000 },
	};
}

export const TEST_ADMIN_TOKEN = "test-admin-token-0123456789";
export const TEST_NODE_KEY = "node-secret-abc";
export const TEST_ALERT_SECRET = "test-alert-webhook-secret-0123456789";
export const TEST_SEAL_SECRET = "test-reasoning-seal-secret-0123456789";
