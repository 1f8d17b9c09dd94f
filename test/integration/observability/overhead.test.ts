/**
 * `x-venym-overhead-ms` (src/observability/overhead.ts): on every lane's answer and on errors,
 * and with the engine's time left out. The engine's scenarios give it a known length: `slow`
 * takes 40 × 50 ms to answer, `slowheaders` waits 600 ms before its headers, so an overhead that
 * counted the engine would read above those.
 */
import { describe, expect, it } from "vitest";
import { chat, createKey, gw, readSse } from "../../support/gateway";

const HEADER = "x-venym-overhead-ms";

function overheadOf(res: Response): number {
	const raw = res.headers.get(HEADER);
	expect(raw).toMatch(/^\d+$/);
	return Number(raw);
}

function post(path: string, key: string, body: Record<string, unknown>, headers: Record<string, string> = {}): Promise<Response> {
	return gw(path, {
		method: "POST",
		headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
		body: JSON.stringify(body),
	});
}

describe("x-venym-overhead-ms", () => {
	it("is on every lane's answer, streamed or not", async () => {
		const k = await createKey({ balance_usd: 1 });
		const answers = await Promise.all([
			chat(k.key, { model: "test/ok", messages: [{ role: "user", content: "hi" }] }),
			chat(k.key, { model: "test/ok", stream: true, messages: [{ role: "user", content: "hi" }] }),
			post("/v1/completions", k.key, { model: "test/ok", prompt: "hi" }),
			post("/v1/embeddings", k.key, { model: "test/embed", input: "hi" }),
			post("/v1/responses", k.key, { model: "test/ok", input: "hi", stream: true }),
			post(
				"/v1/messages",
				k.key,
				{ model: "test/ok", max_tokens: 20, messages: [{ role: "user", content: "hi" }] },
				{
					"anthropic-version": "2023-06-01",
				},
			),
		]);
		for (const res of answers) {
			expect(res.status).toBe(200);
			overheadOf(res);
			await res.text();
		}
	});

	it("is on errors: a bad key, a bad body, an empty balance, an unknown route, the admin API", async () => {
		const broke = await createKey({ balance_usd: 0 });
		const errors = await Promise.all([
			chat("vk-not-a-real-key-0123456789abcdef", { model: "test/ok", messages: [{ role: "user", content: "hi" }] }),
			chat(broke.key, { model: "test/ok", messages: [] }),
			chat(broke.key, { model: "test/ok", messages: [{ role: "user", content: "hi" }] }),
			gw("/v1/nothing-here", { headers: { authorization: `Bearer ${broke.key}` } }),
			gw("/admin/keys"),
			post("/v1/messages", "vk-not-a-real-key-0123456789abcdef", { model: "test/ok", max_tokens: 5, messages: [] }),
		]);
		expect(errors.map((r) => r.status)).toEqual([401, 400, 402, 404, 401, 401]);
		for (const res of errors) {
			overheadOf(res);
			await res.text();
		}
	});

	it("leaves out the engine's time of a non-stream answer (its last byte comes after 2 s)", async () => {
		const k = await createKey({ balance_usd: 1 });
		const started = Date.now();
		const res = await chat(k.key, { model: "test/slow", messages: [{ role: "user", content: "hi" }] });
		await res.text();
		const elapsed = Date.now() - started;
		expect(res.status).toBe(200);
		expect(elapsed).toBeGreaterThanOrEqual(2000);
		// The engine took at least 40 × 50 ms of it; what is left is the gateway's.
		expect(overheadOf(res)).toBeLessThanOrEqual(elapsed - 1900);
	});

	it("leaves out a stream's wait for the engine's headers and first token", async () => {
		const k = await createKey({ balance_usd: 1 });
		const started = Date.now();
		const res = await chat(k.key, { model: "test/slowheaders", stream: true, messages: [{ role: "user", content: "hi" }] });
		const head = Date.now() - started;
		expect(res.status).toBe(200);
		expect(head).toBeGreaterThanOrEqual(600);
		expect(overheadOf(res)).toBeLessThanOrEqual(head - 550);
		expect((await readSse(res)).at(-1)).toBe("[DONE]");
	});
});
