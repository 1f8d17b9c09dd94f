import { describe, expect, it } from "vitest";
import { loadFromMetrics, loadFromOllamaPs, loadFromSlots, withSlots } from "../../../src/routing/engine-load";
import { parsePrometheus, parseSampleLine } from "../../../src/routing/prometheus";

describe("parsePrometheus", () => {
	it("reads names, labels and values, and skips comments and blank lines", () => {
		const text = [
			"# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
			"# TYPE vllm:num_requests_waiting gauge",
			'vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-27B"} 3.0',
			"",
			"process_open_fds 12",
			"   ",
		].join("\n");
		expect(parsePrometheus(text)).toEqual([
			{ name: "vllm:num_requests_waiting", labels: { engine: "0", model_name: "Qwen/Qwen3-27B" }, value: 3 },
			{ name: "process_open_fds", labels: {}, value: 12 },
		]);
	});

	it("reads escaped quotes, backslashes, newlines, commas and braces inside label values", () => {
		const s = parseSampleLine(String.raw`m{a="x\"y",b="c:\\d",c="l1\nl2",d="1,2}"} 7`);
		expect(s).toEqual({ name: "m", labels: { a: 'x"y', b: "c:\\d", c: "l1\nl2", d: "1,2}" }, value: 7 });
	});

	it("reads NaN, infinities, exponents, a trailing comma, spaces and a timestamp", () => {
		expect(parseSampleLine("a NaN")?.value).toBeNaN();
		expect(parseSampleLine("a +Inf")?.value).toBe(Number.POSITIVE_INFINITY);
		expect(parseSampleLine("a -Inf")?.value).toBe(Number.NEGATIVE_INFINITY);
		expect(parseSampleLine("a 1.5e+03 1712345678901")?.value).toBe(1500);
		expect(parseSampleLine('a{x="1",} 2')).toEqual({ name: "a", labels: { x: "1" }, value: 2 });
		expect(parseSampleLine('a { x = "1" } 2')).toEqual({ name: "a", labels: { x: "1" }, value: 2 });
		expect(parseSampleLine("a\t4")?.value).toBe(4);
	});

	it("skips malformed lines instead of failing", () => {
		for (const line of ["a", "a{x=1} 2", 'a{x="1" 2', "a notanumber", "9bad 1", '{x="1"} 2', "a{x} 3"]) {
			expect(parseSampleLine(line), line).toBeNull();
		}
		expect(parsePrometheus("garbage here\nok 1\n{broken\n")).toEqual([{ name: "ok", labels: {}, value: 1 }]);
	});

	it("reads CRLF pages and filters by name before parsing labels", () => {
		const text = 'a{x="1"} 1\r\nb{y="2"} 2\r\n';
		expect(parsePrometheus(text, (n) => n === "b")).toEqual([{ name: "b", labels: { y: "2" }, value: 2 }]);
	});
});

const VLLM = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 5.0
vllm:num_requests_running{engine="1",model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting{engine="1",model_name="m"} NaN
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.61
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="0.3",model_name="m"} 0.0
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 10.0
`;

const SGLANG = `# HELP sglang:num_queue_reqs The number of requests in the waiting queue
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="qwen"} 7.0
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="qwen"} 12.0
sglang:token_usage{model_name="qwen"} 0.9
`;

describe("loadFromMetrics", () => {
	it("sums vLLM's queue and running gauges over engines and takes the fullest KV cache", () => {
		expect(loadFromMetrics(VLLM)).toEqual({ source: "vllm", waiting: 2, running: 8, kv_cache_usage: 0.61 });
	});

	it("reads vLLM's older gpu_cache_usage_perc", () => {
		expect(loadFromMetrics("vllm:gpu_cache_usage_perc 0.3\nvllm:num_requests_waiting 0")).toEqual({
			source: "vllm",
			waiting: 0,
			running: null,
			kv_cache_usage: 0.3,
		});
	});

	it("reads SGLang's queue and running requests", () => {
		expect(loadFromMetrics(SGLANG)).toEqual({ source: "sglang", waiting: 7, running: 12, kv_cache_usage: 0.9 });
	});

	it("reads llama.cpp's deferred and processing requests, and TGI's queue", () => {
		expect(loadFromMetrics("llamacpp:requests_processing 1\nllamacpp:requests_deferred 4")).toMatchObject({
			source: "llamacpp",
			waiting: 4,
			running: 1,
		});
		expect(loadFromMetrics("tgi_queue_size 9\ntgi_batch_current_size 4")).toMatchObject({
			source: "tgi",
			waiting: 9,
			running: 4,
		});
	});

	it("knows nothing from a page without engine gauges, or with only NaN", () => {
		expect(loadFromMetrics("process_cpu_seconds_total 3\n")).toBeNull();
		expect(loadFromMetrics("")).toBeNull();
		expect(loadFromMetrics("vllm:num_requests_waiting NaN")).toBeNull();
	});
});

describe("loadFromSlots and loadFromOllamaPs", () => {
	it("counts busy llama.cpp slots, old and new shapes", () => {
		expect(
			loadFromSlots([
				{ id: 0, is_processing: true },
				{ id: 1, is_processing: false },
			]),
		).toEqual({
			source: "slots",
			waiting: null,
			running: 1,
			kv_cache_usage: null,
			slots: 2,
		});
		expect(
			loadFromSlots([
				{ id: 0, state: 1 },
				{ id: 1, state: 1 },
				{ id: 2, state: 0 },
			])?.running,
		).toBe(2);
		expect(loadFromSlots({ error: "slots endpoint disabled" })).toBeNull();
		expect(loadFromSlots([])).toBeNull();
	});

	it("lists the models Ollama has loaded", () => {
		const ps = { models: [{ name: "llama3:8b", size: 1 }, { model: "qwen3:4b" }, "junk"] };
		expect(loadFromOllamaPs(ps)).toEqual({
			source: "ollama",
			waiting: null,
			running: null,
			kv_cache_usage: null,
			models_loaded: ["llama3:8b", "qwen3:4b"],
		});
		expect(loadFromOllamaPs(null)).toBeNull();
	});
});

describe("withSlots", () => {
	it("adds llama.cpp's slot count to its metrics' queue, the busier running count winning", () => {
		const metrics = { source: "llamacpp" as const, waiting: 1, running: 2, kv_cache_usage: null };
		const slots = loadFromSlots([
			{ is_processing: true },
			{ is_processing: true },
			{ is_processing: true },
			{ is_processing: false },
		]);
		expect(withSlots(metrics, slots)).toEqual({ source: "llamacpp", waiting: 1, running: 3, kv_cache_usage: null, slots: 4 });
		expect(withSlots(metrics, null)).toBe(metrics);
	});
});
