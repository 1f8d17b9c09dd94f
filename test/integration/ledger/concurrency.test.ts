/**
 * A key's `max_concurrent` (src/ledger/durable/slots.ts): requests in flight never exceed it, as the
 * engine counts them, with another isolate taking slots of the same key straight through its ledger
 * (every isolate's requests meet in the key's KeyLedger, the one counter); the next request gets 429
 * `concurrency_limit_exceeded` in its lane's shape with nothing held; a client that leaves frees its
 * slot, a lost isolate's slot lapses with its lease, and a token counts inside its parent's cap.
 */
import { createExecutionContext, env, waitOnExecutionContext } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { app } from "../../../src/app";
import type { ScopeLimits } from "../../../src/ledger/durable/limits";
import { SLOT_LEASE_MS } from "../../../src/ledger/durable/slots";
import { keepAliveEvery, SLOT_KEEPALIVE_MS } from "../../../src/settlement/hold-keep-alive";
import { at } from "../../support/clock";
import { BASE, chat, createKey, type EngineRequest, engineRequests, gw, releaseEngine, waitFor } from "../../support/gateway";
import { ledger, record, slotUntil } from "../../support/ledger";
import { created, post, settled } from "../../support/responses";

type ErrorBody = { error: { message: string; type: string; code: string | null } };

const APP = "https://app.example.com";

function streamBody(model: string, marker: string) {
	return { model, stream: true, max_tokens: 8, messages: [{ role: "user", content: marker }] };
}

/** The most requests the engine had open at once (its own clock: received, closed). */
function maxOverlap(requests: EngineRequest[]): number {
	const events: Array<[number, number]> = [];
	for (const r of requests) {
		events.push([r.receivedAt, 1]);
		events.push([r.closedAt ?? Number.POSITIVE_INFINITY, -1]);
	}
	// A close and an open at the same millisecond: the close first.
	events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
	let open = 0;
	let most = 0;
	for (const [, d] of events) {
		open += d;
		most = Math.max(most, open);
	}
	return most;
}

/** Another isolate's request on the key: a hold with the key's scopes, placed straight through its ledger. */
async function otherIsolateTakes(keyId: string, requestId: string, scopes: ScopeLimits[]) {
	return ledger(keyId).authorize({ payerKeyId: keyId, requestId, holdNanos: 1000, scopes, tokens: 0 });
}

async function otherIsolateSettles(keyId: string, requestId: string) {
	await ledger(keyId).settle({ requestId, costNanos: 0, record: record(keyId) });
}

async function expectConcurrencyRefusal(res: Response): Promise<void> {
	const json = (await res.json()) as ErrorBody;
	expect(res.status, JSON.stringify(json)).toBe(429);
	expect(json.error).toMatchObject({ type: "rate_limit_error", code: "concurrency_limit_exceeded" });
	expect(json.error.message).toMatch(/max_concurrent/);
	expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
}

afterEach(() => {
	vi.useRealTimers();
});

