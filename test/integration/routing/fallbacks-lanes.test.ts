/**
 * Fallbacks and affinity on the lanes beside chat: Responses (sync, stream, background), legacy
 * completions and embeddings. The answer's model, the usage record and the price are the serving
 * model's; the record keeps the requested one; the hold covers the most expensive candidate; a
 * request's own list is checked as chat checks it (400 naming the entry, 403 outside the
 * allowlist, 400 for a model of another endpoint).
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
import { createKey, gw as globalGw, waitFor } from "../../support/gateway";

const fleet = fallbackFleet("fl");
const t = fleet.marker;
const { broken: BROKEN, dear: DEAR, cheap: CHEAP, refuses: REFUSES } = fleet.nodes;
const EMBED_HANG = `${t}ehang`;
const EMBED_DEAR = `${t}edear`;
const EMBED_CHEAP = `${t}echeap`;
const AFFINITY = [`${t}a1`, `${t}a2`, `${t}a3`];

// Ids from the global test catalog where a key's allowed_models (checked against it) must name them.
const { gw, dear, key } = fallbackSuite(
	fleet,
	"fallback lanes",
	[
		model("test/failover", AFFINITY.map(nodeUrl)),
		// Embeddings: a node that never answers (the first-byte timeout, 2 s, leaves time to read the hold).
		model("test/embed", [nodeUrl(EMBED_HANG)], { capabilities: ["embeddings"], fallbacks: ["test/embed-dear"] }),
		model("test/embed-dear", [nodeUrl(EMBED_DEAR)], { capabilities: ["embeddings"], pricing: { input_usd_per_mtok: 10 } }),
		model("test/embed-cheap", [nodeUrl(EMBED_CHEAP)], { capabilities: ["embeddings"], pricing: { input_usd_per_mtok: 3 } }),
	],
	() => setNode(EMBED_HANG, { scenario: "hang" }),
);

interface StoredResponse {
	id: string;
	model: string;
	status: string;
}

/** GET /v1/responses/{id} (the store is the deployment's, whatever the config). */
async function storedResponse(apiKey: string, id: string): Promise<StoredResponse> {
	const r = await globalGw(`/v1/responses/${id}`, { headers: { authorization: `Bearer ${apiKey}` } });
	return (await r.json()) as StoredResponse;
}

/** The `response` of every Responses stream event that carries one, in order. */
function streamedResponses(text: string): Array<{ type: string; response: StoredResponse }> {
	return text
		.split("\n\n")
		.map((frame) =>
			frame
				.split("\n")
				.filter((l) => l.startsWith("data:"))
				.map((l) => l.slice(5).trim())
				.join(""),
		)
		.filter((d) => d.startsWith("{"))
		.map((d) => JSON.parse(d) as { type: string; response?: StoredResponse })
		.filter((e): e is { type: string; response: StoredResponse } => e.response !== undefined);
}

