/**
 * Clients that walk away, many at once: every request that placed a hold settles exactly once (no
 * hold left open until it expires), and the usage records add up to the ledger's debits.
 *
 * Two ways workerd ends a request whose client left, each of which used to strand the hold:
 * - before the response, while the hold was on its way: with nothing under waitUntil yet (settlement
 *   was registered only once the hold was placed; src/settlement/settlement.ts now registers it
 *   first) the handler was dropped mid-await;
 * - during a stream, when the runtime was not reading the body at that moment: it drops the body
 *   without cancelling it, so `done` never came; only the request's signal fires.
 */
import { env, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { app } from "../../../src/app";
import { ping, settled } from "../../support/billing";
import { BASE, chat, createKey, engineRequests, waitFor } from "../../support/gateway";
import { expectBooks, ledger } from "../../support/ledger";

const CREDIT_NANOS = 50_000_000_000;

function send(key: string, model: string, stream: boolean, i: number, signal: AbortSignal): Promise<Response> {
	return SELF.fetch(`${BASE}/v1/chat/completions`, {
		method: "POST",
		headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
		body: JSON.stringify({ model, stream, messages: [{ role: "user", content: `walk away ${i}` }], max_tokens: 8 }),
		signal,
	});
}

function sendResponse(key: string, model: string, i: number, signal: AbortSignal): Promise<Response> {
	return SELF.fetch(`${BASE}/v1/responses`, {
		method: "POST",
		headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
		body: JSON.stringify({ model, stream: true, store: false, input: `walk away ${i}`, max_output_tokens: 16 }),
		signal,
	});
}

const MODELS = [
	["test/ok", false],
	["test/ok", true],
	["test/slow", false],
	["test/slow", true],
] as const;

/** A request whose client leaves after `abortAfterMs`; one answered first is read whole. Whether it was answered. */
async function abortedBeforeAnswer(key: string, i: number, abortAfterMs: number): Promise<boolean> {
	const [model, stream] = MODELS[i % MODELS.length] as (typeof MODELS)[number];
	const client = new AbortController();
	const timer = setTimeout(() => client.abort(), abortAfterMs);
	try {
		const res = await send(key, model, stream, i, client.signal);
		clearTimeout(timer);
		// A client leaving mid-stream is the next test.
		await res.text();
		return true;
	} catch {
		return false;
	}
}

describe("clients that walk away", () => {
	it("waves of requests aborted before their answer, many while their hold is placed, all settle", async () => {
		const k = await createKey({ balance_usd: CREDIT_NANOS / 1e9 });
		let answered = 0;
		let sent = 0;
		// How long a hold's ledger call is out depends on the load: each wave spreads its aborts wider.
		for (const spreadMs of [10, 25, 50, 100, 200]) {
			const wave = await Promise.all(
				Array.from({ length: 80 }, (_, i) => abortedBeforeAnswer(k.key, sent + i, (i * spreadMs) / 80)),
			);
			sent += wave.length;
			answered += wave.filter(Boolean).length;
		}
		// Many of them left before their answer: the case under test.
		expect(sent - answered).toBeGreaterThan(sent / 10);
		await expectBooks(k.id, CREDIT_NANOS);
	});

	for (const lane of ["chat", "responses"] as const) {
		it(`40 ${lane} streams whose client leaves after the first frame all settle, billed as client_disconnected`, async () => {
			const k = await createKey({ balance_usd: CREDIT_NANOS / 1e9 });
			const ids = await Promise.all(
				Array.from({ length: 40 }, async (_, i) => {
					const client = new AbortController();
					// test/ok sends its whole answer at once, test/slow a word every 50 ms.
					const model = i % 2 ? "test/ok" : "test/slow";
					const res = await (lane === "chat"
						? send(k.key, model, true, i, client.signal)
						: sendResponse(k.key, model, i, client.signal));
					expect(res.status).toBe(200);
					const reader = (res.body as ReadableStream<Uint8Array>).getReader();
					await reader.read();
					// Some cancel their read first, others just drop the connection.
					if (i % 4 < 2) await reader.cancel().catch(() => undefined);
					client.abort();
					return res.headers.get("x-request-id") as string;
				}),
			);
			const { rows } = await expectBooks(k.id, CREDIT_NANOS);
			expect(rows.map((r) => r.request_id).sort()).toEqual([...ids].sort());
			// A test/ok answer may have gone out whole before its client left.
			for (const r of rows) expect(["client_disconnected", "completed"]).toContain(r.status);
			expect(rows.filter((r) => r.status === "client_disconnected").length).toBeGreaterThan(0);
		});
	}
});

/** An ExecutionContext that records what is under waitUntil, and whether it ever all ended while the request went on. */
function recordingContext() {
	let pending = 0;
	const registrations: { pendingBefore: number }[] = [];
	const ctx = {
		waitUntil(p: Promise<unknown>) {
			registrations.push({ pendingBefore: pending });
			pending++;
			void p.finally(() => pending--).catch(() => undefined);
		},
		passThroughOnException() {},
		props: {},
	} as unknown as ExecutionContext;
	return { ctx, registrations, pending: () => pending };
}

describe("an inference request is under waitUntil from its first moment", () => {
	const lanes = [
		["/v1/chat/completions", { model: "test/ok", messages: [{ role: "user", content: "hi" }], max_tokens: 4 }],
		["/v1/chat/completions", { model: "test/ok", stream: true, messages: [{ role: "user", content: "hi" }], max_tokens: 4 }],
		["/v1/completions", { model: "test/ok", prompt: "hi", max_tokens: 4 }],
		["/v1/embeddings", { model: "test/embed", input: "hi" }],
		["/v1/responses", { model: "test/ok", input: "hi", max_output_tokens: 16, store: false }],
	] as const;
	for (const [path, body] of lanes) {
		it(`${path}${"stream" in body ? " (stream)" : ""}: registered before anything awaits, with no gap until it settled`, async () => {
			const k = await createKey({ balance_usd: 1 });
			const { ctx, registrations, pending } = recordingContext();
			const request = new Request(`${BASE}${path}`, {
				method: "POST",
				headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
				body: JSON.stringify(body),
			});
			const answer = app.fetch(request, env, ctx);
			// Synchronously, before the first await (the hold's ledger call comes later).
			expect(registrations).toHaveLength(1);
			const res = await answer;
			expect(res.status).toBe(200);
			await res.text();
			await waitFor(async () => pending() === 0);
			// Every later waitUntil (settlement, the log line) came while an earlier one still kept the request alive.
			expect(registrations.slice(1).filter((r) => r.pendingBefore === 0)).toEqual([]);
			expect(await ledger(k.id).info()).toMatchObject({ openHolds: 0, heldNanos: 0 });
		});
	}
});

describe("a client that leaves while the engine has not answered", () => {
	for (const stream of [false, true]) {
		it(`holds nothing once the engine has answered (${stream ? "stream" : "non-stream"})`, async () => {
			const k = await createKey({ balance_usd: 1 });
			const controller = new AbortController();
			const text = ping();
			const pending = chat(
				k.key,
				{ model: "test/slowheaders", stream, max_tokens: 5, messages: [{ role: "user", content: text }] },
				{ signal: controller.signal },
			).catch((err: unknown) => err);
			// The client leaves once the engine has the request and before it answers (its headers take 600 ms).
			await waitFor(async () => (await engineRequests({ contains: text })).length === 1);
			controller.abort();
			const outcome = await pending;
			if (outcome instanceof Response) await outcome.body?.cancel().catch(() => {});
			// The engine answers 600 ms after the call; the hold must not outlive that answer.
			const { info: i, rows } = await settled(k.id, 1);
			expect(i.openHolds).toBe(0);
			expect(i.heldNanos).toBe(0);
			expect(rows).toHaveLength(1);
		});
	}
});
