/**
 * Money on the chat path: the hold covers the worst case settlement can charge (n choices, images,
 * grounding), settlement never charges past it, a search that ran is charged, and engine usage
 * is taken only within bounds. Arithmetic as in test/support/billing.ts.
 */
import { describe, expect, it } from "vitest";
import { groundingSize } from "../../../src/search/grounding";
import { bound, type ErrorBody, IN, info, OUT, ping, SEARCH, settled, type UsageRow, usd } from "../../support/billing";
import { chat, createKey, engineRequestsSince, lastEngineId, readSse } from "../../support/gateway";

/** Starts a stream, reads its first bytes, and reports what the key holds meanwhile. */
async function heldWhileStreaming(keyId: string, key: string, body: Record<string, unknown>): Promise<number> {
	const res = await chat(key, { ...body, stream: true });
	expect(res.status).toBe(200);
	const reader = (res.body as ReadableStream<Uint8Array>).getReader();
	await reader.read();
	const held = (await info(keyId)).heldNanos;
	// Read to the end rather than cancel: local workerd may not pass a client's cancel on, and
	// the request must settle before the test moves on.
	while (!(await reader.read()).done) {}
	return held;
}

describe("n choices", () => {
	it("refuses n above max_n (16) with 400 naming n, before anything is held", async () => {
		const k = await createKey({ balance_usd: 1 });
		const since = await lastEngineId();
		const res = await chat(k.key, { model: "test/ok", n: 17, max_tokens: 5, messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(400);
		const body = (await res.json()) as ErrorBody;
		expect(body.error).toMatchObject({ type: "invalid_request_error", param: "n" });
		expect(body.error.message).toContain("16");
		expect(await engineRequestsSince(since)).toHaveLength(0);
		expect((await info(k.id)).openHolds).toBe(0);
	});

	it("accepts n up to max_n", async () => {
		const k = await createKey({ balance_usd: 1 });
		const res = await chat(k.key, { model: "test/ok", n: 16, max_tokens: 5, messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(200);
	});

	it("holds the output of every choice", async () => {
		const k = await createKey({ balance_usd: 1 });
		const held = await heldWhileStreaming(k.id, k.key, {
			model: "test/slow",
			n: 3,
			max_tokens: 40,
			messages: [{ role: "user", content: ping() }],
		});
		expect(held).toBe(bound({ bytes: 11 }) * IN + 3 * 40 * OUT);
	});

	it("admits n > 1 only when the balance covers the extra choices' worst case; one choice as before", async () => {
		// One choice: hold 7×1_000 + 10×2_000 = 27_000. Three more choices: 3 × 10 × 2_000 = 60_000.
		const k = await createKey({ balance_usd: usd(30_000) });
		const body = { model: "test/ok", max_tokens: 10, messages: [{ role: "user", content: ping() }] };
		const refused = await chat(k.key, { ...body, n: 4 });
		expect(refused.status).toBe(402);
		expect(((await refused.json()) as ErrorBody).error.code).toBe("insufficient_balance");
		expect((await info(k.id)).openHolds).toBe(0);
		expect((await chat(k.key, { ...body, n: 1 })).status).toBe(200);
		const rich = await createKey({ balance_usd: usd(100_000) });
		expect((await chat(rich.key, { ...body, n: 4 })).status).toBe(200);
	});

	it("keeps n > 1 inside a spend cap's headroom", async () => {
		const k = await createKey({ balance_usd: 1, spend_limit_usd: usd(30_000) });
		const body = { model: "test/ok", max_tokens: 10, messages: [{ role: "user", content: ping() }] };
		const refused = await chat(k.key, { ...body, n: 4 });
		expect(refused.status).toBe(403);
		expect((await chat(k.key, { ...body, n: 1 })).status).toBe(200);
	});

	it("counts every choice in the tpm estimate", async () => {
		const k = await createKey({ balance_usd: 1, tpm: 100 });
		const res = await chat(k.key, { model: "test/ok", n: 2, max_tokens: 40, messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(200);
		// 100 − (7 + 2 × 40)
		expect(res.headers.get("x-ratelimit-remaining-tokens")).toBe("13");
	});
});

describe("the hold covers what settlement can charge", () => {
	it("counts each image part at the model's image_tokens_max (16,384 by default), within the context", async () => {
		const k = await createKey({ balance_usd: 1 });
		const held = await heldWhileStreaming(k.id, k.key, {
			model: "test/slow",
			max_tokens: 40,
			messages: [
				{
					role: "user",
					content: [
						{ type: "text", text: ping() },
						{ type: "image_url", image_url: { url: "https://example.org/cat.png" } },
					],
				},
			],
		});
		expect(held).toBe(bound({ bytes: 11, images: 1 }) * IN + 40 * OUT);
		expect(held).toBe(8192 * IN + 40 * OUT);
	});

	it("holds the largest grounding message a search can add, and the charge stays within the hold", async () => {
		const k = await createKey({ balance_usd: 1 });
		const body = {
			model: "test/slow:online",
			max_tokens: 40,
			venym: { search_results: 3 },
			messages: [{ role: "user", content: ping() }],
		};
		const held = await heldWhileStreaming(k.id, k.key, body);
		const grounding = groundingSize(3);
		const hold = bound({ bytes: 11 + grounding.bytes, tokens: 4 + grounding.tokens }) * IN + 40 * OUT + SEARCH;
		expect(held).toBe(hold);
		// Non-stream on a fast node (test/slow would pass the first-byte timeout without streaming).
		const res = await chat(k.key, { ...body, model: "test/ok:online", stream: false });
		expect(res.status).toBe(200);
		const { rows } = await settled(k.id, 2);
		const done = rows.find((r) => r.status === "completed") as UsageRow;
		// The engine counted the grounding text: more than the 7-token estimate, within the hold.
		expect(done.prompt_tokens).toBeGreaterThan(7);
		expect(done.cost_nanos).toBeLessThanOrEqual(hold);
	});

	it("charges no search when there was nothing to search for (image-only message)", async () => {
		const k = await createKey({ balance_usd: 1 });
		const res = await chat(k.key, {
			model: "test/ok:online",
			max_tokens: 5,
			messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "https://example.org/cat.png" } }] }],
		});
		expect(res.status).toBe(200);
		expect(res.headers.get("x-venym-web-search")).toBe("skipped");
		const { rows } = await settled(k.id, 1);
		expect(rows[0]?.search_count).toBe(0);
		expect(rows[0]?.cost_nanos).toBeLessThan(SEARCH);
	});
});

describe("settlement never charges more than the hold", () => {
	it("40 parallel requests whose engine bills big prompts overspend the balance by at most one hold", async () => {
		// Bound 1_039 (11 bytes, 4 template tokens, 1_024): the engine's 1_040 prompt tokens are billed at the bound.
		const hold = bound({ bytes: 11 }) * IN + 1 * OUT;
		const cost = 1039 * IN + 1 * OUT;
		expect(cost).toBeLessThanOrEqual(hold);
		const k = await createKey({ balance_usd: usd(5 * hold) });
		const statuses = await Promise.all(
			Array.from({ length: 40 }, async () => {
				const res = await chat(k.key, { model: "test/bigprompt", max_tokens: 1, messages: [{ role: "user", content: ping() }] });
				await res.text();
				return res.status;
			}),
		);
		const ok = statuses.filter((s) => s === 200).length;
		expect(ok + statuses.filter((s) => s === 402).length).toBe(40);
		const { info: i, rows } = await settled(k.id, ok);
		expect(rows.every((r) => r.cost_nanos === cost && !r.estimated)).toBe(true);
		expect(i.balanceNanos).toBeGreaterThanOrEqual(-hold);
	});
});

describe("a search that ran is charged", () => {
	it("even when the engine then refuses the request", async () => {
		const k = await createKey({ balance_usd: 1 });
		const res = await chat(k.key, { model: "test/flat400:online", messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(400);
		const { rows } = await settled(k.id, 1);
		expect(rows[0]).toMatchObject({ search_count: 1, cost_nanos: SEARCH });
	});
});

describe("engine usage is accepted only within bounds", () => {
	for (const stream of [false, true]) {
		const lane = stream ? "stream" : "non-stream";

		it(`replaces an absurd prompt count with the estimate and flags it (${lane})`, async () => {
			const k = await createKey({ balance_usd: 1 });
			const res = await chat(k.key, { model: "test/hugeusage", stream, messages: [{ role: "user", content: ping() }] });
			expect(res.status).toBe(200);
			let usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
			if (stream) {
				const frames = (await readSse(res)).filter((f) => f !== "[DONE]").map((f) => JSON.parse(f));
				usage = frames.at(-1).usage;
			} else {
				usage = ((await res.json()) as { usage: typeof usage }).usage;
			}
			// What the client sees is what is billed: the estimate, not 1e300.
			expect(usage).toMatchObject({ prompt_tokens: 7, completion_tokens: 7, total_tokens: 14 });
			const { info: i, rows } = await settled(k.id, 1);
			expect(rows[0]).toMatchObject({ prompt_tokens: 7, completion_tokens: 7, estimated: true, cost_nanos: 7 * IN + 7 * OUT });
			expect(Number.isSafeInteger(i.balanceNanos)).toBe(true);
			expect(i.balanceNanos).toBe(1e9 - (7 * IN + 7 * OUT));
		});

		it(`never stores negative or fractional counts (${lane})`, async () => {
			const k = await createKey({ balance_usd: 1 });
			const res = await chat(k.key, { model: "test/negusage", stream, messages: [{ role: "user", content: ping() }] });
			expect(res.status).toBe(200);
			await res.text();
			const { rows } = await settled(k.id, 1);
			const row = rows[0] as UsageRow;
			expect(row.estimated).toBe(true);
			expect(row.prompt_tokens).toBe(7);
			expect(Number.isSafeInteger(row.completion_tokens) && row.completion_tokens > 0).toBe(true);
			expect(row.cost_nanos).toBeGreaterThan(0);
		});

		it(`caps completion tokens at what was asked for (${lane})`, async () => {
			const k = await createKey({ balance_usd: 1 });
			const res = await chat(k.key, {
				model: "test/hugeusage",
				stream,
				max_tokens: 5,
				messages: [{ role: "user", content: ping() }],
			});
			expect(res.status).toBe(200);
			await res.text();
			const { rows } = await settled(k.id, 1);
			expect(rows[0]?.completion_tokens).toBeLessThanOrEqual(5);
			expect(rows[0]?.estimated).toBe(true);
		});
	}
});
