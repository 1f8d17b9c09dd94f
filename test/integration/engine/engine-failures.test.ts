/**
 * Engines that fail in the ways real ones do (stalling after their headers, only keep-alives, an
 * endless event, a mid-stream failure): the timeout or error the client gets, what is billed, and
 * the same error code on every lane.
 */
import { describe, expect, it, vi } from "vitest";
import { type ErrorBody, ping, settled } from "../../support/billing";
import { chat, createKey, engineRequestsSince, lastEngineId, readSse, waitFor } from "../../support/gateway";

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
