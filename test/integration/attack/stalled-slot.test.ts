/**
 * Attack round six: a client that stops reading its stream keeps its engine request open until
 * `client_idle_timeout_ms` (5 minutes by default) ends it, but its `max_concurrent` slot used to
 * stop counting after one 2-minute lease, so a key capped at N could hold 3N engine requests open
 * (stop reading, wait 2 minutes, open N more). A request that is still running keeps its slot
 * while it stalls, up to the longest any of its own timeouts may be (MAX_WAIT_MS).
 */
import { createExecutionContext, env, waitOnExecutionContext } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { app } from "../../../src/app";
import { SLOT_KEEPALIVE_MS } from "../../../src/settlement/hold-keep-alive";
import { BASE, createKey, releaseEngine, waitFor } from "../../support/gateway";
import { slotUntil } from "../../support/ledger";

afterEach(() => {
	vi.useRealTimers();
});

describe("a stream whose client stopped reading", () => {
	it("keeps its concurrency slot while it runs", async () => {
		const k = await createKey({ max_concurrent: 1 });
		const marker = `stall-${crypto.randomUUID()}`;
		vi.useFakeTimers({ toFake: ["setInterval", "clearInterval"] });
		const ctx = createExecutionContext();
		const res = await app.fetch(
			new Request(`${BASE}/v1/chat/completions`, {
				method: "POST",
				headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
				body: JSON.stringify({ model: "test/gated", stream: true, max_tokens: 8, messages: [{ role: "user", content: marker }] }),
			}),
			env,
			ctx,
		);
		expect(res.status).toBe(200);
		const requestId = res.headers.get("x-request-id") as string;
		const reader = (res.body as ReadableStream<Uint8Array>).getReader();
		await reader.read();
		// The client reads nothing more. Let whatever was buffered drain into the keep-alive's count first.
		for (let i = 0; i < 3; i++) vi.advanceTimersByTime(SLOT_KEEPALIVE_MS);
		// From now on nothing moves; each tick must still extend the lease of the request that is running.
		for (let i = 0; i < 3; i++) {
			const before = (await slotUntil(k.id, requestId)) as number;
			expect(before).not.toBeNull();
			// A renewal in the same millisecond would not move the lease: wait for the clock to move.
			const t0 = Date.now();
			await waitFor(async () => Date.now() > t0);
			vi.advanceTimersByTime(SLOT_KEEPALIVE_MS);
			const after = await waitFor(async () => {
				const t = await slotUntil(k.id, requestId);
				return t !== null && t > before ? t : null;
			}, 3000).catch(() => null);
			expect(after, `tick ${i}: the lease was not renewed`).not.toBeNull();
		}
		expect(await releaseEngine(marker)).toBe(1);
		while (!(await reader.read()).done) {}
		await waitOnExecutionContext(ctx);
		expect(await slotUntil(k.id, requestId)).toBeNull();
	});
});
