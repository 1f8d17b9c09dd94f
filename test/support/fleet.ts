/**
 * A gateway with a config of the test's own, in front of named nodes of the development engine
 * (dev/engine-nodes.mjs: `/n/<name>/v1`, behaviour and queue set at runtime). The worker's
 * default export is called directly with the config in its env, so each test has its own
 * fleet: node names are unique per test, and the isolate's memory of one test's nodes never
 * meets another's.
 */
import { createExecutionContext, env, waitOnExecutionContext } from "cloudflare:test";
import { beforeAll } from "vitest";
import { parseConfig } from "../../src/config";
import worker from "../../src/index";
import { BASE, createKey, waitFor } from "./gateway";
import { TEST_ADMIN_TOKEN } from "./test-config";

/**
 * The development engine under a tenant of its own (dev/engine.mjs `/t/<tenant>`): its scenario
 * nodes (`<url>/s/<scenario>/v1`, as testGatewayConfig names them) are URLs no other test file
 * routes to, so neither the isolate's node health nor the NodeHealth object has seen them fail,
 * and its request record (engineRequests' `engineUrl`) is its own. Files that share a workerd
 * (`npm run test:unit`) share env.ENGINE_URL's scenario nodes and their cooldowns.
 */
export function ownEngineUrl(name: string): string {
	// env.ENGINE_URL is already `<engine>/t/<file>`, and the engine reads one tenant prefix, not nested ones.
	const file = /^(.*)\/t\/[^/]+$/.exec(env.ENGINE_URL);
	if (!file) throw new Error(`ownEngineUrl: ENGINE_URL ${env.ENGINE_URL} has no /t/<tenant>`);
	return `${file[1]}/t/${name}-${crypto.randomUUID()}`;
}

export function nodeUrl(name: string): string {
	return `${env.ENGINE_URL}/n/${name}/v1`;
}

/** Makes a named node behave as a scenario, report a queue on /metrics, or go back to normal. */
export async function setNode(
	name: string,
	change: { scenario?: string; queue?: { waiting?: number; running?: number } | null; reset?: boolean },
): Promise<void> {
	const res = await fetch(`${env.ENGINE_URL}/_engine/nodes/${encodeURIComponent(name)}`, {
		method: "POST",
		body: JSON.stringify(change),
	});
	if (!res.ok) throw new Error(`setNode ${name}: ${res.status}`);
	await res.body?.cancel();
}

export interface NodeRecord {
	id: number;
	path: string;
	node: string | null;
	scenario: string;
	body: Record<string, unknown> | null;
	aborted: boolean;
}

/** The engine calls whose body contains `marker`, oldest first. */
export async function callsWith(marker: string): Promise<NodeRecord[]> {
	const res = await fetch(`${env.ENGINE_URL}/_engine/requests?contains=${encodeURIComponent(marker)}`);
	return ((await res.json()) as NodeRecord[]).sort((a, b) => a.id - b.id);
}

/** How many of `calls` each node got. */
export function perNode(calls: NodeRecord[]): Record<string, number> {
	const out: Record<string, number> = {};
	for (const c of calls) if (c.node) out[c.node] = (out[c.node] ?? 0) + 1;
	return out;
}

