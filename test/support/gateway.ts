import { env, SELF } from "cloudflare:test";
import OpenAI from "openai";
import { expect, vi } from "vitest";
import { TEST_ADMIN_TOKEN } from "./test-config";

export const BASE = "http://gateway.test";

export function gw(path: string, init?: RequestInit): Promise<Response> {
	return SELF.fetch(`${BASE}${path}`, init);
}

export function admin(path: string, init: RequestInit = {}): Promise<Response> {
	return gw(`/admin${path}`, {
		...init,
		headers: {
			authorization: `Bearer ${TEST_ADMIN_TOKEN}`,
			"content-type": "application/json",
			...(init.headers as Record<string, string>),
		},
	});
}

export interface CreatedKey {
	id: string;
	key: string;
	balance_usd: number;
}

export async function createKey(fields: Record<string, unknown> = {}): Promise<CreatedKey> {
	const res = await admin("/keys", { method: "POST", body: JSON.stringify({ name: "test", balance_usd: 10, ...fields }) });
	if (res.status !== 201) throw new Error(`createKey: ${res.status} ${await res.text()}`);
	return (await res.json()) as CreatedKey;
}

export function chat(key: string, body: Record<string, unknown>, init: RequestInit = {}): Promise<Response> {
	return gw("/v1/chat/completions", {
		method: "POST",
		...init,
		headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...(init.headers as Record<string, string>) },
		body: JSON.stringify(body),
	});
}

export interface EngineRequest {
	id: number;
	method: string;
	path: string;
	scenario: string;
	headers: Record<string, string>;
	body: Record<string, unknown> | null;
	aborted: boolean;
	finished: boolean;
	/** When the engine received the request and when its connection closed (the engine's clock, unix ms; null while open). */
	receivedAt: number;
	closedAt: number | null;
}

/**
 * What the engine received, oldest first. The engine keeps every request of the run (bodies
 * included, some of them megabytes), so ask it for what a test needs: `since` an id from an
 * earlier listing, `contains` a marker in the raw body. `engineUrl` names the engine tenant whose
 * record to read (fleet.ts `ownEngineUrl`); the file's own by default.
 */
export async function engineRequests(
	filter: { since?: number; contains?: string } = {},
	engineUrl: string = env.ENGINE_URL,
): Promise<EngineRequest[]> {
	const query = new URLSearchParams();
	if (filter.since !== undefined) query.set("since", String(filter.since));
	if (filter.contains !== undefined) query.set("contains", filter.contains);
	const qs = query.toString();
	return (await (await fetch(`${engineUrl}/_engine/requests${qs ? `?${qs}` : ""}`)).json()) as EngineRequest[];
}

/** Engine requests made after `since` (an id from a previous listing). */
export function engineRequestsSince(since: number): Promise<EngineRequest[]> {
	return engineRequests({ since });
}

/** The id of the engine's latest request (0 when there is none), to list only later ones. */
export async function lastEngineId(): Promise<number> {
	const [last] = (await (await fetch(`${env.ENGINE_URL}/_engine/requests?tail=1`)).json()) as EngineRequest[];
	return last?.id ?? 0;
}

/**
 * Polls a real state until `fn` returns a truthy value, which it returns (settlement runs in
 * waitUntil, after the response). The deadline only bounds a failing test: generous, so a busy
 * machine never fails a passing one.
 */
export function waitFor<T>(fn: () => Promise<T | undefined | null | false>, timeoutMs = 10_000): Promise<T> {
	return vi.waitUntil(fn, { timeout: timeoutMs, interval: 25 }) as Promise<T>;
}

/**
 * Lets the engine's open gated requests (the `gated` scenario, test/gated) whose body contains
 * `contains` finish; how many there were. Until then they send empty chunks and never end.
 */
export async function releaseEngine(contains: string, engineUrl: string = env.ENGINE_URL): Promise<number> {
	const res = await fetch(`${engineUrl}/_engine/release`, { method: "POST", body: JSON.stringify({ contains }) });
	return ((await res.json()) as { released: number }).released;
}

/** Reads an SSE body into its data payloads (strings), including a trailing partial frame. */
export async function readSse(res: Response): Promise<string[]> {
	const text = await res.text();
	return text
		.split("\n\n")
		.filter((f) => f.trim())
		.map((f) =>
			f
				.split("\n")
				.filter((l) => l.startsWith("data:"))
				.map((l) => l.slice(5).trimStart())
				.join("\n"),
		);
}

/** The official openai SDK talking to the gateway in this workerd (no network, no retries). */
export function sdkClient(key: string): OpenAI {
	return new OpenAI({
		apiKey: key,
		baseURL: `${BASE}/v1`,
		maxRetries: 0,
		fetch: (input, init) => gw(new URL(String(input instanceof Request ? input.url : input)).pathname, init as RequestInit),
	});
}

/** The failed-authentication throttle's answer (keys and the admin token alike): 429 with a Retry-After of 1–60 s. */
export async function expectAuthThrottled(res: Response): Promise<void> {
	expect(res.status).toBe(429);
	const body = (await res.json()) as { error: { type: string; code: string; message: string } };
	expect(body.error.type).toBe("rate_limit_error");
	expect(body.error.code).toBe("rate_limit_exceeded");
	expect(body.error.message).toMatch(/failed authentication/);
	const retry = Number(res.headers.get("retry-after"));
	expect(retry).toBeGreaterThanOrEqual(1);
	expect(retry).toBeLessThanOrEqual(60);
}
