// The load shapes the bench runs. Every function takes targets ({name, url, agent, key, …})
// and returns raw samples; the phases (bench/phases/) turn them into results.
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { send } from "./http.mjs";

/**
 * The order of the targets' turns in pass `i`: a shuffle, the same for the same `i` in every run.
 * A target's request lands on the deferred work (settlement, log line, the ledger's commit) of
 * the one before it, on the same two cores: rotating the start of a fixed order (`(i + j) % n`)
 * kept every target behind the same neighbour, and the one behind the heaviest paid for it
 * (session 10: up to +0.8 ms of p50 in bench/ablate.mjs). Shuffled, every target follows every
 * other about equally often.
 */
export function turnOrder(targets, i) {
	const order = [...targets];
	let seed = (i + 1) * 0x9e3779b1;
	const random = () => {
		seed = (seed + 0x6d2b79f5) | 0;
		let x = Math.imul(seed ^ (seed >>> 15), 1 | seed);
		x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
		return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
	};
	for (let k = order.length - 1; k > 0; k--) {
		const r = Math.floor(random() * (k + 1));
		[order[k], order[r]] = [order[r], order[k]];
	}
	return order;
}

/** `perTarget` requests to each target, one at a time, interleaved request by request (turnOrder). */
export async function sequential(targets, perTarget, request) {
	const out = Object.fromEntries(targets.map((t) => [t.name, { latency: [], errors: 0, sample: null }]));
	for (let i = 0; i < perTarget; i++) {
		for (const t of turnOrder(targets, i)) {
			const { path, body } = request(t);
			const r = await send(t, path, body, { keepText: i === perTarget - 1 });
			const slot = out[t.name];
			if (r.ok) slot.latency.push(r.total);
			else {
				slot.errors++;
				slot.firstError ??= `${r.status} ${r.error ?? ""}`;
			}
			if (i === perTarget - 1) slot.sample = r;
		}
	}
	return out;
}

/**
 * Open loop at a fixed rate: request i is due at start + i/rate whatever happened before,
 * and its latency counts from when it was due (no coordinated omission).
 */
export async function fixedRate(target, rate, durationMs, request) {
	const latency = [];
	let errors = 0;
	/** Failed requests by HTTP status, or by socket error when there was none. */
	const errorKinds = {};
	const pending = [];
	const interval = 1000 / rate;
	const start = performance.now();
	let i = 0;
	for (;;) {
		const now = performance.now();
		if (now - start >= durationMs) break;
		while (start + i * interval <= now) {
			const due = start + i * interval;
			i++;
			const { path, body } = request(target);
			const lag = performance.now() - due;
			pending.push(
				send(target, path, body).then((r) => {
					if (r.ok) latency.push(lag + r.total);
					else {
						errors++;
						const why = r.status || r.error;
						errorKinds[why] = (errorKinds[why] ?? 0) + 1;
					}
				}),
			);
		}
		await sleep(1);
	}
	await Promise.all(pending);
	return { latency, errors, errorKinds, sent: i, elapsedMs: performance.now() - start };
}

/** Closed loop: `inflight` clients, each sending its next request when the last one ends. */
export async function closedLoop(target, inflight, durationMs, request) {
	const latency = [];
	let errors = 0;
	let done = 0;
	const start = performance.now();
	const deadline = start + durationMs;
	async function client() {
		while (performance.now() < deadline) {
			const { path, body } = request(target);
			const r = await send(target, path, body);
			if (r.ok) {
				latency.push(r.total);
				done++;
			} else errors++;
		}
	}
	await Promise.all(Array.from({ length: inflight }, client));
	const elapsedMs = performance.now() - start;
	return { latency, errors, done, elapsedMs, rps: (done * 1000) / elapsedMs };
}

/** `count` streams, `concurrent` at a time, all started together per batch. A request may ask to keep the body text. */
export async function streams(target, concurrent, count, request) {
	const results = [];
	for (let started = 0; started < count; started += concurrent) {
		const n = Math.min(concurrent, count - started);
		const batch = await Promise.all(
			Array.from({ length: n }, () => {
				const { path, body, keepText } = request(target);
				return send(target, path, body, { keepText });
			}),
		);
		results.push(...batch);
	}
	return results;
}