describe("Responses", () => {
	it("serves from a configured fallback, names it in the response and the stored copy, and bills its price", async () => {
		const m = marker();
		const a = await gw.post(key(), "/v1/responses", { model: "test/ok", input: `hi ${m}` });
		expect(a.res.status, a.text).toBe(200);
		expect(a.json).toMatchObject({ model: "test/reasoning", status: "completed" });
		const calls = await callsWith(m);
		expect(calls.map((c) => [c.node, c.body?.model])).toEqual([
			[BROKEN, "engine-test/ok"],
			[DEAR, "engine-test/reasoning"],
		]);
		const record = await usageRecord(requestIdOf(a));
		expect(record).toMatchObject({ model: "test/reasoning", requested_model: "test/ok", node: nodeUrl(DEAR) });
		expect(record.cost_nanos).toBe(dearCost(record));
		const usage = a.json?.usage as { input_tokens: number; output_tokens: number };
		expect(record).toMatchObject({ prompt_tokens: usage.input_tokens, completion_tokens: usage.output_tokens });
		expect(await storedResponse(key(), String(a.json?.id))).toMatchObject({ model: "test/reasoning", status: "completed" });
	});

	it("tries the request's `models` first, strips it from the engine body, and names the serving model in every event", async () => {
		const m = marker();
		const a = await gw.post(key(), "/v1/responses", { model: "test/ok", models: ["test/slow"], stream: true, input: `hi ${m}` });
		expect(a.res.status, a.text).toBe(200);
		const events = streamedResponses(a.text);
		expect(events.map((e) => e.type)).toContain("response.created");
		expect(events.at(-1)?.type).toBe("response.completed");
		for (const e of events) expect(e.response.model).toBe("test/slow");
		const calls = await callsWith(m);
		expect(calls.map((c) => c.node)).toEqual([BROKEN, CHEAP]);
		for (const c of calls) {
			expect(c.body).not.toHaveProperty("models");
			expect(c.body).not.toHaveProperty("fallbacks");
		}
		const record = await usageRecord(requestIdOf(a));
		expect(record).toMatchObject({ model: "test/slow", requested_model: "test/ok" });
		expect(record.cost_nanos).toBe(record.prompt_tokens * 3_000 + record.completion_tokens * 6_000);
		const stored = await waitFor(async () => {
			const r = await storedResponse(key(), events[0]?.response.id ?? "");
			return r.status === "completed" ? r : null;
		});
		expect(stored.model).toBe("test/slow");
	});

	it("holds for the most expensive candidate while a cheap model streams, and bills the one that served", async () => {
		const k = await createKey({ name: "responses hold", balance_usd: 1 });
		const input = `hold me ${marker()}`;
		const pending = gw.post(k.key, "/v1/responses", { model: "test/trickle", stream: true, input });
		const held = await waitFor(async () => {
			const i = await ledgerFor(env, k.id).info();
			return i.openHolds === 1 ? i.heldNanos : null;
		});
		const prompt = measureChatPrompt({ messages: [{ role: "user", content: input }] }).size;
		expect(held).toBe(promptBound(dear, prompt) * 10_000 + 100 * 20_000);
		const a = await pending;
		expect(a.res.status, a.text).toBe(200);
		for (const e of streamedResponses(a.text)) expect(e.response.model).toBe("test/trickle");
		const record = await usageRecord(requestIdOf(a));
		expect(record).toMatchObject({ model: "test/trickle", requested_model: "test/trickle" });
		expect(record.cost_nanos).toBe(record.prompt_tokens * 1_000 + record.completion_tokens * 2_000);
	});

	it("refuses a bad entry as chat does: 400 naming it (shape or unknown id), 403 outside the allowlist", async () => {
		const shape = await gw.post(key(), "/v1/responses", { model: "test/ok", fallbacks: [{ id: "test/slow" }], input: "hi" });
		expect(shape.res.status).toBe(400);
		expect(errorOf(shape).param).toBe("fallbacks[0].model");
		const both = await gw.post(key(), "/v1/responses", { model: "test/ok", models: [], fallbacks: [], input: "hi" });
		expect(both.res.status).toBe(400);
		const unknown = await gw.post(key(), "/v1/responses", { model: "test/ok", models: ["test/slow", "test/nope"], input: "hi" });
		expect(unknown.res.status).toBe(400);
		expect(errorOf(unknown)).toMatchObject({ param: "models[1]", code: "model_not_found" });
		const embed = await gw.post(key(), "/v1/responses", { model: "test/ok", models: ["test/embed"], input: "hi" });
		expect(embed.res.status).toBe(400);
		expect(errorOf(embed)).toMatchObject({ param: "models[0]", code: "unsupported_model" });
		const scoped = await createKey({ name: "scoped responses", balance_usd: 1, allowed_models: ["test/ok"] });
		for (const background of [false, true]) {
			const forbidden = await gw.post(scoped.key, "/v1/responses", {
				model: "test/ok",
				fallbacks: [{ model: "test/slow" }],
				input: "hi",
				background,
			});
			expect(forbidden.res.status).toBe(403);
			expect(errorOf(forbidden).param).toBe("fallbacks[0].model");
		}
	});

	it("does not fall back on an engine's 4xx refusal", async () => {
		const m = marker();
		const a = await gw.post(key(), "/v1/responses", { model: "test/bad400", input: `hi ${m}` });
		expect(a.res.status).toBe(400);
		expect(perNode(await callsWith(m))).toEqual({ [REFUSES]: 1 });
	});

	it("passes prompt_cache_key on to the engine and keeps the conversation on one node", async () => {
		const cacheKey = `conv-${marker()}`;
		const m = marker();
		for (let i = 0; i < 4; i++) {
			const a = await gw.post(key(), "/v1/responses", {
				model: "test/failover",
				prompt_cache_key: cacheKey,
				input: `turn ${i} ${m}`,
			});
			expect(a.res.status, a.text).toBe(200);
		}
		const calls = await callsWith(m);
		expect(calls).toHaveLength(4);
		for (const c of calls) expect(c.body?.prompt_cache_key).toBe(cacheKey);
		expect(Object.keys(perNode(calls))).toHaveLength(1);
	});
});

