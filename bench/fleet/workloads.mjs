/**
 * The fleet simulator's workloads. Each `start(sim, opts)` schedules arrivals on the virtual clock
 * and hands requests to `sim.submit`. A request: its prompt length and the block keys of its prompt
 * (chained, so a block matches only after the same prefix), its answer length, the body the
 * gateway keys it by, and optionally the blocks its answer adds to the next turn's prompt.
 */
import { BLOCK } from "./engine.mjs";

/** Chain ids: a segment's id after a given prefix, interned to small integers. */
export class Chains {
	ids = new Map();
	of(prev, seg) {
		const k = `${prev},${seg}`;
		let id = this.ids.get(k);
		if (id === undefined) {
			id = this.ids.size + 1;
			this.ids.set(k, id);
		}
		return id;
	}
}

/** The block keys of a token sequence made of segments ({chain, len}): one per full block. */
export function blockKeys(segments, tokens, from = 0) {
	const keys = [];
	let start = 0;
	let si = 0;
	for (let end = BLOCK; end <= tokens; end += BLOCK) {
		while (start + segments[si].len < end) {
			start += segments[si].len;
			si++;
		}
		if (end > from) keys.push(segments[si].chain * 65536 + (end - start));
	}
	return keys;
}

const uniformInt = (r, lo, hi) => lo + Math.floor(r() * (hi - lo + 1));
const exp = (r, mean) => -Math.log(1 - r()) * mean;
const reserveOf = (answer) => Math.ceil(answer / BLOCK) + 1;

/**
 * Poisson arrivals at `rate` per second until `until`, or along `stages` ([{rate, duration}], one
 * after another) when given; calls `fn(now)` at each.
 */
export function poisson(sim, rate, until, fn, stages) {
	const plan = stages ?? [{ rate, duration: until }];
	let stage = 0;
	let stageStart = 0;
	const next = (now) => {
		for (;;) {
			const s = plan[stage];
			if (!s) return;
			const t = now + exp(sim.rng, 1 / s.rate);
			if (t < stageStart + s.duration) {
				sim.at(t, (at) => {
					fn(at);
					next(at);
				});
				return;
			}
			// Memoryless: restart the draw at the stage boundary with the next stage's rate.
			now = stageStart + s.duration;
			stageStart = now;
			stage++;
		}
	};
	next(0);
}

/**
 * llm-d's precise prefix-cache workload ("KV-Cache Wins You Can See", llm-d.ai/blog/kvcache-wins-you-can-see,
 * and its inference-perf report, profile X-70R-6kSys): `data.type: shared_prefix` with
 * num_groups 150, num_prompts_per_group 5 (users a group), system_prompt_len 6,000,
 * question_len 1,200 (each user's question repeats, so it is cached per user), output_len 1,000
 * (ignore_eos); 8 vLLM pods of Qwen3-32B, TP=2 on H100s, 307,328 KV tokens a pod: resident set
 * 150 × (6,000 + 5 × 1,200) = 1.8M tokens = 73.2% of the cluster's 2,458,624. Load: Poisson,
 * stepped QPS (warm-up 15 × 50 s, then 3, 10, 15, 20, 22, 25, 30, 35, 40, 43, 46, 49, 52, 55, 57, 60).
 * Each request: a uniformly random (group, user). The report's own totals (8,730 output tokens/s at
 * 35.6 requests/s for precise scheduling) come to about 245 output tokens a request, not 1,000:
 * `observedOutput` replays the ladder with that (`--llmd-output` sets any).
 */