describe("max_concurrent", () => {
	it("never lets 50 concurrent streams on a key capped at 4 have more than 4 in flight, across two isolates", async () => {
		const k = await createKey({ max_concurrent: 4 });
		const scopes: ScopeLimits[] = [{ scope: k.id, maxConcurrent: 4 }];
		// The other isolate runs one request on the key throughout.
		expect((await otherIsolateTakes(k.id, "other-1", scopes)).ok).toBe(true);

		// 50 streams at once, each held open by the engine until released: 3 slots are left.
		const marker = `cap4-${crypto.randomUUID()}`;
		const responses = await Promise.all(Array.from({ length: 50 }, () => chat(k.key, streamBody("test/gated", marker))));
		const admitted = responses.filter((r) => r.status === 200);
		const refused = responses.filter((r) => r.status !== 200);
		expect(admitted).toHaveLength(3);
		expect(refused).toHaveLength(47);
		for (const r of refused) await expectConcurrencyRefusal(r);
		// Nothing is held for a refused request: the four holds are the admitted ones and the other isolate's.
		expect((await ledger(k.id).info()).openHolds).toBe(4);
		const seen = await engineRequests({ contains: marker });
		expect(seen).toHaveLength(3);

		// The other isolate's request ends: its slot goes to the next request, and only to one.
		await otherIsolateSettles(k.id, "other-1");
		const next = await chat(k.key, streamBody("test/gated", marker));
		expect(next.status).toBe(200);
		await expectConcurrencyRefusal(await chat(k.key, streamBody("test/gated", marker)));
		expect(maxOverlap(await engineRequests({ contains: marker }))).toBe(4);

		expect(await releaseEngine(marker)).toBe(4);
		await Promise.all([...admitted, next].map((r) => r.text()));
		await waitFor(async () => (await ledger(k.id).info()).openHolds === 0);

		// Then 50 clients that each wait for a free slot and try again until served, beside the other
		// isolate holding one slot: the engine never has more than 3 of them open at once.
		expect((await otherIsolateTakes(k.id, "other-2", scopes)).ok).toBe(true);
		const wave = `wave-${crypto.randomUUID()}`;
		const refusals: number[] = [];
		const client = async (i: number) => {
			for (;;) {
				const res = await chat(k.key, streamBody("test/ok", `${wave} ${i}`));
				if (res.status === 200) return res.text();
				await expectConcurrencyRefusal(res);
				refusals.push(i);
				await waitFor(async () => (await ledger(k.id).info()).openHolds < 4);
			}
		};
		await Promise.all(Array.from({ length: 50 }, (_, i) => client(i)));
		const served = await engineRequests({ contains: wave });
		expect(served).toHaveLength(50);
		expect(refusals.length).toBeGreaterThan(0);
		expect(maxOverlap(served)).toBeLessThanOrEqual(3);
		await otherIsolateSettles(k.id, "other-2");
		await waitFor(async () => (await ledger(k.id).info()).openHolds === 0);
	}, 60_000);

	it("frees the slot of a client that leaves mid-stream", async () => {
		const k = await createKey({ max_concurrent: 1 });
		const marker = `leave-${crypto.randomUUID()}`;
		const client = new AbortController();
		const res = await chat(k.key, streamBody("test/gated", marker), { signal: client.signal });
		expect(res.status).toBe(200);
		const reader = (res.body as ReadableStream<Uint8Array>).getReader();
		await reader.read();
		await expectConcurrencyRefusal(await chat(k.key, streamBody("test/ok", marker)));
		await reader.cancel().catch(() => undefined);
		client.abort();
		// The gateway sees the client gone, closes the engine's stream and settles: the slot is free.
		await waitFor(async () => (await ledger(k.id).info()).openHolds === 0);
		const [gated] = await engineRequests({ contains: marker });
		expect(gated?.closedAt).not.toBeNull();
		const after = await chat(k.key, streamBody("test/ok", marker));
		expect(after.status).toBe(200);
		await after.text();
	});

	it("lets a lost isolate's slot lapse when its lease ends, and a renewed lease keeps it", async () => {
		const k = await createKey({ max_concurrent: 1 });
		const scopes: ScopeLimits[] = [{ scope: k.id, maxConcurrent: 1 }];
		const t0 = Date.now();
		// An isolate takes the slot, renews it once (its keep-alive: the authorize replay), then is lost.
		expect((await at(t0, () => otherIsolateTakes(k.id, "lost-1", scopes))).ok).toBe(true);
		await at(t0 + SLOT_LEASE_MS - 1000, () => ledger(k.id).authorize({ payerKeyId: k.id, requestId: "lost-1", holdNanos: 0 }));
		// Past the first lease, the renewal keeps it: still refused, nothing held for the refusal.
		const refused = await at(t0 + SLOT_LEASE_MS + 1000, () => otherIsolateTakes(k.id, "other-a", scopes));
		expect(refused).toMatchObject({ ok: false, refused: "concurrency_limited", limit: 1 });
		expect((await ledger(k.id).info()).openHolds).toBe(1);
		// Past the renewed lease, with no renewal since: the slot is free again, though its hold is not yet void.
		const later = t0 + 2 * SLOT_LEASE_MS;
		const res = await at(later, async () => {
			const r = await chat(k.key, streamBody("test/ok", "after the lease"));
			await r.text();
			return r;
		});
		expect(res.status).toBe(200);
		// A lease that ended is not revived by a late renewal (its slot went to another request).
		await at(later, () => ledger(k.id).authorize({ payerKeyId: k.id, requestId: "lost-1", holdNanos: 0 }));
		const taken = await at(later, () => otherIsolateTakes(k.id, "other-b", scopes));
		expect(taken.ok).toBe(true);
		await otherIsolateSettles(k.id, "other-b");
		await otherIsolateSettles(k.id, "lost-1");
	});

	it("renews a running request's slot lease with its hold keep-alive, and frees it at settlement", async () => {
		const k = await createKey({ max_concurrent: 1 });
		const marker = `renew-${crypto.randomUUID()}`;
		// Only the keep-alive's interval is faked: the engine and the ledger keep real time.
		vi.useFakeTimers({ toFake: ["setInterval", "clearInterval"] });
		const ctx = createExecutionContext();
		const res = await app.fetch(
			new Request(`${BASE}/v1/chat/completions`, {
				method: "POST",
				headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
				body: JSON.stringify(streamBody("test/gated", marker)),
			}),
			env,
			ctx,
		);
		expect(res.status).toBe(200);
		const requestId = res.headers.get("x-request-id") as string;
		const first = await slotUntil(k.id, requestId);
		expect(first).not.toBeNull();
		// The gated engine sends an empty chunk every 200 ms: the request moves, so each tick renews.
		const reader = (res.body as ReadableStream<Uint8Array>).getReader();
		const renewed = await waitFor(async () => {
			await reader.read();
			vi.advanceTimersByTime(SLOT_KEEPALIVE_MS);
			const t = await slotUntil(k.id, requestId);
			return t !== null && t > (first as number) ? t : null;
		});
		expect(renewed).toBeGreaterThan(first as number);
		expect(await releaseEngine(marker)).toBe(1);
		while (!(await reader.read()).done) {}
		await waitOnExecutionContext(ctx);
		expect(await slotUntil(k.id, requestId)).toBeNull();
	});

	it("renews a capped request's reservation four times a lease, others every five minutes", () => {
		expect(keepAliveEvery([{ scope: "k", maxConcurrent: 2 }])).toBe(SLOT_KEEPALIVE_MS);
		expect(SLOT_KEEPALIVE_MS * 4).toBe(SLOT_LEASE_MS);
		expect(keepAliveEvery([{ scope: "k", rpm: 5 }])).toBe(5 * 60 * 1000);
	});

	it("counts a token's requests inside its parent's cap", async () => {
		const parent = await createKey({ max_concurrent: 2 });
		const minted = await gw("/v1/tokens", {
			method: "POST",
			headers: { authorization: `Bearer ${parent.key}`, "content-type": "application/json" },
			body: JSON.stringify({ allowed_origins: [APP], max_concurrent: 1 }),
		});
		expect(minted.status).toBe(201);
		const token = (await minted.json()) as { token: string; max_concurrent: number };
		expect(token.max_concurrent).toBe(1);
		const fromApp = { headers: { origin: APP } };
		const marker = `child-${crypto.randomUUID()}`;

		const first = await chat(token.token, streamBody("test/gated", marker), fromApp);
		expect(first.status).toBe(200);
		// The token's own cap.
		await expectConcurrencyRefusal(await chat(token.token, streamBody("test/gated", marker), fromApp));
		const second = await chat(parent.key, streamBody("test/gated", marker));
		expect(second.status).toBe(200);
		// The parent's cap counts the token's request.
		await expectConcurrencyRefusal(await chat(parent.key, streamBody("test/gated", marker)));
		expect((await ledger(parent.id).info()).openHolds).toBe(2);

		expect(await releaseEngine(marker)).toBe(2);
		await Promise.all([first.text(), second.text()]);
		await waitFor(async () => (await ledger(parent.id).info()).openHolds === 0);
		const again = await chat(token.token, streamBody("test/ok", marker), fromApp);
		expect(again.status).toBe(200);
		await again.text();
	});

	it("refuses in each lane's own shape, holding nothing", async () => {
		const k = await createKey({ max_concurrent: 1 });
		expect((await otherIsolateTakes(k.id, "busy", [{ scope: k.id, maxConcurrent: 1 }])).ok).toBe(true);
		const before = await ledger(k.id).info();
		const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
			gw(path, {
				method: "POST",
				headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json", ...headers },
				body: JSON.stringify(body),
			});
		await expectConcurrencyRefusal(
			await post("/v1/chat/completions", { model: "test/ok", messages: [{ role: "user", content: "hi" }] }),
		);
		await expectConcurrencyRefusal(await post("/v1/completions", { model: "test/ok", prompt: "hi", max_tokens: 5 }));
		await expectConcurrencyRefusal(await post("/v1/embeddings", { model: "test/embed", input: "hi" }));
		await expectConcurrencyRefusal(await post("/v1/responses", { model: "test/ok", input: "hi" }));
		const msg = await post(
			"/v1/messages",
			{ model: "test/ok", max_tokens: 5, messages: [{ role: "user", content: "hi" }] },
			{ "anthropic-version": "2023-06-01" },
		);
		expect(msg.status).toBe(429);
		expect(Number(msg.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
		const body = (await msg.json()) as { type: string; error: { type: string; message: string } };
		expect(body).toMatchObject({ type: "error", error: { type: "rate_limit_error" } });
		expect(body.error.message).toMatch(/max_concurrent/);
		const after = await ledger(k.id).info();
		expect(after).toMatchObject({ openHolds: before.openHolds, heldNanos: before.heldNanos });
		await otherIsolateSettles(k.id, "busy");
	});

	it("counts a queued Responses background job as in flight until its run ends", async () => {
		const k = await createKey({ max_concurrent: 2 });
		const marker = `bg-${crypto.randomUUID()}`;
		const job = await created(k.key, { model: "test/gated", max_output_tokens: 8, background: true, input: marker });
		// The job holds a slot from the moment it is queued: one left.
		const stream = await chat(k.key, streamBody("test/gated", marker));
		expect(stream.status).toBe(200);
		await expectConcurrencyRefusal(await chat(k.key, streamBody("test/ok", marker)));
		// A second background job is refused when queued, in the Responses lane's shape.
		await expectConcurrencyRefusal(await post(k.key, { model: "test/ok", background: true, input: marker }));
		expect((await ledger(k.id).info()).openHolds).toBe(2);
		// Released (the job's run may reach the engine after the first release): both end and settle.
		expect(await releaseEngine(marker)).toBeGreaterThan(0);
		await stream.text();
		await waitFor(async () => {
			await releaseEngine(marker);
			return (await ledger(k.id).info()).openHolds === 0;
		}, 30_000);
		expect(["completed", "incomplete"]).toContain((await settled(k.key, job.id)).status);
		const after = await chat(k.key, streamBody("test/ok", marker));
		expect(after.status).toBe(200);
		await after.text();
	});

	it("shows max_concurrent in the admin API and in limits of GET /v1/key", async () => {
		const k = await createKey({ max_concurrent: 3, per_user_rpm: 7, per_user_daily_usd: 0.5 });
		const own = (await (await gw("/v1/key", { headers: { authorization: `Bearer ${k.key}` } })).json()) as {
			limits: Record<string, unknown>;
		};
		expect(own.limits).toMatchObject({ max_concurrent: 3, per_user_rpm: 7, per_user_daily_usd: 0.5 });
		expect(k).toMatchObject({ max_concurrent: 3, per_user_rpm: 7, per_user_daily_usd: 0.5 });
	});
});