describe("background Responses (the global catalog: the run uses the deployment's config)", () => {
	async function backgroundRun(body: Record<string, unknown>) {
		const k = await createKey({ name: "background fallback", balance_usd: 1 });
		const res = await globalGw("/v1/responses", {
			method: "POST",
			headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
			body: JSON.stringify({ ...body, background: true }),
		});
		expect(res.status, await res.clone().text()).toBe(200);
		const queued = (await res.json()) as StoredResponse;
		expect(queued.status).toBe("queued");
		const done = await waitFor(async () => {
			const r = await storedResponse(k.key, queued.id);
			return r.status === "queued" || r.status === "in_progress" ? null : r;
		}, 15_000);
		return { queued, done, record: await usageRecord(requestIdOf(res)) };
	}

	it("serves from the model's configured fallback and stores the serving model", async () => {
		const { queued, done, record } = await backgroundRun({ model: "test/fb-down", input: `bg ${marker()}` });
		// Queued before any model ran: the requested one.
		expect(queued.model).toBe("test/fb-down");
		expect(done).toMatchObject({ status: "completed", model: "test/fb-dear" });
		expect(record).toMatchObject({ model: "test/fb-dear", requested_model: "test/fb-down", status: "completed" });
		expect(record.cost_nanos).toBe(dearCost(record));
	});

	it("serves from the request's `models`", async () => {
		const { done, record } = await backgroundRun({ model: "test/all-down", models: ["test/fb-dear"], input: `bg ${marker()}` });
		expect(done).toMatchObject({ status: "completed", model: "test/fb-dear" });
		expect(record).toMatchObject({ model: "test/fb-dear", requested_model: "test/all-down" });
		expect(record.cost_nanos).toBe(dearCost(record));
	});
});