export function marker(prefix = "m"): string {
	return `${prefix}${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
}

export function model(id: string, nodes: unknown[], extra: Record<string, unknown> = {}) {
	return {
		id,
		engine_model: `engine-${id}`,
		nodes,
		max_output_tokens: 100,
		context_length: 8192,
		pricing: { input_usd_per_mtok: 1, output_usd_per_mtok: 2 },
		...extra,
	};
}

export function fleetConfig(models: unknown[], routing: Record<string, number> = {}) {
	return {
		models,
		// As the shared test config: room for a busy 2-core box (a node that times out cools down).
		first_byte_timeout_ms: 2000,
		stream_idle_timeout_ms: 2000,
		routing: { cooldown_ms: 60_000, health_check_interval_ms: 300, max_attempts: 3, ...routing },
		// As the shared test config: test keys stay on the synchronous hold (no edge allowances, whose
		// idle release keeps a request's execution context, which `call` waits on, open for a while).
		ledger: { allowance_ttl_ms: 3000, allowance_min_headroom: 200_000_000 },
	};
}

export interface Answer {
	res: Response;
	text: string;
	json: Record<string, unknown> | null;
	ms: number;
}

/**
 * The NodeHealth namespace with the deployment's one object (`fleet`) renamed for one gateway: a
 * NodeHealth of its own, which probes only that gateway's nodes at that gateway's interval. The
 * shared one probes every node any file's config named in the last 10 minutes (hung ones cost a
 * probe timeout each), at the interval its last reader set: a test that waits on a probe round
 * would wait on all of that.
 */
function ownNodeHealth<T extends Rpc.DurableObjectBranded | undefined>(ns: DurableObjectNamespace<T>): DurableObjectNamespace<T> {
	const suffix = crypto.randomUUID();
	return {
		idFromName: (name: string) => ns.idFromName(`${name}:${suffix}`),
		get: (id: DurableObjectId) => ns.get(id),
	} as unknown as DurableObjectNamespace<T>;
}

export interface GatewayOptions {
	/** A NodeHealth of the gateway's own (for tests that wait on health probes): see ownNodeHealth. */
	ownNodeHealth?: boolean;
}

/** The gateway with `config`: each call returns the whole answer once the request's background work is done. */
export function gatewayWith(config: unknown, secrets: Record<string, string> = {}, opts: GatewayOptions = {}) {
	const bindings = {
		...env,
		...secrets,
		GATEWAY_CONFIG: JSON.stringify(config),
		...(opts.ownNodeHealth ? { NODE_HEALTH: ownNodeHealth(env.NODE_HEALTH) } : {}),
	};
	const call = async (path: string, init: RequestInit): Promise<Answer> => {
		const ctx = createExecutionContext();
		const started = Date.now();
		const req = new Request(`${BASE}${path}`, init) as Request<unknown, IncomingRequestCfProperties>;
		const res = await worker.fetch(req, bindings, ctx);
		const text = await res.text();
		const ms = Date.now() - started;
		await waitOnExecutionContext(ctx);
		let json: Record<string, unknown> | null = null;
		try {
			json = JSON.parse(text) as Record<string, unknown>;
		} catch {
			// An event stream.
		}
		return { res, text, json, ms };
	};
	return {
		chat: (key: string, body: Record<string, unknown>) =>
			call("/v1/chat/completions", {
				method: "POST",
				headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
				body: JSON.stringify(body),
			}),
		post: (key: string, path: string, body: Record<string, unknown>, headers: Record<string, string> = {}) =>
			call(path, {
				method: "POST",
				headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
				body: JSON.stringify(body),
			}),
		get: (key: string, path: string) => call(path, { method: "GET", headers: { authorization: `Bearer ${key}` } }),
		admin: (path: string, init: RequestInit = {}) =>
			call(`/admin${path}`, {
				...init,
				headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}`, "content-type": "application/json", ...init.headers },
			}),
	};
}

export interface NodeRow {
	model: string;
	url: string;
	weight: number;
	configured_weight: number;
	drained: boolean;
	healthy: boolean;
	cooling_until: number | null;
	in_flight: number;
	last_error: string | null;
	latency_ms: number | null;
	checked_at: number | null;
	engine_load: { source: string; waiting: number | null; running: number | null } | null;
	override: { weight: number | null; drained: boolean } | null;
}

/** Polls GET /admin/nodes until `ok` holds for the row of `url` (which also hands the view to the isolate). */
export async function waitForNode(
	gateway: ReturnType<typeof gatewayWith>,
	url: string,
	ok: (row: NodeRow) => boolean,
	timeoutMs = 10_000,
): Promise<NodeRow> {
	let last: NodeRow | undefined;
	try {
		return await waitFor(async () => {
			const { json } = await gateway.admin("/nodes");
			last = (json?.data as NodeRow[] | undefined)?.find((r) => r.url === url);
			return last && ok(last) ? last : null;
		}, timeoutMs);
	} catch {
		throw new Error(`waitForNode ${url}: last ${JSON.stringify(last)}`);
	}
}

/** The OpenAI error of an answer (empty when it has none). */
export function errorOf(a: Answer): { message?: string; type?: string; param?: string | null; code?: string | null } {
	return (a.json?.error ?? {}) as { message?: string; type?: string; param?: string | null; code?: string | null };
}

