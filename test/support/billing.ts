/**
 * What the billing tests share (chat/billing-outcomes, ledger/balance-concurrency, routes/credits,
 * routes/key-views, routes/admin-usage): exact nano-dollar amounts for the test catalog, and
 * reading a key's ledger and usage records once it has settled.
 *
 * Arithmetic (test pricing: $1/Mtok in = 1_000 nano$/token, $2/Mtok out =
 * 2_000 nano$/token, max_output_tokens 1000):
 *  - a message `ping XXXXXX` (11 characters) is estimated by the gateway at ceil(11/4) + 4 = 7
 *    prompt tokens; the dev engine counts ceil(11/4) = 3 and answers "Echo: ping XXXXXX"
 *    (3 words = 3 completion tokens, 17 characters ≈ ceil(17/4) = 5 estimated tokens);
 *  - hold = the prompt at its billing bound (its 11 UTF-8 bytes + 4 template tokens + 1_024 =
 *    1_039 tokens) × 1_000 + 1000 × 2_000 = 3_039_000: the most settlement can charge, however
 *    the engine counts;
 *  - completed: 3 × 1_000 + 3 × 2_000 = 9_000;
 *  - estimated (no engine usage): 7 × 1_000 + 5 × 2_000 = 17_000.
 */
import { env, runDurableObjectAlarm, SELF } from "cloudflare:test";
import { expect } from "vitest";
import type { LedgerInfo } from "../../src/ledger/durable/key-ledger";
import { admin, BASE, createKey, type EngineRequest, engineRequestsSince, lastEngineId, waitFor } from "./gateway";
import { flushUsage, ledger } from "./ledger";

export const IN = 1_000;
export const OUT = 2_000;
/** The prompt's billing bound for one 11-byte message: 11 bytes + 4 template tokens + 1_024. */
export const PROMPT_BOUND = 11 + 4 + 1024;
export const HOLD = PROMPT_BOUND * IN + 1000 * OUT; // 3_039_000
export const COMPLETED = 3 * IN + 3 * OUT; // 9_000
export const ESTIMATED = 7 * IN + 5 * OUT; // 17_000

export interface UsageRow {
	request_id: string;
	key_id: string;
	model: string;
	node: string | null;
	prompt_tokens: number;
	completion_tokens: number;
	total_tokens: number;
	cost_usd: number;
	cost_nanos: number;
	status: string;
	estimated: boolean;
	search_count: number;
	lane: string | null;
	created_at: number;
}

export interface UsagePage {
	object: string;
	data: UsageRow[];
	next_cursor: string | null;
}

export interface ErrorBody {
	error: { message: string; type: string; param: string | null; code: string | null; [k: string]: unknown };
}

/** An 11-character message unique to this call, so the engine's log can be matched to it. */
export function ping(): string {
	const id = crypto.randomUUID().replaceAll("-", "").slice(0, 6);
	return `ping ${id}`;
}

export const usd = (nanos: number) => Number((nanos / 1e9).toFixed(9));

export function info(keyId: string): Promise<LedgerInfo> {
	return ledger(keyId).info();
}

/** Waits until every request of the key has settled and its records have left the outbox. */
export async function settledInfo(keyId: string, settles: number): Promise<LedgerInfo> {
	return waitFor(async () => {
		const i = await info(keyId);
		if (i.openHolds !== 0 || i.outboxSize !== 0) {
			if (i.outboxSize > 0) await runDurableObjectAlarm(ledger(keyId));
			return null;
		}
		const n = await env.DB.prepare("SELECT COUNT(*) AS n FROM usage_records WHERE key_id = ?").bind(keyId).first<{ n: number }>();
		return n && n.n >= settles ? i : null;
	}, 10_000);
}

export async function usagePage(query: string): Promise<UsagePage> {
	const res = await admin(`/usage${query}`);
	expect(res.status).toBe(200);
	return (await res.json()) as UsagePage;
}

/** One request's usage record, once its key's outbox has reached D1. */
export function usageRecordOf(keyId: string, requestId: string): Promise<UsageRow> {
	return waitFor(async () => {
		await flushUsage(ledger(keyId));
		return (await usagePage(`?key_id=${keyId}`)).data.find((r) => r.request_id === requestId);
	}, 10_000);
}

