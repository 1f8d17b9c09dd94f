/**
 * One health check of one node: is it up (`GET {server root}/health`, else `GET {url}/models`),
 * and what load does its engine report (`/metrics`, else llama.cpp's `/slots`, else Ollama's
 * `/api/ps`). What a node answers to is remembered, so a steady round costs a node two small
 * GETs (three for llama.cpp, whose `/slots` says its capacity beside its metrics): one when it
 * exposes no load at all. `fetch` and the clock are passed in.
 */
import { readCappedText } from "../http/read-capped";
import { type Secrets, secretNamed } from "../secrets";
import { type EngineLoad, loadFromMetrics, loadFromOllamaPs, loadFromSlots, withSlots } from "./engine-load";
import type { ProbeResult, ProbeTarget } from "./view-types";

/** What a node turned out to answer to, learnt on the first probes. */
export interface ProbeMemo {
	health: "health" | "models" | null;
	load: "metrics" | "slots" | "ollama" | "none" | null;
	/** When a node that exposed no load is asked again (ms). */
	loadRetryAt: number;
	/** A llama.cpp node's `/slots` beside its metrics: served (true), refused (false, started without `--slots`), not yet asked. */
	slots?: boolean;
	/** The slot count `/slots` last showed: kept when a busy server is too slow to list them again. */
	slotCount?: number;
}

export function newMemo(): ProbeMemo {
	return { health: null, load: null, loadRetryAt: 0 };
}

export interface ProbeDeps {
	fetch: typeof fetch;
	/** Secrets by name, for targets that name an `api_key_env`. */
	secrets: Secrets;
	timeoutMs: number;
	now: () => number;
}

/** A node that exposes no load is asked again this much later. */
export const LOAD_RETRY_MS = 10 * 60 * 1000;
/** The most of a metrics page read (vLLM's, histograms included, is a few hundred KiB). */
const MAX_LOAD_BYTES = 2 * 1024 * 1024;

/** The node's server root: its URL without a trailing `/v1`. */
export function serverRoot(url: string): string {
	return url.replace(/\/+$/, "").replace(/\/v1$/, "");
}

type Answer = { status: number; text: string | null } | { error: "timeout" | "connection failed" };

function readCapped(res: Response, max: number): Promise<string | null> {
	return readCappedText(res.body, max);
}

async function get(deps: ProbeDeps, url: string, target: ProbeTarget, read: boolean): Promise<Answer> {
	const controller = new AbortController();
	const timer = setTimeout(() => controller.abort(new Error("probe timeout")), deps.timeoutMs);
	const headers: Record<string, string> = { accept: "application/json, text/plain" };
	const key = target.api_key_env ? secretNamed(deps.secrets, target.api_key_env) : undefined;
	if (typeof key === "string" && key) headers.authorization = `Bearer ${key}`;
	try {
		const res = await deps.fetch(url, { method: "GET", headers, redirect: "manual", signal: controller.signal });
		// The body is read under the same timeout: a node that trickles its metrics is a slow node.
		const text = read && res.ok ? await readCapped(res, MAX_LOAD_BYTES) : null;
		if (!read || !res.ok) await res.body?.cancel().catch(() => {});
		return { status: res.status, text };
	} catch {
		return { error: controller.signal.aborted ? "timeout" : "connection failed" };
	} finally {
		clearTimeout(timer);
	}
}

function isMissing(a: Answer): boolean {
	return "status" in a && (a.status === 404 || a.status === 405 || a.status === 501);
}

function failure(a: Answer): string | null {
	if ("error" in a) return a.error;
	return a.status >= 200 && a.status < 300 ? null : `status ${a.status}`;
}

async function checkHealth(target: ProbeTarget, memo: ProbeMemo, deps: ProbeDeps): Promise<Answer> {
	if (target.health_url) return get(deps, target.health_url, target, false);
	if (memo.health !== "models") {
		const a = await get(deps, `${serverRoot(target.url)}/health`, target, false);
		if (!isMissing(a)) {
			if ("status" in a) memo.health = "health";
			return a;
		}
		memo.health = "models";
	}
	return get(deps, `${target.url.replace(/\/+$/, "")}/models`, target, false);
}

const LOAD_KINDS = ["metrics", "slots", "ollama"] as const;
type LoadKind = (typeof LOAD_KINDS)[number];

function loadUrl(target: ProbeTarget, kind: LoadKind): string {
	const root = serverRoot(target.url);
	if (kind === "metrics") return target.metrics_url ?? `${root}/metrics`;
	return kind === "slots" ? `${root}/slots` : `${root}/api/ps`;
}

function parseJson(text: string): unknown {
	try {
		return JSON.parse(text);
	} catch {
		return null;
	}
}

function parseLoad(kind: LoadKind, text: string): EngineLoad | null {
	if (kind === "metrics") return loadFromMetrics(text);
	return kind === "slots" ? loadFromSlots(parseJson(text)) : loadFromOllamaPs(parseJson(text));
}

/** llama.cpp's metrics say the queue but not how many slots it has: `/slots` does, when served. */
async function withLlamaSlots(load: EngineLoad, target: ProbeTarget, memo: ProbeMemo, deps: ProbeDeps): Promise<EngineLoad> {
	if (memo.slots === false) return load;
	const a = await get(deps, loadUrl(target, "slots"), target, true);
	if (isMissing(a)) {
		memo.slots = false;
		return load;
	}
	const slots = "text" in a && a.text !== null ? loadFromSlots(parseJson(a.text)) : null;
	if (slots?.slots) {
		memo.slots = true;
		memo.slotCount = slots.slots;
		return withSlots(load, slots);
	}
	// A server busy enough to answer /slots late still has as many slots as last time.
	return memo.slotCount ? { ...load, slots: memo.slotCount } : load;
}

/**
 * The engine's load alone (no health check): what a node's `/metrics` (else `/slots`, `/api/ps`)
 * says now, null when it exposes none or did not answer. The batch dispatcher reads it itself
 * before placing lines, fresher than the last probe round.
 */
export async function readLoad(target: ProbeTarget, memo: ProbeMemo, deps: ProbeDeps): Promise<EngineLoad | null> {
	if (memo.load === "none" && deps.now() < memo.loadRetryAt) return null;
	const kinds: readonly LoadKind[] =
		memo.load && memo.load !== "none" ? [memo.load] : target.metrics_url ? ["metrics"] : LOAD_KINDS;
	for (const kind of kinds) {
		const a = await get(deps, loadUrl(target, kind), target, true);
		if ("error" in a) return null;
		const load = a.text === null ? null : parseLoad(kind, a.text);
		if (load) {
			memo.load = kind;
			return load.source === "llamacpp" ? withLlamaSlots(load, target, memo, deps) : load;
		}
		// Known to answer but not now (a 5xx, a page cut short): try the same again next round.
		if (memo.load === kind && !isMissing(a)) return null;
	}
	memo.load = "none";
	memo.loadRetryAt = deps.now() + LOAD_RETRY_MS;
	return null;
}

export async function probeNode(target: ProbeTarget, memo: ProbeMemo, deps: ProbeDeps): Promise<ProbeResult> {
	const started = deps.now();
	const health = await checkHealth(target, memo, deps);
	const checkedAt = deps.now();
	const error = failure(health);
	if (error) return { healthy: false, checked_at: checkedAt, error, latency_ms: null, load: null };
	// A dead node's load does not matter: only a healthy one is asked.
	const load = await readLoad(target, memo, deps);
	return { healthy: true, checked_at: checkedAt, error: null, latency_ms: checkedAt - started, load };
}
