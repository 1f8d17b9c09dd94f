import { describe, expect, it } from "vitest";
import { formatDuration } from "../../../src/ledger/ledger-client";
import { at } from "../../support/clock";
import { chat, createKey, readSse } from "../../support/gateway";
import { ledger } from "../../support/ledger";

type ErrorBody = { error: { message: string; type: string; code: string | null } };

function body(extra: Record<string, unknown> = {}) {
	return { model: "test/ok", messages: [{ role: "user", content: "hi" }], max_tokens: 5, ...extra };
}

function limits(res: Response) {
	const h = (n: string) => res.headers.get(n);
	return {
		limitRequests: h("x-ratelimit-limit-requests"),
		remainingRequests: h("x-ratelimit-remaining-requests"),
		resetRequests: h("x-ratelimit-reset-requests"),
		limitTokens: h("x-ratelimit-limit-tokens"),
		remainingTokens: h("x-ratelimit-remaining-tokens"),
		resetTokens: h("x-ratelimit-reset-tokens"),
	};
}

describe("rpm", () => {
	it("admits rpm requests a minute with falling remaining counts, then answers 429 with Retry-After", async () => {
		const { key } = await createKey({ rpm: 3 });
		const seen: Array<string | null> = [];
		for (let i = 0; i < 3; i++) {
			const res = await chat(key, body());
			expect(res.status).toBe(200);
			const l = limits(res);
			expect(l.limitRequests).toBe("3");
			expect(l.resetRequests).toMatch(/^(\d+m)?\d+(\.\d+)?m?s$/);
			expect(l.limitTokens).toBeNull();
			seen.push(l.remainingRequests);
		}
		expect(seen).toEqual(["2", "1", "0"]);

		const refused = await chat(key, body());
		const json = (await refused.json()) as ErrorBody;
		expect(refused.status).toBe(429);
		expect(json.error).toMatchObject({ code: "rate_limit_exceeded", type: "rate_limit_error" });
		expect(json.error.message).toMatch(/requests per minute/);
		const retry = Number(refused.headers.get("retry-after"));
		expect(retry).toBeGreaterThanOrEqual(1);
		expect(retry).toBeLessThanOrEqual(60);
		expect(limits(refused)).toMatchObject({ limitRequests: "3", remainingRequests: "0" });
	});

	it("puts the headers on streaming answers", async () => {
		const { key } = await createKey({ rpm: 10, tpm: 100_000 });
		const res = await chat(key, body({ stream: true }));
		expect(res.status).toBe(200);
		expect(limits(res)).toMatchObject({ limitRequests: "10", remainingRequests: "9", limitTokens: "100000" });
		expect((await readSse(res)).at(-1)).toBe("[DONE]");
	});

	it("puts the headers on errors after the request was counted (engine down)", async () => {
		const { key } = await createKey({ rpm: 10 });
		const res = await chat(key, body({ model: "test/all-down" }));
		expect(res.status).toBeGreaterThanOrEqual(500);
		expect(limits(res)).toMatchObject({ limitRequests: "10", remainingRequests: "9" });
	});

	it("is exact under concurrency: 12 requests at once on rpm 5 give five 200s and seven 429s", async () => {
		const { key } = await createKey({ rpm: 5 });
		const statuses = await Promise.all(Array.from({ length: 12 }, () => chat(key, body()).then((r) => r.status)));
		expect(statuses.filter((s) => s === 200)).toHaveLength(5);
		expect(statuses.filter((s) => s === 429)).toHaveLength(7);
	});

	it("does not count refused requests", async () => {
		const { key } = await createKey({ rpm: 2, balance_usd: 0 });
		for (let i = 0; i < 4; i++) expect((await chat(key, body())).status).toBe(402);
	});

	it("slides: a request leaves the window a minute after it was admitted (ledger, clock set)", async () => {
		const keyId = `key_rpm_${crypto.randomUUID().slice(0, 8)}`;
		const stub = ledger(keyId);
		await stub.credit({ keyId, amountNanos: 1_000_000_000, idempotencyKey: "initial" });
		const scopes = [{ scope: keyId, rpm: 2 }];
		const t = 1_900_000_000_000;
		expect(await at(t, () => stub.authorize({ payerKeyId: keyId, requestId: "a", holdNanos: 1, scopes }))).toMatchObject({
			ok: true,
			rate: { requests: { limit: 2, remaining: 1, resetMs: 60_000 } },
		});
		expect(await at(t + 20_000, () => stub.authorize({ payerKeyId: keyId, requestId: "b", holdNanos: 1, scopes }))).toMatchObject(
			{
				ok: true,
				rate: { requests: { remaining: 0, resetMs: 40_000 } },
			},
		);
		expect(await at(t + 30_000, () => stub.authorize({ payerKeyId: keyId, requestId: "c", holdNanos: 1, scopes }))).toMatchObject(
			{
				ok: false,
				refused: "rate_limited",
				limit: "requests",
				retryAfterMs: 30_000,
			},
		);
		// A repeated authorize of an admitted request is not counted again.
		expect(await at(t + 30_000, () => stub.authorize({ payerKeyId: keyId, requestId: "b", holdNanos: 1, scopes }))).toMatchObject(
			{
				ok: true,
			},
		);
		expect(await at(t + 60_000, () => stub.authorize({ payerKeyId: keyId, requestId: "c", holdNanos: 1, scopes }))).toMatchObject(
			{
				ok: true,
				rate: { requests: { remaining: 0, resetMs: 20_000 } },
			},
		);
	});
});