describe("legacy completions", () => {
	it("serves from a configured fallback, billed at its price, non-stream and stream", async () => {
		for (const stream of [false, true]) {
			const m = marker();
			const a = await gw.post(key(), "/v1/completions", { model: "test/ok", prompt: `say ${m}`, stream });
			expect(a.res.status, a.text).toBe(200);
			if (stream) {
				const chunks = a.text
					.split("\n\n")
					.map((f) => f.replace(/^data: /, "").trim())
					.filter((f) => f && f !== "[DONE]")
					.map((f) => JSON.parse(f) as { model: string; object: string });
				expect(chunks.length).toBeGreaterThan(2);
				for (const c of chunks) expect(c).toMatchObject({ model: "test/reasoning", object: "text_completion" });
			} else {
				expect(a.json).toMatchObject({ model: "test/reasoning", object: "text_completion" });
				const usage = a.json?.usage as { prompt_tokens: number; completion_tokens: number };
				expect(Number(a.res.headers.get("x-venym-cost-usd"))).toBeCloseTo(dearCost(usage) / 1e9, 12);
			}
			expect((await callsWith(m)).map((c) => [c.node, c.path, c.body?.model])).toEqual([
				[BROKEN, `/n/${BROKEN}/v1/completions`, "engine-test/ok"],
				[DEAR, `/n/${DEAR}/v1/completions`, "engine-test/reasoning"],
			]);
			const record = await usageRecord(requestIdOf(a));
			expect(record).toMatchObject({ model: "test/reasoning", requested_model: "test/ok", node: nodeUrl(DEAR) });
			expect(record.completion_tokens).toBeGreaterThan(0);
			expect(record.cost_nanos).toBe(dearCost(record));
		}
	});

	it("tries the request's `models`, stripped from the engine body, and refuses an embeddings model in it", async () => {
		const m = marker();
		const a = await gw.post(key(), "/v1/completions", { model: "test/ok", models: ["test/slow"], prompt: `say ${m}` });
		expect(a.res.status, a.text).toBe(200);
		expect(a.json?.model).toBe("test/slow");
		const calls = await callsWith(m);
		expect(calls.map((c) => c.node)).toEqual([BROKEN, CHEAP]);
		for (const c of calls) expect(c.body).not.toHaveProperty("models");
		const record = await usageRecord(requestIdOf(a));
		expect(record).toMatchObject({ model: "test/slow", requested_model: "test/ok" });
		expect(record.cost_nanos).toBe(record.prompt_tokens * 3_000 + record.completion_tokens * 6_000);
		const embed = await gw.post(key(), "/v1/completions", {
			model: "test/ok",
			fallbacks: [{ model: "test/embed" }],
			prompt: "x",
		});
		expect(embed.res.status).toBe(400);
		expect(errorOf(embed)).toMatchObject({ param: "fallbacks[0].model", code: "unsupported_model" });
	});
});

describe("embeddings", () => {
	it("serves from a configured fallback after a timeout, held and billed at its price", async () => {
		const k = await createKey({ name: "embeddings hold", balance_usd: 1 });
		const input = `embed me ${marker()}`;
		const pending = gw.post(k.key, "/v1/embeddings", { model: "test/embed", input });
		const held = await waitFor(async () => {
			const i = await ledgerFor(env, k.id).info();
			return i.openHolds === 1 ? i.heldNanos : null;
		});
		// The dear fallback's bound for a text input (a token a character, plus 16) at $10 per million.
		expect(held).toBe((input.length + 16) * 10_000);
		const a = await pending;
		expect(a.res.status, a.text).toBe(200);
		expect(a.json?.model).toBe("test/embed-dear");
		const usage = a.json?.usage as { prompt_tokens: number };
		expect(Number(a.res.headers.get("x-venym-cost-usd"))).toBeCloseTo((usage.prompt_tokens * 10_000) / 1e9, 12);
		const record = await usageRecord(requestIdOf(a));
		expect(record).toMatchObject({
			model: "test/embed-dear",
			requested_model: "test/embed",
			node: nodeUrl(EMBED_DEAR),
			cost_nanos: usage.prompt_tokens * 10_000,
		});
	});

	it("tries the request's `models` first and refuses a chat model in it", async () => {
		const m = marker();
		const a = await gw.post(key(), "/v1/embeddings", { model: "test/embed", models: ["test/embed-cheap"], input: `e ${m}` });
		expect(a.res.status, a.text).toBe(200);
		expect(a.json?.model).toBe("test/embed-cheap");
		const calls = await callsWith(m);
		expect(calls.map((c) => [c.node, c.body?.model])).toEqual([
			[EMBED_HANG, "engine-test/embed"],
			[EMBED_CHEAP, "engine-test/embed-cheap"],
		]);
		for (const c of calls) expect(c.body).not.toHaveProperty("models");
		const record = await usageRecord(requestIdOf(a));
		expect(record).toMatchObject({ model: "test/embed-cheap", requested_model: "test/embed" });
		expect(record.cost_nanos).toBe(record.prompt_tokens * 3_000);
		const chat = await gw.post(key(), "/v1/embeddings", { model: "test/embed", models: ["test/ok"], input: "x" });
		expect(chat.res.status).toBe(400);
		expect(errorOf(chat)).toMatchObject({ param: "models[0]", code: "unsupported_model" });
	});
});