/** The rows of an /admin/nodes answer. */
export function rowsOf(a: Answer): NodeRow[] {
	return (a.json?.data ?? []) as NodeRow[];
}

/** The usage record of one request (as flushed to D1), waited for. */
export interface UsageRecord {
	model: string;
	requested_model: string | null;
	node: string | null;
	cost_nanos: number;
	prompt_tokens: number;
	completion_tokens: number;
	status: string;
}

export function usageRecord(requestId: string): Promise<UsageRecord> {
	return waitFor(
		() =>
			env.DB.prepare(
				"SELECT model, requested_model, node, cost_nanos, prompt_tokens, completion_tokens, status FROM usage_records WHERE request_id = ?",
			)
				.bind(requestId)
				.first<UsageRecord>(),
		10_000,
	);
}

/** The request id an answer carries (`x-request-id`). */
export function requestIdOf(a: Answer | Response): string {
	return ("res" in a ? a.res : a).headers.get("x-request-id") ?? "";
}

/**
 * The fleet both fallback test files route, on nodes named after `prefix` (ids from the global
 * test catalog, so a key's allowed_models can name them): test/ok on a broken node falls back to
 * the dear test/reasoning ($10/$20 per million); test/slow is cheap ($3/$6); test/trickle (a
 * slow node) and test/bad400 (a node that refuses) may fall back to the dear one. `setUp` gives
 * the nodes their behaviour.
 */
export function fallbackFleet(prefix: string) {
	const t = marker(prefix);
	const nodes = { broken: `${t}broken`, dear: `${t}dear`, cheap: `${t}cheap`, slow: `${t}slow`, refuses: `${t}refuses` };
	const models = [
		model("test/ok", [nodeUrl(nodes.broken)], { fallbacks: ["test/reasoning"] }),
		model("test/reasoning", [nodeUrl(nodes.dear)], { pricing: { input_usd_per_mtok: 10, output_usd_per_mtok: 20 } }),
		model("test/slow", [nodeUrl(nodes.cheap)], { pricing: { input_usd_per_mtok: 3, output_usd_per_mtok: 6 } }),
		// A slow node and cheap prices, but it may fall back to the dear model: it holds for that one.
		model("test/trickle", [nodeUrl(nodes.slow)], { fallbacks: ["test/reasoning"] }),
		model("test/bad400", [nodeUrl(nodes.refuses)], { fallbacks: ["test/reasoning"] }),
	];
	const setUp = async () => {
		await setNode(nodes.broken, { scenario: "fail500" });
		await setNode(nodes.slow, { scenario: "slow" });
		await setNode(nodes.refuses, { scenario: "bad400" });
	};
	return { marker: t, nodes, models, setUp };
}

/** test/reasoning's price in nano-dollars ($10 in, $20 out per million tokens). */
export function dearCost(usage: { prompt_tokens: number; completion_tokens: number }): number {
	return usage.prompt_tokens * 10_000 + usage.completion_tokens * 20_000;
}

/**
 * What a fallback test file runs against: `fleet` (fallbackFleet) plus the file's own `more`
 * models, a gateway with that config, and a key with $100 (`key()`) made before the file's tests,
 * once the fleet and then `setUp` have given the nodes their behaviour. `dear` is test/reasoning
 * as the config parses it.
 */
export function fallbackSuite(
	fleet: ReturnType<typeof fallbackFleet>,
	keyName: string,
	more: unknown[],
	setUp: () => Promise<void> = async () => {},
) {
	const config = fleetConfig([...fleet.models, ...more]);
	const dear = parseConfig(config).models.find((m) => m.id === "test/reasoning");
	if (!dear) throw new Error("the fallback fleet has no test/reasoning");
	let key: string | undefined;
	beforeAll(async () => {
		await fleet.setUp();
		key = (await createKey({ name: keyName, balance_usd: 100 })).key;
		await setUp();
	});
	const keyOf = (): string => {
		if (key === undefined) throw new Error("the suite's key is made in beforeAll");
		return key;
	};
	return { config, gw: gatewayWith(config), dear, key: keyOf };
}
