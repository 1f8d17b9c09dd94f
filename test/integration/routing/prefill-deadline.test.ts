/**
 * A long prompt is not a mute node, and a request has a deadline. The first-token wait grows with
 * the prompt (`first_byte_timeout_ms` + its tokens at the node's prefill rate: configured, learned,
 * or the default), a long prompt's timeout cools its node only once short prompts time out there
 * too, and `request_timeout_ms` bounds the whole request, across attempts and fallback models, as
 * the lane's 504 (or, once a stream started, its in-band error), its money settled once.
 * Named nodes of the development engine (test/support/fleet.ts), small timeouts.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { callsWith, errorOf, fleetConfig, gatewayWith, marker, model, nodeUrl, setNode, waitForNode } from "../../support/fleet";
import { createKey } from "../../support/gateway";
import { expectBooks } from "../../support/ledger";

let key: string;

beforeAll(async () => {
	key = (await createKey({ name: "prefill-deadline", balance_usd: 100 })).key;
});

function user(text: string) {
	return [{ role: "user", content: text }];
}

/** About 2,000 tokens (the engine counts 4 characters a token; so does the gateway's estimate). */
function longPrompt(m: string): string {
	return `${m} ${"lorem ipsum ".repeat(666)}`;
}

describe("a long prompt's first token", () => {
	it("waits out a slow prefill on its node: no failover, no cooldown, and the next long prompt too", async () => {
		const t = marker("pf");
		// 0.5 ms a token before the headers: about 1 s for the long prompt, five times the first-byte timeout.
		await setNode(`${t}slow`, { scenario: "slowprefill" });
		const gw = gatewayWith({
			...fleetConfig([model("fleet", [{ url: nodeUrl(`${t}slow`), weight: 1000 }, nodeUrl(`${t}ok`)])]),
			first_byte_timeout_ms: 200,
		});
		const m = marker();
		// The first at the default rate (nothing learned yet), the second at the rate the first's timings showed.
		for (let i = 0; i < 2; i++) {
			const a = await gw.chat(key, { model: "fleet", messages: user(longPrompt(m)), max_tokens: 5 });
			expect(a.res.status, a.text).toBe(200);
			expect(a.ms).toBeGreaterThanOrEqual(900);
		}
		expect((await callsWith(m)).map((c) => c.node)).toEqual([`${t}slow`, `${t}slow`]);
		// No request timed out there (a health check may, on a busy machine: its "timeout" is no request's).
		const row = await waitForNode(gw, nodeUrl(`${t}slow`), () => true);
		expect(row.cooling_until).toBeNull();
		expect(row.last_error).not.toBe("timeout on a long prompt");
	});

	it("gives a long prompt only its prefill time at a configured rate; that timeout does not cool the node", async () => {
		const t = marker("pc");
		await setNode(`${t}slow`, { scenario: "slowprefill" });
		// Configured at 4,000 tokens a second: the long prompt is given 200 + 500 ms, its prefill takes 1,000.
		const gw = gatewayWith({
			...fleetConfig([
				model("fleet", [{ url: nodeUrl(`${t}slow`), weight: 1000, prefill_tokens_per_s: 4000 }, nodeUrl(`${t}ok`)]),
			]),
			first_byte_timeout_ms: 200,
		});
		const m = marker();
		const a = await gw.chat(key, { model: "fleet", messages: user(longPrompt(m)), max_tokens: 5 });
		expect(a.res.status, a.text).toBe(200);
		expect((await callsWith(m)).map((c) => c.node)).toEqual([`${t}slow`, `${t}ok`]);
		// A long prompt's timeout: the node stays in service.
		const row = await waitForNode(gw, nodeUrl(`${t}slow`), (r) => r.last_error !== null);
		expect(row).toMatchObject({ cooling_until: null, last_error: "timeout on a long prompt" });
	});

	it("cools a node only once a short prompt times out there too", async () => {
		const t = marker("ph");
		// Hangs on every request but passes its health checks: only timeouts tell the router about it.
		await setNode(`${t}hang`, { scenario: "stuck" });
		const gw = gatewayWith({
			...fleetConfig(
				[
					model("fleet", [{ url: nodeUrl(`${t}hang`), weight: 1000, prefill_tokens_per_s: 10_000 }, nodeUrl(`${t}ok`)]),
					// A health check the hung node passes ends its cooldown (node-state.ts): none during this test.
				],
				{ health_check_interval_ms: 600_000 },
			),
			first_byte_timeout_ms: 200,
		});
		const long = marker();
		// Two long prompts: each waits out the hung node (200 + 200 ms), then the other node serves; no cooldown.
		for (let i = 0; i < 2; i++) {
			const a = await gw.chat(key, { model: "fleet", messages: user(longPrompt(long)), max_tokens: 5 });
			expect(a.res.status, a.text).toBe(200);
		}
		expect((await callsWith(long)).map((c) => c.node)).toEqual([`${t}hang`, `${t}ok`, `${t}hang`, `${t}ok`]);
		// The node's state is reported after the answer: wait until a long prompt's timeout is on it.
		const hung = await waitForNode(gw, nodeUrl(`${t}hang`), (r) => r.last_error === "timeout on a long prompt");
		expect(hung).toMatchObject({ cooling_until: null });

		// A short prompt times out there: the node is mute, it cools.
		const short = marker();
		const s = await gw.chat(key, { model: "fleet", messages: user(`hi ${short}`) });
		expect(s.res.status, s.text).toBe(200);
		expect((await callsWith(short)).map((c) => c.node)).toEqual([`${t}hang`, `${t}ok`]);
		const row = await waitForNode(gw, nodeUrl(`${t}hang`), (r) => r.cooling_until !== null);
		expect(row.cooling_until).toBeGreaterThan(Date.now() / 1000);

		// The next long prompt skips it.
		const after = marker();
		const b = await gw.chat(key, { model: "fleet", messages: user(longPrompt(after)), max_tokens: 5 });
		expect(b.res.status, b.text).toBe(200);
		expect((await callsWith(after)).map((c) => c.node)).toEqual([`${t}ok`]);
	});
});