export const LLMD = {
	groups: 150,
	users: 5,
	system: 6000,
	question: 1200,
	output: 1000,
	stages: [
		[15, 50],
		[3, 20],
		[10, 20],
		[15, 20],
		[20, 38],
		[22, 34],
		[25, 30],
		[30, 25],
		[35, 21],
		[40, 38],
		[43, 36],
		[46, 33],
		[49, 30],
		[52, 29],
		[55, 27],
		[57, 26],
		[60, 25],
	].map(([rate, duration]) => ({ rate, duration })),
	observedOutput: 245,
	published: {
		// Summary across QPS, TTFT p90 (s) and output tokens/s, from the same report.
		precise: { p90: 0.542, outputTps: 8730.0 },
		estimated: { p90: 31.083, outputTps: 6944.4 },
		random: { p90: 92.551, outputTps: 4428.7 },
		load: { p90: 94.865, outputTps: 4266.4 },
	},
};

/**
 * SGLang's generated-shared-prefix dataset (`python -m sglang.bench_serving --dataset-name
 * generated-shared-prefix`, python/sglang/bench_serving.py, added in sgl-project/sglang#1990),
 * run with its defaults in the v0.4 blog's router benchmark (lmsys.org/blog/2024-12-04-sglang-v0-4,
 * "Reproduce benchmark": no --gsp-* flag given): --gsp-num-groups 64, --gsp-prompts-per-group 16,
 * --gsp-system-prompt-len 2048, --gsp-question-len 128, --gsp-output-len 256; 8 workers of
 * Llama-3.1-8B on 8× A100 80GB; published: 158,596 against 82,665 tokens/s, cache hit rate 75%
 * against 20% (round-robin). A request: a random group's system prompt and a question of its own.
 * (#1990's run measured 2,326,152 input tokens for 1,024 prompts, 2,272 a prompt after
 * retokenising, which is where "about 2,100-token system prompts" comes from.)
 */
export const SGLANG = { groups: 64, perGroup: 16, system: 2048, question: 128, output: 256 };

