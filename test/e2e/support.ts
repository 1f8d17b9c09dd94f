// Helpers for end-to-end tests against the gateway that test/e2e/global-setup.ts started.
import OpenAI from "openai";
import { inject } from "vitest";
import type { RecordedRequest } from "../../dev/engine.mjs";

export const gatewayUrl = (): string => inject("gatewayUrl");
export const engineUrl = (): string => inject("engineUrl");

/**
 * `fetch`, sent again once when a pooled keep-alive connection turns out closed before any answer
 * (ECONNRESET, "other side closed"): the local server may close an idle connection the pool reuses.
 */
async function fetchOnce(url: string, init: RequestInit): Promise<Response> {
	try {
		return await fetch(url, init);
	} catch (e) {
		const code = (e as { cause?: { code?: string } }).cause?.code;
		if (code !== "ECONNRESET" && code !== "UND_ERR_SOCKET") throw e;
		return fetch(url, init);
	}
}

/** Calls the admin API with the admin bearer token; throws unless the status is `expect`. */
export async function admin<T>(path: string, init: RequestInit = {}, expect = 200): Promise<T> {
	const res = await fetchOnce(`${gatewayUrl()}/admin${path}`, {
		...init,
		headers: {
			authorization: `Bearer ${inject("adminToken")}`,
			"content-type": "application/json",
			...(init.headers as Record<string, string> | undefined),
		},
	});
	const text = await res.text();
	if (res.status !== expect) throw new Error(`${init.method ?? "GET"} /admin${path}: ${res.status} ${text}`);
	return JSON.parse(text) as T;
}

export interface CreatedKey {
	id: string;
	key: string;
	name: string;
	balance_usd: number;
}

export function createKey(fields: Record<string, unknown> = {}): Promise<CreatedKey> {
	return admin<CreatedKey>("/keys", { method: "POST", body: JSON.stringify({ name: "e2e", balance_usd: 10, ...fields }) }, 201);
}

/** The official SDK pointed at the gateway; no retries, so every error surfaces as thrown. */
export function openaiClient(apiKey: string): OpenAI {
	return new OpenAI({ baseURL: `${gatewayUrl()}/v1`, apiKey, maxRetries: 0, timeout: 20_000 });
}

export interface UsageRecord {
	request_id: string;
	key_id: string;
	model: string;
	prompt_tokens: number;
	completion_tokens: number;
	cost_usd: number;
	status: string;
	estimated: boolean;
	node: string | null;
	created_at: number;
}

export async function usageFor(keyId: string): Promise<UsageRecord[]> {
	const page = await admin<{ data: UsageRecord[] }>(`/usage?key_id=${encodeURIComponent(keyId)}`);
	return page.data;
}

/** Engine requests whose messages contain `marker` (each test uses its own); the engine narrows the list to bodies containing it. */
export async function engineRequestsWith(marker: string): Promise<RecordedRequest[]> {
	const res = await fetch(`${engineUrl()}/_engine/requests?contains=${encodeURIComponent(marker)}`);
	return ((await res.json()) as RecordedRequest[]).filter((r) => JSON.stringify(r.body?.messages ?? null).includes(marker));
}

/** Polls `fn` until it returns something truthy; settlement and aborts happen after the response. */
export async function waitFor<T>(
	fn: () => Promise<T | undefined | null | false>,
	timeoutMs = 5000,
	what = "condition",
): Promise<T> {
	const deadline = Date.now() + timeoutMs;
	let last: unknown;
	for (;;) {
		try {
			const v = await fn();
			if (v) return v;
		} catch (err) {
			last = err;
		}
		if (Date.now() > deadline)
			throw new Error(`waitFor: ${what} not met in ${timeoutMs} ms${last ? ` (last error: ${last})` : ""}`);
		await new Promise((r) => setTimeout(r, 50));
	}
}

/** A string unique to one test, put in the prompt so its engine request can be found. */
export function marker(label: string): string {
	return `${label}-${Math.random().toString(36).slice(2, 10)}`;
}