describe("the request's deadline (request_timeout_ms)", () => {
	it("bounds every attempt and fallback model together: 504, fewer attempts than the timeouts allow", async () => {
		const t = marker("dl");
		const names = [`${t}a`, `${t}b`, `${t}c`, `${t}d`];
		for (const n of names) await setNode(n, { scenario: "hang" });
		// Four hung nodes at 1 s each would take 4 s; the deadline ends the request at 2.5 s.
		const gw = gatewayWith({
			...fleetConfig([
				model("fleet", [nodeUrl(names[0] as string), nodeUrl(names[1] as string)], { fallbacks: ["spare"] }),
				model("spare", [nodeUrl(names[2] as string), nodeUrl(names[3] as string)]),
			]),
			first_byte_timeout_ms: 1000,
			request_timeout_ms: 2500,
		});
		const k = await createKey({ balance_usd: 10 });
		const m = marker();
		const a = await gw.chat(k.key, { model: "fleet", messages: user(`hi ${m}`) });
		expect(a.res.status, a.text).toBe(504);
		expect(errorOf(a).code).toBe("upstream_timeout");
		const calls = await callsWith(m);
		expect(calls.length).toBeGreaterThanOrEqual(2);
		expect(calls.length).toBeLessThan(4);
		expect(a.ms).toBeLessThan(4000);
		const { rows } = await expectBooks(k.id, 10e9);
		expect(rows.length).toBe(1);
	});

	it("ends each lane as its 504 before the first token, and settles each request once", async () => {
		const t = marker("dn");
		await setNode(`${t}hang`, { scenario: "hang" });
		const gw = gatewayWith({
			...fleetConfig([
				model("fleet", [nodeUrl(`${t}hang`)]),
				model("emb", [nodeUrl(`${t}hang`)], {
					capabilities: ["embeddings"],
					max_output_tokens: undefined,
					pricing: { input_usd_per_mtok: 1 },
				}),
			]),
			// The first-byte timeout is far off: only the deadline can end these.
			first_byte_timeout_ms: 10_000,
			request_timeout_ms: 400,
		});
		const k = await createKey({ balance_usd: 10 });
		const m = marker();
		const lanes: Array<[string, Record<string, unknown>]> = [
			["/v1/chat/completions", { model: "fleet", messages: user(m) }],
			["/v1/completions", { model: "fleet", prompt: m }],
			["/v1/embeddings", { model: "emb", input: m }],
			["/v1/responses", { model: "fleet", input: m }],
			["/v1/messages", { model: "fleet", max_tokens: 10, messages: user(m) }],
		];
		for (const [path, body] of lanes) {
			const a = await gw.post(k.key, path, body, { "anthropic-version": "2023-06-01" });
			expect(a.res.status, `${path}: ${a.text}`).toBe(504);
			expect(a.ms, path).toBeLessThan(5000);
			if (path === "/v1/messages") expect(a.json).toMatchObject({ type: "error", error: { type: "timeout_error" } });
			else expect(errorOf(a).code, path).toBe("upstream_timeout");
		}
		const { rows } = await expectBooks(k.id, 10e9);
		expect(rows.length).toBe(lanes.length);
	});

	it("ends a stream that started with its lane's in-band error, and a body being read as 504, settled once", async () => {
		const t = marker("ds");
		// Answers its first word, then empty chunks every 200 ms until released: never idle, never done.
		await setNode(`${t}gated`, { scenario: "gated" });
		const gw = gatewayWith({
			...fleetConfig([model("fleet", [nodeUrl(`${t}gated`)])]),
			request_timeout_ms: 1000,
		});
		const k = await createKey({ balance_usd: 10 });
		const m = marker();
		const streams: Array<[string, Record<string, unknown>, string]> = [
			["/v1/chat/completions", { model: "fleet", messages: user(m), stream: true }, '"code":"upstream_timeout"'],
			["/v1/completions", { model: "fleet", prompt: m, stream: true }, '"code":"upstream_timeout"'],
			["/v1/responses", { model: "fleet", input: m, stream: true }, "response.failed"],
			["/v1/messages", { model: "fleet", max_tokens: 10, messages: user(m), stream: true }, "event: error"],
		];
		for (const [path, body, frame] of streams) {
			const a = await gw.post(k.key, path, body, { "anthropic-version": "2023-06-01" });
			expect(a.res.status, path).toBe(200);
			expect(a.text, path).toContain(frame);
		}
		const whole = await gw.chat(k.key, { model: "fleet", messages: user(m) });
		expect(whole.res.status, whole.text).toBe(504);
		expect(errorOf(whole).code).toBe("upstream_timeout");
		const { rows } = await expectBooks(k.id, 10e9);
		expect(rows.length).toBe(streams.length + 1);
	});
});