describe("tpm", () => {
	it("counts the estimate at authorize and the real tokens after settlement", async () => {
		const keyId = `key_tpm_${crypto.randomUUID().slice(0, 8)}`;
		const stub = ledger(keyId);
		await stub.credit({ keyId, amountNanos: 1_000_000_000, idempotencyKey: "initial" });
		const scopes = [{ scope: keyId, tpm: 1_000 }];
		const t = 1_900_000_000_000;
		const record = { key_id: keyId, model: "test/ok", node: null, status: "completed" as const, estimated: false };
		expect(
			await at(t, () => stub.authorize({ payerKeyId: keyId, requestId: "a", holdNanos: 1, scopes, tokens: 400 })),
		).toMatchObject({
			ok: true,
			rate: { tokens: { limit: 1_000, remaining: 600 } },
		});
		expect(
			await at(t + 1_000, () => stub.authorize({ payerKeyId: keyId, requestId: "b", holdNanos: 1, scopes, tokens: 500 })),
		).toMatchObject({
			ok: true,
			rate: { tokens: { remaining: 100 } },
		});
		// 900 estimated tokens are counted: 200 more are refused until "a" leaves the window, 58 s later.
		expect(
			await at(t + 2_000, () => stub.authorize({ payerKeyId: keyId, requestId: "c", holdNanos: 1, scopes, tokens: 200 })),
		).toMatchObject({
			ok: false,
			refused: "rate_limited",
			limit: "tokens",
			retryAfterMs: 58_000,
		});
		// Settlement replaces the estimates with the real counts (30 and 40 tokens).
		await at(t + 3_000, () =>
			stub.settle({
				requestId: "a",
				costNanos: 1,
				record: { ...record, prompt_tokens: 10, completion_tokens: 20 },
			}),
		);
		await at(t + 3_000, () =>
			stub.settle({
				requestId: "b",
				costNanos: 1,
				record: { ...record, prompt_tokens: 10, completion_tokens: 30 },
			}),
		);
		expect(
			await at(t + 4_000, () => stub.authorize({ payerKeyId: keyId, requestId: "c", holdNanos: 1, scopes, tokens: 10 })),
		).toMatchObject({
			ok: true,
			rate: { tokens: { remaining: 1_000 - 30 - 40 - 10 } },
		});
	});

	it("answers 429 over HTTP with the token headers and Retry-After", async () => {
		// Each request is estimated at its prompt plus max_tokens 400, and settles at a few tokens.
		const { key } = await createKey({ tpm: 500 });
		const first = await chat(key, body({ max_tokens: 400 }));
		expect(first.status).toBe(200);
		const l = limits(first);
		expect(l.limitTokens).toBe("500");
		expect(Number(l.remainingTokens)).toBeLessThan(100);
		// Settled at its real (small) size: the next request fits again.
		const second = await chat(key, body({ max_tokens: 400 }));
		expect(second.status).toBe(200);
		// Two slow streams in flight hold their estimates: the next request is refused.
		const streams = await Promise.all([1, 2].map(() => chat(key, body({ model: "test/slow", stream: true, max_tokens: 400 }))));
		const statuses = streams.map((r) => r.status);
		const refused = await chat(key, body({ max_tokens: 400 }));
		expect(statuses).toContain(200);
		expect(refused.status).toBe(429);
		expect(((await refused.json()) as ErrorBody).error.message).toMatch(/tokens per minute/);
		expect(limits(refused).limitTokens).toBe("500");
		expect(Number(limits(refused).remainingTokens)).toBeLessThan(400);
		expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
		await Promise.all(streams.map((r) => r.text()));
	});
});

