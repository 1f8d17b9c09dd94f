/** How each outcome of a chat request is billed, in exact nano-dollars (arithmetic in test/support/billing.ts). */

import { env, runDurableObjectAlarm } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import {
	billingCase,
	COMPLETED,
	type ErrorBody,
	ESTIMATED,
	engineCallsFor,
	expectEstimatedBill,
	IN,
	info,
	leavingChat,
	OUT,
	ping,
	settledInfo,
	textDeltas,
	usageOf,
	usd,
} from "../../support/billing";
import { chat, createKey, readSse, waitFor } from "../../support/gateway";
import { ledger } from "../../support/ledger";

describe("each outcome is billed as stated", () => {
	it("completed, non-stream: engine usage, cost = prompt × in + completion × out, headers match the ledger", async () => {
		const { k, since, msg } = await billingCase();
		const res = await chat(k.key, { model: "test/ok", messages: [{ role: "user", content: msg }] });
		const body = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number } };
		expect(res.status).toBe(200);
		expect(body.usage).toEqual({ prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 });
		expect(res.headers.get("x-venym-cost-usd")).toBe("0.000009");
		expect(res.headers.get("x-venym-balance-usd")).toBe("9.999991");
		const requestId = res.headers.get("x-request-id");
		expect(requestId).toMatch(/^req_/);

		// Settled just after the response went out (README): the ledger then agrees with the headers.
		const now = await waitFor(async () => {
			const i = await info(k.id);
			return i.openHolds === 0 && i.spentNanos > 0 ? i : null;
		});
		expect(now.balanceNanos).toBe(10_000_000_000 - COMPLETED);
		expect(Number(res.headers.get("x-venym-balance-usd"))).toBe(usd(now.balanceNanos));
		expect(Number(res.headers.get("x-venym-cost-usd"))).toBe(usd(now.spentNanos));
		expect(now.openHolds).toBe(0);

		const [row] = await usageOf(k.id, 1);
		expect(row).toMatchObject({
			request_id: requestId,
			key_id: k.id,
			model: "test/ok",
			node: `${env.ENGINE_URL}/v1`,
			prompt_tokens: 3,
			completion_tokens: 3,
			total_tokens: 6,
			cost_nanos: 9_000,
			cost_usd: 0.000009,
			status: "completed",
			estimated: false,
		});
		expect(await engineCallsFor(since, msg)).toHaveLength(1);
	});

	it("completed, stream: the usage frame's tokens are what is billed", async () => {
		const k = await createKey({ balance_usd: 10 });
		const res = await chat(k.key, { model: "test/ok", stream: true, messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(200);
		const frames = await readSse(res);
		expect(frames.at(-1)).toBe("[DONE]");
		const usage = JSON.parse(frames.at(-2) as string).usage;
		expect(usage).toMatchObject({ prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 });
		const end = await settledInfo(k.id, 1);
		expect(end).toMatchObject({ balanceNanos: 10_000_000_000 - COMPLETED, spentNanos: COMPLETED, openHolds: 0 });
		const [row] = await usageOf(k.id, 1);
		expect(row).toMatchObject({
			request_id: res.headers.get("x-request-id"),
			status: "completed",
			estimated: false,
			prompt_tokens: 3,
			completion_tokens: 3,
			cost_nanos: COMPLETED,
			node: `${env.ENGINE_URL}/v1`,
		});
	});

	it("no usage from the engine, non-stream: estimated (prompt estimate + ~4 chars/token), record estimated", async () => {
		const k = await createKey({ balance_usd: 10 });
		const res = await chat(k.key, { model: "test/nousage", messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(200);
		const body = (await res.json()) as { usage: Record<string, number> };
		expect(body.usage).toEqual({ prompt_tokens: 7, completion_tokens: 5, total_tokens: 12 });
		expect(res.headers.get("x-venym-cost-usd")).toBe("0.000017");
		const [row] = await usageOf(k.id, 1);
		expect(row).toMatchObject({
			status: "completed",
			estimated: true,
			prompt_tokens: 7,
			completion_tokens: 5,
			cost_nanos: ESTIMATED,
			node: `${env.ENGINE_URL}/s/nousage/v1`,
		});
		expect((await info(k.id)).spentNanos).toBe(ESTIMATED);
	});

	it("no usage from the engine, stream: estimated from the forwarded text, record estimated", async () => {
		const k = await createKey({ balance_usd: 10 });
		const res = await chat(k.key, { model: "test/nousage", stream: true, messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(200);
		const frames = await readSse(res);
		expect(frames.at(-1)).toBe("[DONE]");
		expect(textDeltas(frames)).toHaveLength(17);
		await expectEstimatedBill(k.id, { status: "completed" });
	});

	it("client disconnects mid-stream: client_disconnected, prompt estimate + forwarded, the engine sees the abort", async () => {
		const { k, since, msg } = await billingCase();
		const call = leavingChat(k.key, { model: "test/slow", stream: true, messages: [{ role: "user", content: msg }] });
		const res = await call.pending;
		expect(res.status).toBe(200);
		const requestId = res.headers.get("x-request-id");
		const reader = (res.body as ReadableStream<Uint8Array>).getReader();
		const decoder = new TextDecoder();
		let raw = "";
		let contentFrames = 0;
		// Read until k = 4 content chunks have arrived, then walk away.
		while (contentFrames < 4) {
			const { value, done } = await reader.read();
			if (done) break;
			raw += decoder.decode(value, { stream: true });
			contentFrames = raw.split("\n\n").filter((f) => f.includes('"content"')).length;
		}
		await reader.cancel();
		call.controller.abort();
		const received = textDeltas(
			raw
				.split("\n\n")
				.filter((f) => f.startsWith("data: ") && f.includes('"content"'))
				.map((f) => f.slice(6)),
		);
		expect(received.startsWith(`Echo: ${msg}`)).toBe(true);

		const end = await settledInfo(k.id, 1);
		const [row] = await usageOf(k.id, 1);
		expect(row?.request_id).toBe(requestId);
		expect(row?.status).toBe("client_disconnected");
		expect(row?.estimated).toBe(true);
		expect(row?.prompt_tokens).toBe(7); // the gateway's prompt estimate: the engine's usage never came
		const minCompletion = Math.ceil(received.length / 4);
		expect(row?.completion_tokens).toBeGreaterThanOrEqual(minCompletion);
		// Forwarded, not the whole 40-word answer.
		expect(row?.completion_tokens).toBeLessThan(Math.ceil("Echo: ping XXXXXX".length / 4) + 37);
		expect(row?.completion_tokens).toBeLessThanOrEqual(minCompletion + 4);
		expect(row?.cost_nanos).toBe(7 * IN + (row?.completion_tokens as number) * OUT);
		expect(end.spentNanos).toBe(row?.cost_nanos);
		expect(end.balanceNanos).toBe(10_000_000_000 - (row?.cost_nanos as number));
		expect(end.openHolds).toBe(0);

		const calls = await waitFor(async () => {
			const c = await engineCallsFor(since, msg);
			return c.length === 1 && (c[0]?.aborted || c[0]?.finished) ? c : null;
		});
		expect(calls[0]?.aborted).toBe(true);
		expect(calls[0]?.finished).toBe(false);
	});

	it("client leaves a non-stream request mid-answer: client_disconnected, billed for what the engine generated, engine aborted", async () => {
		const { k, since, msg } = await billingCase();
		// The engine is asked for a stream whatever the client asked: test/slow sends a word every 50 ms.
		const call = leavingChat(k.key, { model: "test/slow", messages: [{ role: "user", content: msg }] });
		await waitFor(async () => (await engineCallsFor(since, msg)).length === 1);
		await call.leave();
		const end = await settledInfo(k.id, 1);
		const [row] = await usageOf(k.id, 1);
		expect(row).toMatchObject({ status: "client_disconnected", prompt_tokens: 7, estimated: true });
		// Far less than the 40 words the whole answer has: the engine was stopped when the client left.
		const completion = row?.completion_tokens ?? -1;
		expect(completion).toBeGreaterThanOrEqual(0);
		expect(completion).toBeLessThan(40);
		expect(row?.cost_nanos).toBe(7 * IN + completion * OUT);
		expect(end).toMatchObject({ spentNanos: 7 * IN + completion * OUT, openHolds: 0 });
		const calls = await waitFor(async () => {
			const c = await engineCallsFor(since, msg);
			return c[0]?.aborted || c[0]?.finished ? c : null;
		});
		expect(calls[0]?.aborted).toBe(true);
	});

	it("client disconnects while the gateway waits for a node (stream): settled, not left to expire", async () => {
		const { k, since, msg } = await billingCase();
		const call = leavingChat(k.key, { model: "test/all-hang", stream: true, messages: [{ role: "user", content: msg }] });
		// The node never answers: the client gives up while the gateway waits for it.
		await waitFor(async () => (await engineCallsFor(since, msg)).some((c) => c.scenario === "hang"));
		await call.leave();
		const end = await settledInfo(k.id, 1);
		const [row] = await usageOf(k.id, 1);
		expect(row).toMatchObject({ status: "client_disconnected", prompt_tokens: 7, completion_tokens: 0, cost_nanos: 7 * IN });
		expect(end).toMatchObject({ spentNanos: 7 * IN, openHolds: 0 });
		// No node after the one it was waiting for was tried.
		const calls = await engineCallsFor(since, msg);
		expect(calls.map((c) => c.scenario)).toEqual(["hang"]);
	});

	for (const stream of [false, true]) {
		it(`engine refuses before any content (test/refuses, ${stream ? "stream" : "non-stream"}): nothing charged, hold released`, async () => {
			const { k, since, msg } = await billingCase();
			const res = await chat(k.key, { model: "test/refuses", stream, messages: [{ role: "user", content: msg }] });
			expect(res.status).toBe(400);
			const body = (await res.json()) as ErrorBody;
			expect(body.error.message).toBe("This model's maximum context length is 4096 tokens");
			const end = await settledInfo(k.id, 1);
			expect(end).toMatchObject({ balanceNanos: 10_000_000_000, spentNanos: 0, heldNanos: 0, openHolds: 0 });
			const [row] = await usageOf(k.id, 1);
			expect(row).toMatchObject({
				request_id: res.headers.get("x-request-id"),
				status: "engine_error",
				cost_nanos: 0,
				prompt_tokens: 0,
				completion_tokens: 0,
			});
			// Refused, not retried on the next node.
			const calls = await engineCallsFor(since, msg);
			expect(calls.map((c) => c.scenario)).toEqual(["bad400"]);
		});
	}

	for (const stream of [false, true]) {
		it(`every node down (test/all-down, ${stream ? "stream" : "non-stream"}): 502, nothing charged, hold released`, async () => {
			const k = await createKey({ balance_usd: 10 });
			const res = await chat(k.key, { model: "test/all-down", stream, messages: [{ role: "user", content: ping() }] });
			expect(res.status).toBe(502);
			expect(((await res.json()) as ErrorBody).error.code).toBe("upstream_unavailable");
			const end = await settledInfo(k.id, 1);
			expect(end).toMatchObject({ balanceNanos: 10_000_000_000, spentNanos: 0, heldNanos: 0, openHolds: 0 });
			const [row] = await usageOf(k.id, 1);
			expect(row).toMatchObject({ status: "failed", cost_nanos: 0, node: null });
		});
	}

	for (const stream of [false, true]) {
		it(`engine answers 200 with only an error (test/error200, ${stream ? "stream" : "non-stream"}): nothing charged`, async () => {
			const k = await createKey({ balance_usd: 10 });
			const res = await chat(k.key, { model: "test/error200", stream, messages: [{ role: "user", content: ping() }] });
			// An error before the first token is failed over like a 5xx; with no other node, a 502.
			expect(res.status).toBe(502);
			expect(((await res.json()) as ErrorBody).error.code).toBe("upstream_unavailable");
			const end = await settledInfo(k.id, 1);
			expect(end).toMatchObject({ balanceNanos: 10_000_000_000, spentNanos: 0, heldNanos: 0, openHolds: 0 });
			const [row] = await usageOf(k.id, 1);
			expect(row).toMatchObject({ status: "failed", cost_nanos: 0 });
		});
	}

	it("engine fails after content (test/midstream, stream): billed for what was forwarded, status engine_error", async () => {
		const k = await createKey({ balance_usd: 10 });
		const res = await chat(k.key, { model: "test/midstream", stream: true, messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(200);
		const frames = await readSse(res);
		const last = JSON.parse(frames.at(-1) as string) as ErrorBody;
		expect(last.error.code).toBe("upstream_unavailable");
		expect(frames).not.toContain("[DONE]");
		expect(textDeltas(frames)).toHaveLength(17); // "Echo: ping XXXXXX": 3 of 6 words
		await expectEstimatedBill(k.id, { status: "engine_error", node: `${env.ENGINE_URL}/s/midstream/v1` });
	});

	it("engine connection cut after content (test/cut, stream): billed for what was forwarded, status engine_error", async () => {
		const k = await createKey({ balance_usd: 10 });
		const res = await chat(k.key, { model: "test/cut", stream: true, messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(200);
		const frames = await readSse(res);
		expect((JSON.parse(frames.at(-1) as string) as ErrorBody).error).toBeDefined();
		const [row] = await usageOf(k.id, 1);
		expect(row).toMatchObject({ status: "engine_error", completion_tokens: 5, cost_nanos: ESTIMATED, estimated: true });
		expect((await info(k.id)).spentNanos).toBe(ESTIMATED);
	});

	it("engine fails mid-answer (test/midstream, non-stream): 502, nothing charged", async () => {
		const k = await createKey({ balance_usd: 10 });
		const res = await chat(k.key, { model: "test/midstream", messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(502);
		const end = await settledInfo(k.id, 1);
		expect(end).toMatchObject({ spentNanos: 0, balanceNanos: 10_000_000_000, openHolds: 0 });
		const [row] = await usageOf(k.id, 1);
		expect(row).toMatchObject({ cost_nanos: 0, status: "engine_error" });
	});

	for (const stream of [false, true]) {
		it(`failover (test/failover, ${stream ? "stream" : "non-stream"}): exactly one settlement, naming the node that answered`, async () => {
			const { k, since, msg } = await billingCase();
			const res = await chat(k.key, { model: "test/failover", stream, messages: [{ role: "user", content: msg }] });
			expect(res.status).toBe(200);
			if (stream) expect((await readSse(res)).at(-1)).toBe("[DONE]");
			else expect(res.headers.get("x-venym-cost-usd")).toBe("0.000009");
			const end = await settledInfo(k.id, 1);
			expect(end).toMatchObject({ spentNanos: COMPLETED, balanceNanos: 10_000_000_000 - COMPLETED, openHolds: 0 });
			// Settled, no hold left: flush the outbox, so a second settlement would show as a second row.
			await runDurableObjectAlarm(ledger(k.id));
			const rows = await usageOf(k.id, 1);
			expect(rows).toHaveLength(1);
			expect(rows[0]).toMatchObject({
				request_id: res.headers.get("x-request-id"),
				status: "completed",
				node: `${env.ENGINE_URL}/s/ok/v1`,
				cost_nanos: COMPLETED,
				estimated: false,
			});
			// The router's order: whichever broken nodes it tried (each once), then the healthy one.
			const calls = await engineCallsFor(since, msg);
			expect(calls.at(-1)?.scenario).toBe("ok");
			expect(new Set(calls.map((c) => c.scenario)).size).toBe(calls.length);
			expect((await info(k.id)).spentNanos).toBe(COMPLETED);
		});
	}
});
