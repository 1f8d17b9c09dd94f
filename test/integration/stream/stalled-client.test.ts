/**
 * A streaming client that stops reading (or is gone while the local runtime never says so, which
 * looks the same) cannot pin a hold or an engine slot: after `client_idle_timeout_ms` without
 * taking a frame its stream ends as client_disconnected, the engine request is aborted and the
 * hold settles for what was forwarded; meanwhile the hold keep-alive does not renew it. Every
 * streaming lane goes through the same stream driver.
 */
import { createExecutionContext, env, waitOnExecutionContext } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { app } from "../../../src/app";
import { HOLD_KEEPALIVE_MS } from "../../../src/settlement/hold-keep-alive";
import { BASE, createKey, engineRequests, waitFor } from "../../support/gateway";
import { expectBooks, holdExpiry, usageRows } from "../../support/ledger";

const CLIENT_IDLE_MS = 300;
const CREDIT_NANOS = 10_000_000_000;

/** The test catalog with a short client idle timeout and a patient engine idle timeout. */
function configWith(extra: Record<string, unknown>) {
	return { ...JSON.parse(env.GATEWAY_CONFIG), stream_idle_timeout_ms: 10_000, ...extra };
}

/** Lane, path, body, and whether the dev engine paces that answer (its legacy endpoint sends all at once). */
const LANES = [
	[
		"chat",
		"/v1/chat/completions",
		(m: string) => ({ model: "test/slow", stream: true, max_tokens: 40, messages: [{ role: "user", content: m }] }),
		true,
	],
	[
		"legacy completions",
		"/v1/completions",
		(m: string) => ({ model: "test/slow", stream: true, max_tokens: 40, prompt: m }),
		false,
	],
	[
		"Responses",
		"/v1/responses",
		(m: string) => ({ model: "test/slow", stream: true, store: false, max_output_tokens: 40, input: m }),
		true,
	],
] as const;

afterEach(() => {
	vi.useRealTimers();
	vi.restoreAllMocks();
});

describe("a streaming client that reads one frame and stops reading", () => {
	for (const [lane, path, body, paced] of LANES) {
		it(`is cut after client_idle_timeout_ms and settles (${lane})`, async () => {
			const k = await createKey({ balance_usd: 10 });
			const mark = `stall-${crypto.randomUUID().slice(0, 8)}`;
			const bindings = { ...env, GATEWAY_CONFIG: JSON.stringify(configWith({ client_idle_timeout_ms: CLIENT_IDLE_MS })) };
			const ctx = createExecutionContext();
			const res = await app.fetch(
				new Request(`${BASE}${path}`, {
					method: "POST",
					headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
					body: JSON.stringify(body(mark)),
				}),
				bindings,
				ctx,
			);
			expect(res.status).toBe(200);
			const reader = (res.body as ReadableStream<Uint8Array>).getReader();
			expect((await reader.read()).done).toBe(false);
			// The client reads nothing more and never closes: only the gateway can end this.
			await waitOnExecutionContext(ctx);

			const rows = await waitFor(async () => {
				const r = await usageRows(k.id);
				return r.length ? r : null;
			}, 10_000);
			expect(rows).toHaveLength(1);
			expect(rows[0]?.status).toBe("client_disconnected");
			const { charged } = await expectBooks(k.id, CREDIT_NANOS);
			expect(charged).toBeGreaterThan(0);
			const [engineRequest] = await waitFor(async () => {
				const r = await engineRequests({ contains: mark });
				return r.length && (r[0]?.aborted || r[0]?.finished) ? r : null;
			}, 5_000);
			// test/slow takes about 2 s to answer: the gateway walked away long before.
			if (paced) expect(engineRequest?.aborted).toBe(true);
			await expect(reader.read()).rejects.toThrow(/read nothing/);
		});
	}

	it("does not have its hold renewed while it reads nothing", async () => {
		const k = await createKey({ balance_usd: 1 });
		const warnings: string[] = [];
		const warn = console.warn.bind(console);
		vi.spyOn(console, "warn").mockImplementation((...args: unknown[]) => {
			warnings.push(args.map(String).join(" "));
			warn(...args);
		});
		// Only the keep-alive's interval is faked: the engine, the ledger and the client's idle timer keep real time.
		vi.useFakeTimers({ toFake: ["setInterval", "clearInterval"] });
		const bindings = { ...env, GATEWAY_CONFIG: JSON.stringify(configWith({ client_idle_timeout_ms: 1_500 })) };
		const ctx = createExecutionContext();
		const res = await app.fetch(
			new Request(`${BASE}/v1/chat/completions`, {
				method: "POST",
				headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
				body: JSON.stringify({
					model: "test/slow",
					stream: true,
					max_tokens: 40,
					messages: [{ role: "user", content: "stall and keep" }],
				}),
			}),
			bindings,
			ctx,
		);
		expect(res.status).toBe(200);
		const requestId = res.headers.get("x-request-id") as string;
		const expiry = () => holdExpiry(k.id, requestId);
		const reader = (res.body as ReadableStream<Uint8Array>).getReader();
		await reader.read();
		// The keep-alive notices the request stopped moving...
		await waitFor(async () => {
			vi.advanceTimersByTime(HOLD_KEEPALIVE_MS);
			return warnings.some((w) => w.includes("hold not renewed") && w.includes(requestId));
		}, 5_000);
		const stalledAt = await expiry();
		expect(stalledAt).not.toBeNull();
		// ...and from then on the hold is never extended, until the stall ends the request and settles it.
		const seen = new Set<number>();
		await waitFor(async () => {
			vi.advanceTimersByTime(HOLD_KEEPALIVE_MS);
			const e = await expiry();
			if (e === null) return true;
			seen.add(e);
			return false;
		}, 10_000);
		expect([...seen].every((e) => e === stalledAt)).toBe(true);
		await waitOnExecutionContext(ctx);
		const rows = await usageRows(k.id);
		expect(rows.map((r) => r.status)).toEqual(["client_disconnected"]);
	});
});
