/**
 * Money on the Responses lane: nothing stored before the request is authorized, no conversation
 * continued before its output exists, no queued job run for a key that is gone, and no hold
 * lapsing while a request still runs.
 */
import { createExecutionContext, env, runInDurableObject, waitOnExecutionContext } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import { app } from "../../../src/app";
import type { ResponseStore } from "../../../src/responses/response-store";
import { HOLD_KEEPALIVE_MS } from "../../../src/settlement/hold-keep-alive";
import { admin, BASE, createKey, gw, waitFor } from "../../support/gateway";
import { holdExpiry, ledger } from "../../support/ledger";

const APP = "https://app.example.com";

interface ErrorJson {
	error: { code: string | null; message: string; type: string; param: string | null };
}

function post(key: string, body: Record<string, unknown>, headers: Record<string, string> = {}): Promise<Response> {
	return gw("/v1/responses", {
		method: "POST",
		headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
		body: JSON.stringify(body),
	});
}

function store(keyId: string): DurableObjectStub<ResponseStore> {
	return env.RESPONSES.get(env.RESPONSES.idFromName(keyId)) as DurableObjectStub<ResponseStore>;
}

/** Rows in the key's response store: turns, their stored documents, queue slots. */
function storedRows(keyId: string): Promise<{ turns: number; docs: number; queue: number }> {
	return runInDurableObject(store(keyId), (_i, state) => {
		const count = (table: string) => state.storage.sql.exec<{ n: number }>(`SELECT COUNT(*) AS n FROM ${table}`).one().n;
		return { turns: count("turns"), docs: count("docs"), queue: count("queue") };
	});
}

describe("a refused Responses request stores nothing", () => {
	for (const background of [false, true]) {
		it(`writes no input for a key that cannot pay (${background ? "background" : "sync"})`, async () => {
			const k = await createKey({ balance_usd: 0 });
			const res = await post(k.key, { model: "test/big", input: "x".repeat(200_000), background });
			expect(res.status).toBe(402);
			expect(await storedRows(k.id)).toEqual({ turns: 0, docs: 0, queue: 0 });
		});
	}

	it("writes nothing for a prompt over the model's context", async () => {
		const k = await createKey({ balance_usd: 1 });
		const res = await post(k.key, { model: "test/small-context", input: "x".repeat(5_000) });
		expect(res.status).toBe(400);
		expect(((await res.json()) as ErrorJson).error.code).toBe("context_length_exceeded");
		expect(await storedRows(k.id)).toEqual({ turns: 0, docs: 0, queue: 0 });
	});
});

describe("continuing a response", () => {
	it("is refused while the previous response is still queued or running", async () => {
		const k = await createKey({ balance_usd: 1 });
		const first = await post(k.key, { model: "test/slow", input: "first", max_output_tokens: 14, background: true });
		expect(first.status).toBe(200);
		const { id } = (await first.json()) as { id: string };
		const next = await post(k.key, { model: "test/ok", input: "second", previous_response_id: id, background: true });
		expect(next.status).toBe(400);
		expect(((await next.json()) as ErrorJson).error).toMatchObject({
			param: "previous_response_id",
			code: "previous_response_in_progress",
		});
		// Once it has finished, it can be continued.
		await waitFor(async () => {
			const r = await gw(`/v1/responses/${id}`, { headers: { authorization: `Bearer ${k.key}` } });
			const status = ((await r.json()) as { status: string }).status;
			return status !== "queued" && status !== "in_progress";
		}, 15_000);
		expect((await post(k.key, { model: "test/ok", input: "second", previous_response_id: id })).status).toBe(200);
	});

	it("refuses background with store: false (a background response is stored)", async () => {
		const k = await createKey({ balance_usd: 1 });
		const res = await post(k.key, { model: "test/ok", input: "x", background: true, store: false });
		expect(res.status).toBe(400);
		expect(((await res.json()) as ErrorJson).error.param).toBe("store");
		expect(await storedRows(k.id)).toEqual({ turns: 0, docs: 0, queue: 0 });
	});
});

describe("a queued job whose key is gone", () => {
	it("does not run, fails with the key's error, and gives its hold back", async () => {
		const parent = await createKey({ balance_usd: 1 });
		const mint = await gw("/v1/tokens", {
			method: "POST",
			headers: { authorization: `Bearer ${parent.key}`, "content-type": "application/json" },
			body: JSON.stringify({ allowed_origins: [APP] }),
		});
		const token = (await mint.json()) as { id: string; token: string };
		// Four run at once: the fifth waits in the queue while the token is revoked. The revocation
		// lands once four are running (test/slowbody: about 3 s each), however busy the box.
		const ids = await Promise.all(
			Array.from({ length: 5 }, async (_, i) => {
				const res = await post(
					token.token,
					{ model: "test/slowbody", input: `job ${i}`, max_output_tokens: 14, background: true },
					{ origin: APP },
				);
				expect(res.status).toBe(200);
				return ((await res.json()) as { id: string }).id;
			}),
		);
		await waitFor(async () => {
			const all = await Promise.all(
				ids.map((id) => runInDurableObject(store(token.id), (instance) => instance.get(id) as { status?: string } | null)),
			);
			return all.filter((r) => r?.status === "in_progress").length === 4;
		}, 15_000);
		expect((await admin(`/keys/${token.id}`, { method: "DELETE" })).status).toBe(200);
		const ended = await waitFor(async () => {
			const all = await Promise.all(
				ids.map((id) => runInDurableObject(store(token.id), (instance) => instance.get(id) as { status?: string } | null)),
			);
			return all.every((r) => r?.status && r.status !== "queued" && r.status !== "in_progress") ? all : null;
		}, 30_000);
		const failed = ended.filter((r) => r?.status === "failed");
		expect(failed).toHaveLength(1);
		const last = failed[0];
		expect((last as { error: { code: string } }).error.code).toBe("invalid_api_key");
		const info = await waitFor(async () => {
			const i = await ledger(parent.id).info();
			return i.openHolds === 0 ? i : null;
		}, 15_000);
		expect(info.heldNanos).toBe(0);
	});
});

describe("a hold outlives no running request", () => {
	it("is extended while a long request runs", async () => {
		const k = await createKey({ balance_usd: 1 });
		// Only the keep-alive's interval is faked: the engine, the ledger and waitFor keep real time.
		vi.useFakeTimers({ toFake: ["setInterval", "clearInterval"] });
		try {
			const ctx = createExecutionContext();
			const res = await app.fetch(
				new Request(`${BASE}/v1/chat/completions`, {
					method: "POST",
					headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
					body: JSON.stringify({
						model: "test/slow",
						stream: true,
						max_tokens: 30,
						messages: [{ role: "user", content: "keep me" }],
					}),
				}),
				env,
				ctx,
			);
			expect(res.status).toBe(200);
			const requestId = res.headers.get("x-request-id") as string;
			const expiry = () => holdExpiry(k.id, requestId);
			const reader = (res.body as ReadableStream<Uint8Array>).getReader();
			await reader.read();
			const first = (await expiry()) as number;
			// A keep-alive period passes while the stream moves: the hold is renewed from now.
			vi.advanceTimersByTime(HOLD_KEEPALIVE_MS);
			await waitFor(async () => ((await expiry()) ?? 0) > first);
			while (!(await reader.read()).done) {}
			await waitOnExecutionContext(ctx);
			expect((await ledger(k.id).info()).openHolds).toBe(0);
		} finally {
			vi.useRealTimers();
		}
	});
});