export const WORKLOADS = {
	llmd: {
		title: "llm-d precise prefix-cache workload",
		engine: "h100x2-qwen3-32b",
		nodes: 8,
		unit: "requests/s",
		ladderStart: 2,
		durationS: 180,
		warmupS: 60,
		workingSet: () => LLMD.groups * (LLMD.system + LLMD.users * LLMD.question),
		start(sim, o) {
			const chains = new Chains();
			const prompts = [];
			for (let g = 0; g < LLMD.groups; g++) {
				const sys = chains.of(0, `sys${g}`);
				for (let u = 0; u < LLMD.users; u++) {
					const segments = [
						{ chain: sys, len: LLMD.system },
						{ chain: chains.of(sys, `q${g}.${u}`), len: LLMD.question },
					];
					prompts.push({ g, keys: blockKeys(segments, LLMD.system + LLMD.question) });
				}
			}
			const stages = o.ladder ? LLMD.stages : undefined;
			const output = o.llmdOutput || LLMD.output;
			poisson(
				sim,
				o.rate,
				o.durationS,
				(now) => {
					const p = prompts[Math.floor(sim.rng() * prompts.length)];
					sim.submit(
						{
							prompt: LLMD.system + LLMD.question,
							keys: p.keys,
							answer: output,
							reserve: reserveOf(output),
							// inference-perf's `type: completion`: one prompt string, the system prompt first.
							body: { prompt: `system prompt of group ${p.g}` },
						},
						now,
					);
				},
				stages,
			);
		},
	},
	sglang: {
		title: "SGLang generated-shared-prefix",
		engine: "a100-llama-8b",
		nodes: 8,
		unit: "requests/s",
		ladderStart: 16,
		durationS: 120,
		warmupS: 30,
		workingSet: (o) => (o.gspGroups ?? SGLANG.groups) * (o.gspSystem ?? SGLANG.system),
		start(sim, o) {
			const groups = o.gspGroups ?? SGLANG.groups;
			const system = o.gspSystem ?? SGLANG.system;
			const question = o.gspQuestion ?? SGLANG.question;
			const output = o.gspOutput ?? SGLANG.output;
			const chains = new Chains();
			const sys = Array.from({ length: groups }, (_, g) => chains.of(0, `sys${g}`));
			let n = 0;
			const send = (g, now) => {
				const segments = [
					{ chain: sys[g], len: system },
					{ chain: chains.of(sys[g], `q${n++}`), len: question },
				];
				sim.submit(
					{
						prompt: system + question,
						keys: blockKeys(segments, system + question),
						answer: output,
						reserve: reserveOf(output),
						body: { prompt: `system prompt of group ${g}` },
					},
					now,
				);
			};
			if (o.burst) {
				// The published run: the whole dataset (groups × prompts a group) at once (--request-rate
				// inf), shuffled, on cold caches.
				const order = [];
				for (let g = 0; g < groups; g++) for (let i = 0; i < (o.gspPerGroup ?? SGLANG.perGroup); i++) order.push(g);
				for (let i = order.length - 1; i > 0; i--) {
					const j = Math.floor(sim.rng() * (i + 1));
					[order[i], order[j]] = [order[j], order[i]];
				}
				sim.at(0, (now) => {
					for (const g of order) send(g, now);
				});
				return;
			}
			poisson(sim, o.rate, o.durationS, (now) => send(Math.floor(sim.rng() * groups), now));
		},
	},
	ours: {
		title: "our multi-turn workload",
		engine: "h100-llama-8b",
		nodes: 8,
		unit: "sessions/s",
		ladderStart: 1,
		durationS: 240,
		warmupS: 90,
		workingSet: () => null,
		/**
		 * Sessions of 4–12 turns as a Poisson process, each turn's prompt the whole history plus a
		 * 20–400-token message, answers 50–800 tokens, a 5 s think time; 60% of sessions open with
		 * one of five app system prompts of 1–4k tokens, the rest with their own of 0.2–2k; 20% send
		 * `prompt_cache_key`, the rest nothing (the gateway keys them by prefix).
		 */
		start(sim, o) {
			const chains = new Chains();
			const appRng = sim.fork(1);
			const apps = Array.from({ length: 5 }, (_, i) => ({ id: `app-${i}`, len: uniformInt(appRng, 1000, 4000) }));
			let sessionId = 0;
			const turn = (s, now) => {
				const user = uniformInt(s.r, 20, 400);
				const answer = uniformInt(s.r, 50, 800);
				const prev = s.segments[s.segments.length - 1].chain;
				s.segments.push({ chain: chains.of(prev, `u${s.id}.${s.turn}`), len: user });
				s.tokens += user;
				const prompt = s.tokens;
				sim.submit(
					{
						prompt,
						keys: blockKeys(s.segments, prompt),
						answer,
						reserve: reserveOf(answer),
						body: {
							messages: [
								{ role: "system", content: s.app.id },
								{ role: "user", content: `first message of session ${s.id}` },
							],
						},
						cacheKey: s.cacheKey,
						answerKeys: () => {
							const last = s.segments[s.segments.length - 1].chain;
							s.segments.push({ chain: chains.of(last, `a${s.id}.${s.turn}`), len: answer });
							s.tokens += answer;
							return blockKeys(s.segments, s.tokens, prompt);
						},
						onFinish: (t) => {
							s.turn++;
							if (s.turn < s.turns) sim.at(t + exp(s.r, 5), (at) => turn(s, at));
						},
					},
					now,
				);
			};
			poisson(sim, o.rate, o.durationS, (now) => {
				const id = sessionId++;
				const r = sim.fork(7919 + id);
				const app = r() < 0.6 ? apps[Math.floor(r() * apps.length)] : { id: `own-${id}`, len: uniformInt(r, 200, 2000) };
				const s = {
					id,
					r,
					app,
					turns: uniformInt(r, 4, 12),
					turn: 0,
					cacheKey: r() < 0.2 ? `pck-${id}` : undefined,
					segments: [{ chain: chains.of(0, app.id), len: app.len }],
					tokens: app.len,
				};
				turn(s, now);
			});
		},
	},
};
