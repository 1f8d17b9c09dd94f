import { describe, expect, it, vi } from "vitest";
import { groundingTokenBound } from "../../../src/search/grounding";
import { IMAGE_TOKENS } from "../../../src/stream/estimate";
import { bound, type ErrorBody, IN, info, OUT, ping, SEARCH, settled, type UsageRow, usd } from "../../support/billing";
import { chat, createKey, engineRequests, engineRequestsSince, gw, lastEngineId, readSse, waitFor } from "../../support/gateway";
import { TEST_NODE_KEY } from "../../support/test-config";

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

function nest(levels: number): Record<string, unknown> {
	let v: Record<string, unknown> = { type: "string" };
	for (let i = 1; i < levels; i++) v = { type: "object", properties: { a: v } };
	return v;
}

/** A value that is exactly `levels` containers deep. */
function containers(levels: number): unknown {
	let v: unknown = {};
	for (let i = 1; i < levels; i++) v = { a: v };
	return v;
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
		expect(held).toBe(bound(7) * IN + 3 * 40 * OUT);
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
	it("counts each image part at the documented per-image estimate", async () => {
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
		expect(IMAGE_TOKENS).toBe(1536);
		expect(held).toBe(bound(7 + IMAGE_TOKENS) * IN + 40 * OUT);
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
		const hold = bound(7 + groundingTokenBound(3)) * IN + 40 * OUT + SEARCH;
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
		// Estimate 7, bound 1_052: the engine's 1_040 prompt tokens are accepted and billed in full.
		const hold = bound(7) * IN + 1 * OUT;
		const cost = 1040 * IN + 1 * OUT;
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

describe("engine fields that escape the caps", () => {
	it.each([
		"n_predict",
		"num_predict",
		"best_of",
		"use_beam_search",
		"chat_template",
		"priority",
		"request_id",
		"kv_transfer_params",
		"vllm_xargs",
	])("refuses %s with 400 naming it", async (field) => {
		const k = await createKey({ balance_usd: 1 });
		const res = await chat(k.key, {
			model: "test/ok",
			[field]: field === "chat_template" ? "{{x}}" : 5,
			messages: [{ role: "user", content: "hi" }],
		});
		expect(res.status).toBe(400);
		expect(((await res.json()) as ErrorBody).error).toMatchObject({ param: field, code: "unsupported_parameter" });
	});

	it("refuses a chat_template smuggled in chat_template_kwargs, and passes other kwargs on", async () => {
		const k = await createKey({ balance_usd: 1 });
		const bad = await chat(k.key, {
			model: "test/ok",
			chat_template_kwargs: { chat_template: "{{ 7*7 }}" },
			messages: [{ role: "user", content: "hi" }],
		});
		expect(bad.status).toBe(400);
		expect(((await bad.json()) as ErrorBody).error.param).toBe("chat_template_kwargs.chat_template");
		const since = await lastEngineId();
		const ok = await chat(k.key, {
			model: "test/ok",
			chat_template_kwargs: { enable_thinking: false },
			messages: [{ role: "user", content: "hi" }],
		});
		expect(ok.status).toBe(200);
		const [call] = await engineRequestsSince(since);
		expect(call?.body?.chat_template_kwargs).toEqual({ enable_thinking: false });
	});

	it.each([1e20, 2.5, 0, -1])("answers n = %s with the n message", async (n) => {
		const k = await createKey({ balance_usd: 1 });
		const res = await chat(k.key, { model: "test/ok", n, messages: [{ role: "user", content: "hi" }] });
		expect(res.status).toBe(400);
		const e = ((await res.json()) as ErrorBody).error;
		expect(e.param).toBe("n");
		expect(e.message).toMatch(/^Invalid 'n'/);
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

describe("a prompt longer than the context", () => {
	it("is our own 400 context_length_exceeded before the hold, naming the limit and the estimate", async () => {
		const k = await createKey({ balance_usd: 1 });
		const since = await lastEngineId();
		const res = await chat(k.key, { model: "test/small-context", messages: [{ role: "user", content: "x".repeat(1300) }] });
		expect(res.status).toBe(400);
		const body = (await res.json()) as ErrorBody;
		expect(body.error).toMatchObject({ type: "invalid_request_error", code: "context_length_exceeded", param: "messages" });
		expect(body.error.message).toContain("300");
		expect(body.error.message).toContain(String(Math.ceil(1300 / 4) + 4));
		expect(await engineRequestsSince(since)).toHaveLength(0);
		expect((await info(k.id)).openHolds).toBe(0);
	});
});

describe("JSON nesting depth", () => {
	const deepTool = (levels: number) => [{ type: "function", function: { name: "f", parameters: nest(levels) } }];

	it("refuses a deeply nested tool schema with 400 before the hold (chat)", async () => {
		const k = await createKey({ balance_usd: 1 });
		const since = await lastEngineId();
		for (const stream of [false, true]) {
			const res = await chat(k.key, {
				model: "test/ok",
				stream,
				tools: deepTool(5000),
				messages: [{ role: "user", content: "hi" }],
			});
			expect(res.status).toBe(400);
			const body = (await res.json()) as ErrorBody;
			expect(body.error).toMatchObject({ type: "invalid_request_error", param: "tools[0].function.parameters" });
		}
		expect(await engineRequestsSince(since)).toHaveLength(0);
		expect((await info(k.id)).openHolds).toBe(0);
	});

	it("refuses a deep response_format schema (chat) and text.format.schema (Responses)", async () => {
		const k = await createKey({ balance_usd: 1 });
		const schema = nest(200);
		const res = await chat(k.key, {
			model: "test/ok",
			response_format: { type: "json_schema", json_schema: { name: "x", schema } },
			messages: [{ role: "user", content: "hi" }],
		});
		expect(res.status).toBe(400);
		expect(((await res.json()) as ErrorBody).error.param).toBe("response_format.json_schema.schema");
		for (const extra of [{}, { stream: true }, { background: true }]) {
			const r = await gw("/v1/responses", {
				method: "POST",
				headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
				body: JSON.stringify({
					model: "test/ok",
					input: "hi",
					text: { format: { type: "json_schema", name: "x", schema } },
					...extra,
				}),
			});
			expect(r.status).toBe(400);
			expect(((await r.json()) as ErrorBody).error.param).toBe("text.format.schema");
		}
		expect((await info(k.id)).openHolds).toBe(0);
	});

	it("accepts a field nested exactly 64 levels and refuses 65", async () => {
		const k = await createKey({ balance_usd: 1 });
		const ok = await chat(k.key, {
			model: "test/ok",
			max_tokens: 5,
			extra_field: containers(64),
			messages: [{ role: "user", content: "hi" }],
		});
		expect(ok.status).toBe(200);
		const deep = await chat(k.key, {
			model: "test/ok",
			max_tokens: 5,
			extra_field: containers(65),
			messages: [{ role: "user", content: "hi" }],
		});
		expect(deep.status).toBe(400);
		expect(((await deep.json()) as ErrorBody).error.param).toBe("extra_field.a.a.a");
	});
});

describe("an engine that stalls after its headers", () => {
	it("ends a stream with the timeout error frame, bills what was delivered and frees the hold", async () => {
		const k = await createKey({ balance_usd: 1 });
		const since = await lastEngineId();
		const res = await chat(k.key, {
			model: "test/stall",
			stream: true,
			max_tokens: 50,
			messages: [{ role: "user", content: ping() }],
		});
		expect(res.status).toBe(200);
		const frames = await readSse(res);
		expect(frames).not.toContain("[DONE]");
		const last = JSON.parse(frames.at(-1) as string) as ErrorBody;
		expect(last.error).toMatchObject({ type: "server_error", code: "upstream_timeout", param: null });
		const usageFrame = JSON.parse(frames.at(-2) as string) as { choices: unknown[]; usage: { completion_tokens: number } };
		expect(usageFrame.choices).toEqual([]);
		const { rows } = await settled(k.id, 1);
		expect(rows[0]?.status).toBe("engine_error");
		expect(rows[0]?.completion_tokens).toBe(usageFrame.usage.completion_tokens);
		expect(rows[0]?.cost_nanos).toBeGreaterThan(0);
		// The engine request was aborted, not left open.
		const calls = await waitFor(async () => {
			const r = (await engineRequestsSince(since)).filter((c) => c.scenario === "stall");
			return r.length && r.every((c) => c.aborted) ? r : null;
		});
		expect(calls).toHaveLength(1);
	});

	it("answers 504 upstream_timeout to a non-stream request, charges nothing and frees the hold", async () => {
		const k = await createKey({ balance_usd: 1 });
		const since = await lastEngineId();
		const res = await chat(k.key, { model: "test/stall", max_tokens: 50, messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(504);
		const body = (await res.json()) as ErrorBody;
		expect(body.error).toMatchObject({ type: "server_error", code: "upstream_timeout" });
		const { info: i, rows } = await settled(k.id, 1);
		expect(rows[0]).toMatchObject({ status: "engine_error", cost_nanos: 0 });
		expect(i.balanceNanos).toBe(1e9);
		await waitFor(async () => (await engineRequestsSince(since)).some((c) => c.scenario === "stall" && c.aborted));
	});
});

describe("an engine that only sends keep-alives", () => {
	it("ends a stream of `: ping` comments at the idle timeout", async () => {
		const k = await createKey({ balance_usd: 1 });
		const res = await chat(k.key, { model: "test/trickle", stream: true, messages: [{ role: "user", content: ping() }] });
		const frames = await readSse(res);
		expect((JSON.parse(frames.at(-1) as string) as ErrorBody).error.code).toBe("upstream_timeout");
		const { rows } = await settled(k.id, 1);
		expect(rows[0]?.status).toBe("engine_error");
	});

	it("answers 504 when a non-stream body is only whitespace keep-alives", async () => {
		const k = await createKey({ balance_usd: 1 });
		const res = await chat(k.key, { model: "test/trickle", messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(504);
		expect(((await res.json()) as ErrorBody).error.code).toBe("upstream_timeout");
		const { rows } = await settled(k.id, 1);
		expect(rows[0]).toMatchObject({ status: "engine_error", cost_nanos: 0 });
	});

	it("answers 504 upstream_timeout when every node timed out before its headers", async () => {
		const k = await createKey({ balance_usd: 1 });
		const res = await chat(k.key, { model: "test/all-hang", messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(504);
		expect(((await res.json()) as ErrorBody).error).toMatchObject({ type: "server_error", code: "upstream_timeout" });
	});
});

describe("an engine event that never ends", () => {
	it("is cut at the event size limit, before any token: a 502 that relays none of it and charges nothing", async () => {
		const k = await createKey({ balance_usd: 1 });
		const res = await chat(k.key, { model: "test/noeol", stream: true, messages: [{ role: "user", content: ping() }] });
		// Nothing reached the client: the oversized event is an engine failure before the first token.
		expect(res.status).toBe(502);
		const text = await res.text();
		expect(text.length).toBeLessThan(10_000);
		expect((JSON.parse(text) as ErrorBody).error.code).toBe("upstream_unavailable");
		const { rows } = await settled(k.id, 1);
		expect(rows[0]).toMatchObject({ cost_nanos: 0 });
	});
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

describe("engine refusals", () => {
	it("are cut to 1,000 characters and never carry the node's secret", async () => {
		const k = await createKey({ balance_usd: 1 });
		const res = await chat(k.key, { model: "test/echoauth", messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(400);
		const text = await res.text();
		expect(text).not.toContain(TEST_NODE_KEY);
		const body = JSON.parse(text) as ErrorBody;
		expect(body.error.message.length).toBeLessThanOrEqual(1001);
		expect(body.error.message).toContain("[redacted]");
		expect(String(body.error.param)).not.toContain(TEST_NODE_KEY);
		// The refusal released its hold (settled just after the answer went out) and cost nothing.
		const after = await waitFor(async () => {
			const i = await info(k.id);
			return i.openHolds === 0 ? i : null;
		});
		expect(after.spentNanos).toBe(0);
	});
});

describe("one error mapping on every lane", () => {
	it("a mid-stream engine failure's frame has the code the HTTP path gives a failed engine", async () => {
		const k = await createKey({ balance_usd: 1 });
		const http = await chat(k.key, { model: "test/all-down", messages: [{ role: "user", content: ping() }] });
		expect(http.status).toBe(502);
		const httpError = ((await http.json()) as ErrorBody).error;
		const res = await chat(k.key, { model: "test/midstream", stream: true, messages: [{ role: "user", content: ping() }] });
		const frames = await readSse(res);
		const frameError = (JSON.parse(frames.at(-1) as string) as ErrorBody).error;
		expect(frameError).toMatchObject({ type: "server_error", code: "upstream_unavailable", param: null });
		expect(frameError.code).toBe(httpError.code);
		expect(frameError.type).toBe(httpError.type);
	});

	it("logs a mid-stream engine failure with its cause", async () => {
		const k = await createKey({ balance_usd: 1 });
		const warn = vi.spyOn(console, "warn");
		try {
			const res = await chat(k.key, { model: "test/midstream", stream: true, messages: [{ role: "user", content: ping() }] });
			const requestId = res.headers.get("x-request-id") as string;
			await res.text();
			const line = await waitFor(async () =>
				warn.mock.calls.map((c) => String(c[0])).find((m) => m.includes(requestId) && m.includes("mid-stream")),
			);
			expect(line).toContain("CUDA out of memory");
		} finally {
			warn.mockRestore();
		}
	});
});