/** All usage records of a key (after settlement), newest first. */
export async function usageOf(keyId: string, expected: number): Promise<UsageRow[]> {
	await settledInfo(keyId, expected);
	const page = await usagePage(`?key_id=${keyId}&limit=1000`);
	return page.data;
}

export async function engineCallsFor(since: number, marker: string): Promise<EngineRequest[]> {
	const all = await engineRequestsSince(since);
	return all.filter((r) => JSON.stringify(r.body ?? {}).includes(marker));
}

export async function keyView(id: string) {
	const res = await admin(`/keys/${id}`);
	expect(res.status).toBe(200);
	return (await res.json()) as Record<string, unknown>;
}

export function textDeltas(frames: string[]): string {
	let text = "";
	for (const f of frames) {
		if (f === "[DONE]") continue;
		const j = JSON.parse(f) as { choices?: Array<{ delta?: { content?: string } }> };
		for (const c of j.choices ?? []) text += c.delta?.content ?? "";
	}
	return text;
}

export const SEARCH = 5_000_000;
/**
 * The prompt's billing bound (money/hold-bound.ts) on a test model: its UTF-8 bytes, each image at
 * 16,384 tokens (the default image_tokens_max), its fixed tokens (4 a message) and 1_024, within the
 * 8,192-token context: what a hold covers.
 */
export const bound = ({ bytes, images = 0, tokens = 4 }: { bytes: number; images?: number; tokens?: number }) =>
	Math.min(8192, bytes + images * 16_384 + tokens + 1024);

/** Every request of the key settled and flushed: the ledger and the usage records. */
export async function settled(keyId: string, records: number): Promise<{ info: LedgerInfo; rows: UsageRow[] }> {
	let last: unknown;
	const i = await waitFor(async () => {
		const x = await info(keyId);
		last = x;
		if (x.openHolds !== 0) return null;
		if (x.outboxSize > 0) {
			await runDurableObjectAlarm(ledger(keyId));
			return null;
		}
		const n = await env.DB.prepare("SELECT COUNT(*) AS n FROM usage_records WHERE key_id = ?").bind(keyId).first<{ n: number }>();
		last = { ...x, records: n?.n };
		return n && n.n >= records ? x : null;
	}, 10_000).catch((err: unknown) => {
		throw new Error(`not settled: ${JSON.stringify(last)}`, { cause: err });
	});
	const res = await admin(`/usage?key_id=${keyId}&limit=100`);
	const rows = ((await res.json()) as { data: UsageRow[] }).data;
	return { info: i, rows };
}

/** Where a billing case starts: a key with $10, the engine record's last id, and a fresh message. */
export async function billingCase() {
	const k = await createKey({ balance_usd: 10 });
	const since = await lastEngineId();
	return { k, since, msg: ping() };
}

/**
 * A chat request its client walks away from: `pending` is the response on its way; `leave` aborts
 * the request and drops whatever of the response had come.
 */
export function leavingChat(key: string, body: Record<string, unknown>) {
	const controller = new AbortController();
	const pending = SELF.fetch(`${BASE}/v1/chat/completions`, {
		method: "POST",
		headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
		body: JSON.stringify(body),
		signal: controller.signal,
	});
	const leave = async () => {
		controller.abort();
		await pending.then(
			(r) => r.body?.cancel(),
			() => undefined,
		);
	};
	return { pending, controller, leave };
}

/**
 * A $10 key's one request billed at the estimate (no engine usage: 7 prompt and 5 completion
 * tokens, ESTIMATED): the ledger settled with nothing held, and the record says so with `fields`.
 */
export async function expectEstimatedBill(keyId: string, fields: Partial<UsageRow>): Promise<void> {
	const end = await settledInfo(keyId, 1);
	expect(end).toMatchObject({ spentNanos: ESTIMATED, balanceNanos: 10_000_000_000 - ESTIMATED, openHolds: 0 });
	const [row] = await usageOf(keyId, 1);
	expect(row).toMatchObject({ estimated: true, prompt_tokens: 7, completion_tokens: 5, cost_nanos: ESTIMATED, ...fields });
}
