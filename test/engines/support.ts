// Helpers for the engine tests (test/engines/global-setup.ts started the stack).
import OpenAI from "openai";
import { describe, inject } from "vitest";
import type { EngineAnswer } from "./llama";

export const stack = () => inject("engines");

/** `describe`, skipped with the setup's reason when no llama-server binary is there. */
export const describeEngines = (name: string, fn: () => void) => {
	const s = stack();
	if (!s.available) return describe.skip(`${name} (${s.reason})`, fn);
	return describe(name, fn);
};

export async function admin<T>(path: string, init: RequestInit = {}, expect = 200): Promise<T> {
	const res = await fetch(`${stack().gatewayUrl}/admin${path}`, {
		...init,
		headers: { authorization: `Bearer ${stack().adminToken}`, "content-type": "application/json" },
	});
	const text = await res.text();
	if (res.status !== expect) throw new Error(`${init.method ?? "GET"} /admin${path}: ${res.status} ${text}`);
	return JSON.parse(text) as T;
}

export async function createKey(name: string): Promise<{ id: string; key: string }> {
	return admin("/keys", { method: "POST", body: JSON.stringify({ name, balance_usd: 10 }) }, 201);
}

export function openai(apiKey: string): OpenAI {
	return new OpenAI({ baseURL: `${stack().gatewayUrl}/v1`, apiKey, maxRetries: 0, timeout: 60_000 });
}

let n = 0;
/** A text unique to the test, so the engine's recorded answers can be told apart. */
export const marker = (what: string) => `${what}-${process.pid}-${++n}-${Date.now().toString(36)}`;

/** What the engine behind `proxyUrl` reported for the requests that contain `contains`. */
export async function engineAnswers(proxyUrl: string, contains: string): Promise<EngineAnswer[]> {
	const res = await fetch(`${proxyUrl}/_test/answers?contains=${encodeURIComponent(contains)}`);
	return (await res.json()) as EngineAnswer[];
}

export interface UsageRow {
	request_id: string;
	model: string;
	node: string | null;
	prompt_tokens: number;
	completion_tokens: number;
	cached_tokens: number;
	cost_nanos: number;
	status: string;
	estimated: boolean;
	search_count: number;
	lane: string | null;
}

export async function waitFor<T>(fn: () => Promise<T | undefined | null | false>, timeoutMs = 15_000, what = "condition") {
	const deadline = Date.now() + timeoutMs;
	for (;;) {
		const v = await fn().catch(() => undefined);
		if (v) return v;
		if (Date.now() > deadline) throw new Error(`waitFor: ${what} not met in ${timeoutMs} ms`);
		await new Promise((r) => setTimeout(r, 100));
	}
}

/** The key's usage records once there are `count` of them (settlement runs after the answer). */
export function usageRows(keyId: string, count: number): Promise<UsageRow[]> {
	return waitFor(
		async () => {
			const page = await admin<{ data: UsageRow[] }>(`/usage?key_id=${encodeURIComponent(keyId)}`);
			return page.data.length >= count && page.data;
		},
		15_000,
		`${count} usage records`,
	);
}

/** Prices of the engines' catalog (global-setup.ts): $1 input, $0.50 cached input, $2 output per million tokens. */
export const costNanos = (prompt: number, completion: number, cached = 0) =>
	(prompt - cached) * 1000 + cached * 500 + completion * 2000;

/** The usage the engine's own `timings` say it processed: prompt = prompt_n + cache_n, completion = predicted_n. */
export function engineTotals(answers: EngineAnswer[]) {
	let prompt = 0;
	let cached = 0;
	let completion = 0;
	for (const a of answers) {
		if (!a.timings) throw new Error(`an engine answer without timings: ${JSON.stringify(a).slice(0, 300)}`);
		prompt += a.timings.prompt_n + a.timings.cache_n;
		cached += a.timings.cache_n;
		completion += a.timings.predicted_n;
	}
	return { prompt, cached, completion };
}
