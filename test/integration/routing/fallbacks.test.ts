/**
 * Fallbacks across models, end to end: the model's configured `fallbacks` and the request's
 * own list (`models`, `fallbacks`). The answer, every chunk, the usage record and the price
 * are the serving model's; the record keeps the requested one; the hold covers the most
 * expensive candidate; a refusal never falls back; busy everywhere is a 503.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { measureChatPrompt } from "../../../src/estimate";
import { ledgerFor } from "../../../src/ledger/ledger-client";
import { promptBound } from "../../../src/stream/usage-bounds";
import {
	callsWith,
	dearCost,
	errorOf,
	fallbackFleet,
	fallbackSuite,
	marker,
	model,
	nodeUrl,
	perNode,
	requestIdOf,
	setNode,
	usageRecord,
} from "../../support/fleet";
import { createKey, waitFor } from "../../support/gateway";

const fleet = fallbackFleet("fb");
const t = fleet.marker;
const { broken: BROKEN, dear: DEAR, cheap: CHEAP, refuses: REFUSES } = fleet.nodes;
const BUSY = `${t}busy`;
const BUSY2 = `${t}busy2`;

// Ids from the global test catalog, so a key's allowed_models (checked against it) can name them.
const { gw, dear, key } = fallbackSuite(
	fleet,
	"fallbacks",
	[model("test/all-busy", [nodeUrl(BUSY)], { fallbacks: ["test/comments"] }), model("test/comments", [nodeUrl(BUSY2)])],
	async () => {
		await setNode(BUSY, { scenario: "fail429" });
		await setNode(BUSY2, { scenario: "fail503" });
	},
);

function user(text: string) {
	return [{ role: "user", content: text }];
}

describe("configured fallbacks", () => {
	it("serves from the fallback model when every node fails, billed at its price and recorded as it", async () => {
		const m = marker();
		const a = await gw.chat(key(), { model: "test/ok", messages: user(`hi ${m}`) });
		expect(a.res.status, a.text).toBe(200);
		expect(a.json?.model).toBe("test/reasoning");
		const usage = a.json?.usage as { prompt_tokens: number; completion_tokens: number };
		const cost = dearCost(usage);
		expect(Number(a.res.headers.get("x-venym-cost-usd"))).toBeCloseTo(cost / 1e9, 12);
		const calls = await callsWith(m);
		expect(calls.map((c) => [c.node, c.body?.model])).toEqual([
			[BROKEN, "engine-test/ok"],
			[DEAR, "engine-test/reasoning"],
		]);
		const record = await usageRecord(requestIdOf(a));
		expect(record).toMatchObject({ model: "test/reasoning", requested_model: "test/ok", node: nodeUrl(DEAR), cost_nanos: cost });
	});

	it("names the serving model in every chunk of a stream", async () => {
		const m = marker();
		const a = await gw.chat(key(), { model: "test/ok", stream: true, messages: user(`hi ${m}`) });
		expect(a.res.status).toBe(200);
		const frames = a.text
			.split("\n\n")
			.map((f) => f.replace(/^data: /, "").trim())
			.filter((f) => f && f !== "[DONE]")
			.map((f) => JSON.parse(f) as { model: string });
		expect(frames.length).toBeGreaterThan(2);
		for (const f of frames) expect(f.model).toBe("test/reasoning");
		const record = await usageRecord(requestIdOf(a));
		expect(record).toMatchObject({ model: "test/reasoning", requested_model: "test/ok" });
	});

	it("records the requested model as requested_model when it served itself", async () => {
		const a = await gw.chat(key(), { model: "test/slow", messages: user("hi") });
		expect(a.res.status).toBe(200);
		const record = await usageRecord(requestIdOf(a));
		expect(record).toMatchObject({ model: "test/slow", requested_model: "test/slow" });
	});

	it("holds for the most expensive candidate, and bills the one that served", async () => {
		const k = await createKey({ name: "hold", balance_usd: 1 });
		const messages = user(`hold me ${marker()}`);
		// test/trickle's node streams slowly (two seconds), so its hold can be read while it runs.
		const pending = gw.chat(k.key, { model: "test/trickle", stream: true, messages });
		const held = await waitFor(async () => {
			const i = await ledgerFor(env, k.id).info();
			return i.openHolds === 1 ? i.heldNanos : null;
		});
		// The dear fallback's worst case: the prompt's billing bound at $10, 100 output tokens at $20.
		expect(held).toBe(promptBound(dear, measureChatPrompt({ messages }).size) * 10_000 + 100 * 20_000);
		const a = await pending;
		expect(a.res.status, a.text).toBe(200);
		const record = await usageRecord(requestIdOf(a));
		expect(record).toMatchObject({
			model: "test/trickle",
			requested_model: "test/trickle",
			cost_nanos: record.prompt_tokens * 1_000 + record.completion_tokens * 2_000,
		});
		expect(record.completion_tokens).toBeGreaterThan(0);
	});

	it("does not fall back on an engine's 4xx refusal", async () => {
		const m = marker();
		const a = await gw.chat(key(), { model: "test/bad400", messages: user(`hi ${m}`) });
		expect(a.res.status).toBe(400);
		expect(perNode(await callsWith(m))).toEqual({ [REFUSES]: 1 });
	});

	it("answers 503 with Retry-After when every node of every candidate is busy", async () => {
		const m = marker();
		const a = await gw.chat(key(), { model: "test/all-busy", messages: user(`hi ${m}`) });
		expect(a.res.status).toBe(503);
		expect(a.res.headers.get("retry-after")).toBe("1");
		expect(errorOf(a).code).toBe("upstream_unavailable");
		expect(perNode(await callsWith(m))).toEqual({ [BUSY]: 1, [BUSY2]: 1 });
	});
});

describe("the request's own fallbacks", () => {
	it("tries `models` (OpenRouter) before the configured fallbacks, and strips it from the engine body", async () => {
		const m = marker();
		const a = await gw.chat(key(), { model: "test/ok", models: ["test/slow"], messages: user(`hi ${m}`) });
		expect(a.res.status, a.text).toBe(200);
		expect(a.json?.model).toBe("test/slow");
		const calls = await callsWith(m);
		expect(calls.map((c) => c.node)).toEqual([BROKEN, CHEAP]);
		for (const c of calls) expect(c.body).not.toHaveProperty("models");
		const usage = a.json?.usage as { prompt_tokens: number; completion_tokens: number };
		const record = await usageRecord(requestIdOf(a));
		expect(record).toMatchObject({
			model: "test/slow",
			requested_model: "test/ok",
			cost_nanos: usage.prompt_tokens * 3_000 + usage.completion_tokens * 6_000,
		});
	});

	it("takes `fallbacks` (Venice) too, and keeps web search on for whichever model serves", async () => {
		const m = marker();
		const a = await gw.chat(key(), {
			model: "test/ok:online",
			fallbacks: [{ model: "test/slow" }],
			messages: user(`hi ${m}`),
		});
		expect(a.res.status, a.text).toBe(200);
		expect(a.json?.model).toBe("test/slow:online");
		const calls = await callsWith(m);
		expect(calls.at(-1)?.node).toBe(CHEAP);
		expect(calls.at(-1)?.body).not.toHaveProperty("fallbacks");
	});

	it("refuses an unknown id with a 400 naming the entry, and a model outside the key's allowlist with a 403", async () => {
		const unknown = await gw.chat(key(), { model: "test/ok", models: ["test/slow", "test/nope"], messages: user("hi") });
		expect(unknown.res.status).toBe(400);
		expect(unknown.json?.error).toMatchObject({ param: "models[1]", code: "model_not_found" });
		const scoped = await createKey({ name: "scoped", balance_usd: 1, allowed_models: ["test/ok"] });
		const forbidden = await gw.chat(scoped.key, { model: "test/ok", fallbacks: [{ model: "test/slow" }], messages: user("hi") });
		expect(forbidden.res.status).toBe(403);
		expect(errorOf(forbidden).param).toBe("fallbacks[0].model");
		// A configured fallback the key may not use is skipped, not an error.
		const m = marker();
		const skipped = await gw.chat(scoped.key, { model: "test/ok", messages: user(`hi ${m}`) });
		expect(skipped.res.status).toBe(502);
		expect(perNode(await callsWith(m))).toEqual({ [BROKEN]: 1 });
	});
});