describe("retry timing", () => {
	it("says when an rpm-refused request is admitted again in retry-after-ms, Retry-After and the reset header", async () => {
		const { key } = await createKey({ rpm: 1 });
		expect((await chat(key, body())).status).toBe(200);
		const refused = await chat(key, body());
		expect(refused.status).toBe(429);
		const ms = Number(refused.headers.get("retry-after-ms"));
		// Right after the window's first request: under a minute, so the SDKs wait instead of retrying at once.
		expect(ms).toBeGreaterThanOrEqual(1);
		expect(ms).toBeLessThan(60_000);
		expect(refused.headers.get("retry-after")).toBe(String(Math.ceil(ms / 1000)));
		expect(refused.headers.get("x-ratelimit-reset-requests")).toBe(formatDuration(ms));
	});

	it("says when a tpm-refused request fits again, exact to the request leaving the window (ledger, clock set)", async () => {
		const keyId = `key_tpm_${crypto.randomUUID().slice(0, 8)}`;
		const stub = ledger(keyId);
		await stub.credit({ keyId, amountNanos: 1_000_000_000, idempotencyKey: "initial" });
		const scopes = [{ scope: keyId, tpm: 1_000 }];
		const t = 1_900_000_000_000;
		expect(
			await at(t, () => stub.authorize({ payerKeyId: keyId, requestId: "a", holdNanos: 1, scopes, tokens: 300 })),
		).toMatchObject({
			ok: true,
		});
		expect(
			await at(t + 5_000, () => stub.authorize({ payerKeyId: keyId, requestId: "b", holdNanos: 1, scopes, tokens: 300 })),
		).toMatchObject({
			ok: true,
			rate: { tokens: { remaining: 400 } },
		});
		// 600 more do not fit in the 400 left: refused until "a" leaves (55 s), not admitted because something is left.
		expect(
			await at(t + 5_000, () => stub.authorize({ payerKeyId: keyId, requestId: "c", holdNanos: 1, scopes, tokens: 600 })),
		).toMatchObject({
			ok: false,
			refused: "rate_limited",
			limit: "tokens",
			retryAfterMs: 55_000,
			rate: { tokens: { resetMs: 55_000 } },
		});
		// 800 need both to leave: 60 s after "b".
		expect(
			await at(t + 5_000, () => stub.authorize({ payerKeyId: keyId, requestId: "c", holdNanos: 1, scopes, tokens: 800 })),
		).toMatchObject({
			retryAfterMs: 60_000,
		});
		expect(
			await at(t + 59_999, () => stub.authorize({ payerKeyId: keyId, requestId: "c", holdNanos: 1, scopes, tokens: 600 })),
		).toMatchObject({
			ok: false,
			retryAfterMs: 1,
		});
		expect(
			await at(t + 60_000, () => stub.authorize({ payerKeyId: keyId, requestId: "c", holdNanos: 1, scopes, tokens: 600 })),
		).toMatchObject({
			ok: true,
			rate: { tokens: { remaining: 100 } },
		});
		// More than the whole limit never fits: refused as too large.
		expect(
			await at(t + 200_000, () => stub.authorize({ payerKeyId: keyId, requestId: "d", holdNanos: 1, scopes, tokens: 1_001 })),
		).toMatchObject({
			ok: false,
			refused: "rate_limited",
			tooLarge: { requestedTokens: 1_001 },
		});
	});

	it("refuses over HTTP a request whose tokens exceed what is left of the minute, with when it fits", async () => {
		// A slow stream holds its estimate (prompt + max_tokens 300) in the window.
		const { key } = await createKey({ tpm: 500 });
		const stream = await chat(key, body({ model: "test/slow", stream: true, max_tokens: 300 }));
		expect(stream.status).toBe(200);
		const refused = await chat(key, body({ max_tokens: 300 }));
		expect(refused.status).toBe(429);
		expect(((await refused.json()) as ErrorBody).error.message).toMatch(/tokens per minute/);
		const ms = Number(refused.headers.get("retry-after-ms"));
		expect(ms).toBeGreaterThanOrEqual(1);
		expect(ms).toBeLessThanOrEqual(60_000);
		expect(refused.headers.get("retry-after")).toBe(String(Math.ceil(ms / 1000)));
		expect(refused.headers.get("x-ratelimit-reset-tokens")).toBe(formatDuration(ms));
		// What does fit is still admitted.
		expect((await chat(key, body({ max_tokens: 50 }))).status).toBe(200);
		await stream.text();
	});

	it("refuses a request larger than the whole tpm as too large, telling clients not to retry", async () => {
		const { key } = await createKey({ tpm: 100 });
		const refused = await chat(key, body({ max_tokens: 400 }));
		expect(refused.status).toBe(429);
		const json = (await refused.json()) as ErrorBody;
		expect(json.error).toMatchObject({ code: "rate_limit_exceeded", type: "rate_limit_error" });
		expect(json.error.message).toMatch(/Request too large.*Limit 100, Requested \d+/);
		expect(refused.headers.get("x-should-retry")).toBe("false");
		expect(refused.headers.get("retry-after")).toBeNull();
		expect((await chat(key, body({ max_tokens: 40 }))).status).toBe(200);
	});
});

describe("x-ratelimit-reset format", () => {
	it("uses OpenAI's duration style", () => {
		expect(formatDuration(0)).toBe("0ms");
		expect(formatDuration(250)).toBe("250ms");
		expect(formatDuration(1_500)).toBe("1.5s");
		expect(formatDuration(60_000)).toBe("1m0s");
		expect(formatDuration(59_000.2)).toBe("59.001s");
		expect(formatDuration(90_500)).toBe("1m30.5s");
	});
});
