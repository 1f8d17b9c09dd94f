/**
 * An engine's own view of its load, read from what it serves anyway: Prometheus `/metrics`
 * (vLLM, SGLang, llama.cpp with --metrics, TGI), llama.cpp's `/slots`, Ollama's `/api/ps`.
 * Pure: text or JSON in, numbers out.
 */
import { parsePrometheus, type Sample } from "./prometheus";

export type LoadSource = "vllm" | "sglang" | "llamacpp" | "tgi" | "slots" | "ollama";

export interface EngineLoad {
	source: LoadSource;
	/** Requests queued in the engine, not yet scheduled (null: the engine does not say). */
	waiting: number | null;
	/** Requests the engine is working on. */
	running: number | null;
	/** KV cache in use, 0–1. */
	kv_cache_usage: number | null;
	/** llama.cpp: how many slots the server has. */
	slots?: number;
	/** Ollama: the models loaded in memory (a model not among them loads before it answers). */
	models_loaded?: string[];
}

interface Family {
	source: LoadSource;
	waiting: string[];
	running: string[];
	kv: string[];
}

// Names per engine; the first family with any sample wins. vLLM renamed its KV gauge in V1
// (gpu_cache_usage_perc → kv_cache_usage_perc); both are fractions despite the name.
const FAMILIES: Family[] = [
	{
		source: "vllm",
		waiting: ["vllm:num_requests_waiting"],
		running: ["vllm:num_requests_running"],
		kv: ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
	},
	{
		source: "sglang",
		waiting: ["sglang:num_queue_reqs"],
		running: ["sglang:num_running_reqs"],
		kv: ["sglang:token_usage"],
	},
	{
		source: "llamacpp",
		waiting: ["llamacpp:requests_deferred"],
		running: ["llamacpp:requests_processing"],
		kv: ["llamacpp:kv_cache_usage_ratio"],
	},
	{ source: "tgi", waiting: ["tgi_queue_size"], running: ["tgi_batch_current_size"], kv: [] },
];

const WANTED = new Set(FAMILIES.flatMap((f) => [...f.waiting, ...f.running, ...f.kv]));

/** Sums a gauge over its label sets (vLLM data-parallel ranks, one per `engine` label); NaN is skipped. */
function sum(samples: Sample[], names: string[]): number | null {
	let total: number | null = null;
	for (const s of samples) {
		if (!names.includes(s.name) || !Number.isFinite(s.value)) continue;
		total = (total ?? 0) + s.value;
	}
	return total;
}

function max(samples: Sample[], names: string[]): number | null {
	let top: number | null = null;
	for (const s of samples) {
		if (!names.includes(s.name) || !Number.isFinite(s.value)) continue;
		top = top === null ? s.value : Math.max(top, s.value);
	}
	return top;
}

function count(v: number | null): number | null {
	return v === null ? null : Math.max(0, Math.round(v));
}

/** The load a `/metrics` page shows, or null when it names no engine the router knows. */
export function loadFromMetrics(text: string): EngineLoad | null {
	const samples = parsePrometheus(text, (name) => WANTED.has(name));
	for (const f of FAMILIES) {
		const waiting = sum(samples, f.waiting);
		const running = sum(samples, f.running);
		const kv = max(samples, f.kv);
		if (waiting === null && running === null && kv === null) continue;
		return {
			source: f.source,
			waiting: count(waiting),
			running: count(running),
			kv_cache_usage: kv === null ? null : Math.min(1, Math.max(0, kv)),
		};
	}
	return null;
}

function isRecord(v: unknown): v is Record<string, unknown> {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** llama.cpp's `/slots`: one entry a slot, busy when `is_processing` (or, before that field, `state` ≠ 0). */
export function loadFromSlots(json: unknown): EngineLoad | null {
	if (!Array.isArray(json) || json.length === 0 || !json.every(isRecord)) return null;
	let busy = 0;
	for (const slot of json as Array<Record<string, unknown>>) {
		const processing = typeof slot.is_processing === "boolean" ? slot.is_processing : Number(slot.state ?? 0) !== 0;
		if (processing) busy++;
	}
	return { source: "slots", waiting: null, running: busy, kv_cache_usage: null, slots: json.length };
}

/**
 * llama.cpp's `/metrics` with its `/slots` beside it: the metrics' queue, and the slots' count
 * (how many requests it runs at once; one more waits in `requests_deferred`). The busier of the
 * two running counts wins (they are read a moment apart).
 */
export function withSlots(metrics: EngineLoad, slots: EngineLoad | null): EngineLoad {
	if (!slots?.slots) return metrics;
	const running = Math.max(metrics.running ?? 0, slots.running ?? 0);
	return { ...metrics, running, slots: slots.slots };
}

/** Ollama's `/api/ps`: which models are loaded. It tells nothing about queues. */
export function loadFromOllamaPs(json: unknown): EngineLoad | null {
	if (!isRecord(json) || !Array.isArray(json.models)) return null;
	const names: string[] = [];
	for (const m of json.models) {
		if (!isRecord(m)) continue;
		const name = typeof m.name === "string" ? m.name : typeof m.model === "string" ? m.model : null;
		if (name) names.push(name);
	}
	return { source: "ollama", waiting: null, running: null, kv_cache_usage: null, models_loaded: names };
}
