import { createExecutionContext, env, runDurableObjectAlarm, waitOnExecutionContext } from "cloudflare:test";
import { beforeAll, describe, expect, it } from "vitest";
import { estimatePromptTokens } from "../../../src/estimate";
import worker from "../../../src/index";
import { fleetConfig, gatewayWith, marker, model, ownEngineUrl } from "../../support/fleet";
import { chat, createKey, engineRequestsSince, lastEngineId, readSse, sdkClient, waitFor } from "../../support/gateway";

interface Completion {
	model: string;
	choices: Array<{ message: { content: string; annotations?: Array<{ type: string; url_citation: Record<string, unknown> }> } }>;
	venym?: { sources: Array<{ title: string; url: string }> };
}

type Json = Record<string, unknown>;

const question = { role: "user", content: "what is quantum tunnelling" };

async function engineCalls(since: number) {
	const all = await engineRequestsSince(since);
	return {
		searches: all.filter((r) => r.path.endsWith("/search")),
		chats: all.filter((r) => r.path.endsWith("/chat/completions")),
	};
}

function systemText(body: Record<string, unknown> | null): string {
	const messages = (body?.messages ?? []) as Array<{ role: string; content: string }>;
	return messages[0]?.role === "system" ? messages[0].content : "";
}

/** Runs the worker with a different GATEWAY_CONFIG (e.g. a broken search backend). */
async function withConfig(patch: (cfg: Record<string, unknown>) => void, key: string, body: Record<string, unknown>) {
	const cfg = JSON.parse(env.GATEWAY_CONFIG) as Record<string, unknown>;
	patch(cfg);
	const ctx = createExecutionContext();
	const res = await worker.fetch(
		new Request("http://gateway.test/v1/chat/completions", {
			method: "POST",
			headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
			body: JSON.stringify(body),
		}),
		{ ...env, GATEWAY_CONFIG: JSON.stringify(cfg) },
		ctx,
	);
	return { res, ctx };
}

describe("web search", () => {
	it("runs for a :online model id, grounds the engine on numbered sources and returns them with citations", async () => {
		const { key } = await createKey();
		const since = await lastEngineId();
		const res = await chat(key, { model: "test/ok:online", messages: [{ role: "system", content: "Be brief." }, question] });
		expect(res.status).toBe(200);
		expect(res.headers.get("x-venym-web-search")).toBe("ok");
		const body = (await res.json()) as Completion;
		expect(body.model).toBe("test/ok:online");
		const { searches, chats } = await engineCalls(since);
		expect(searches).toHaveLength(1);
		expect((searches[0] as { query?: Record<string, string> }).query?.q).toBe("what is quantum tunnelling");
		const sent = chats[0]?.body as Record<string, unknown>;
		expect(sent.model).toBe("engine-ok");
		const grounding = systemText(sent);
		for (let n = 1; n <= 6; n++) expect(grounding).toContain(`[${n}] what is quantum tunnelling — result ${n}`);
		expect(grounding).not.toContain("[7]");
		expect(grounding).toContain("https://example.com/what-is-quantum-tunnelling/1");
		expect(grounding).toMatch(/cite/i);
		// The grounding comes before the conversation, whose own system message follows untouched.
		expect((sent.messages as Array<{ content: string }>)[1]?.content).toBe("Be brief.");
		expect(body.venym?.sources).toHaveLength(6);
		expect(body.venym?.sources[0]).toEqual({
			title: "what is quantum tunnelling — result 1",
			url: "https://example.com/what-is-quantum-tunnelling/1",
		});
		const content = body.choices[0]?.message.content ?? "";
		const annotations = body.choices[0]?.message.annotations ?? [];
		expect(content).toContain("[1]");
		expect(annotations.length).toBeGreaterThan(0);
		for (const a of annotations) {
			expect(a.type).toBe("url_citation");
			const cite = a.url_citation as { start_index: number; end_index: number; url: string };
			const n = Number(content.slice(cite.start_index, cite.end_index).replace(/\D/g, ""));
			expect(cite.url).toBe(body.venym?.sources[n - 1]?.url);
		}
	});

	it("runs for venym.web_search with a custom result count, and the venym object never reaches the engine", async () => {
		const { key } = await createKey();
		const since = await lastEngineId();
		const res = await chat(key, { model: "test/ok", messages: [question], venym: { web_search: true, search_results: 3 } });
		const body = (await res.json()) as Completion;
		expect(body.venym?.sources).toHaveLength(3);
		const { chats } = await engineCalls(since);
		const sent = chats[0]?.body as Record<string, unknown>;
		expect(sent.venym).toBeUndefined();
		expect(systemText(sent)).toContain("[3]");
		expect(systemText(sent)).not.toContain("[4]");
	});

	it("uses the text parts of a multi-part last user message as the query", async () => {
		const { key } = await createKey();
		const since = await lastEngineId();
		await chat(key, {
			model: "test/ok:online",
			messages: [
				{ role: "user", content: "old question" },
				{ role: "assistant", content: "old answer" },
				{
					role: "user",
					content: [
						{ type: "text", text: "solar" },
						{ type: "image_url", image_url: { url: "https://x/y.png" } },
						{ type: "text", text: "eclipses" },
					],
				},
			],
		});
		const { searches } = await engineCalls(since);
		expect((searches[0] as { query?: Record<string, string> }).query?.q).toBe("solar eclipses");
	});

	it.each([0, 11, 2.5, "3"])("refuses venym.search_results = %s with param venym.search_results", async (n) => {
		const { key } = await createKey();
		const res = await chat(key, { model: "test/ok", messages: [question], venym: { web_search: true, search_results: n } });
		expect(res.status).toBe(400);
		const body = (await res.json()) as { error: { param: string; type: string } };
		expect(body.error.param).toBe("venym.search_results");
		expect(body.error.type).toBe("invalid_request_error");
	});

	it("does not search or send sources without a trigger", async () => {
		const { key } = await createKey();
		const since = await lastEngineId();
		const res = await chat(key, { model: "test/ok", messages: [question] });
		const body = (await res.json()) as Completion;
		expect(body.venym).toBeUndefined();
		expect(res.headers.get("x-venym-web-search")).toBeNull();
		const { searches, chats } = await engineCalls(since);
		expect(searches).toHaveLength(0);
		expect(systemText(chats[0]?.body ?? null)).toBe("");
		const stream = await chat(key, { model: "test/ok", stream: true, messages: [question] });
		const frames = await readSse(stream);
		expect(frames.some((f) => f.includes("venym.sources"))).toBe(false);
	});

	it("sends the sources frame first in a stream, before the chunks, the usage chunk and [DONE]", async () => {
		const { key } = await createKey();
		const res = await chat(key, { model: "test/ok:online", stream: true, messages: [question], venym: { search_results: 2 } });
		expect(res.headers.get("x-venym-web-search")).toBe("ok");
		const frames = await readSse(res);
		const first = JSON.parse(frames[0] as string);
		// Shaped like a chunk (the usage chunk's shape), so every client's chunk parser takes it.
		expect(first).toEqual({
			id: expect.stringMatching(/^chatcmpl-[0-9a-f]{32}$/),
			object: "venym.sources",
			created: expect.any(Number),
			model: "test/ok:online",
			choices: [],
			sources: [
				{ title: "what is quantum tunnelling — result 1", url: "https://example.com/what-is-quantum-tunnelling/1" },
				{ title: "what is quantum tunnelling — result 2", url: "https://example.com/what-is-quantum-tunnelling/2" },
			],
		});
		expect(frames.at(-1)).toBe("[DONE]");
		const usage = JSON.parse(frames.at(-2) as string);
		expect(usage.choices).toEqual([]);
		// One id throughout the stream: the gateway named it before any engine chunk.
		for (const f of frames.slice(1, -1)) expect(JSON.parse(f).id).toBe(first.id);
		expect(frames.filter((f) => f.includes("venym.sources"))).toHaveLength(1);
	});

	it("delivers the sources frame through the official SDK's chunk loop", async () => {
		const { key } = await createKey();
		const client = sdkClient(key);
		const stream = await client.chat.completions.create({
			model: "test/ok:online",
			stream: true,
			messages: [{ role: "user", content: "tides" }],
		});
		const seen: Array<Record<string, unknown>> = [];
		for await (const chunk of stream) seen.push(chunk as unknown as Record<string, unknown>);
		expect(seen[0]?.object).toBe("venym.sources");
		expect(seen[0]?.sources as unknown[]).toHaveLength(6);
		expect(seen.slice(1).every((c) => c.object === "chat.completion.chunk" && c.model === "test/ok:online")).toBe(true);
		const text = seen
			.slice(1)
			.map((c) => (c.choices as Array<{ delta?: { content?: string } }>)[0]?.delta?.content ?? "")
			.join("");
		expect(text).toContain("[1]");
	});

	it("works with the official SDK's stream helper and finalChatCompletion on a web-search stream", async () => {
		const { key } = await createKey();
		const client = sdkClient(key);
		const stream = client.chat.completions.stream({
			model: "test/ok:online",
			messages: [{ role: "user", content: "tides" }],
		});
		let deltas = "";
		stream.on("content", (delta) => {
			deltas += delta;
		});
		const final = await stream.finalChatCompletion();
		expect(final.model).toBe("test/ok:online");
		expect(final.choices[0]?.message.content).toContain("[1]");
		expect(final.choices[0]?.message.content).toBe(deltas);
		expect(final.usage?.total_tokens).toBeGreaterThan(0);
	});

	it("answers without grounding or sources when the search backend fails, and says so in a header", async () => {
		const { key } = await createKey();
		const since = await lastEngineId();
		const { res, ctx } = await withConfig(
			(cfg) => {
				(cfg.web_search as Record<string, unknown>).url = `${env.ENGINE_URL}/s/searchfail/search`;
			},
			key,
			{ model: "test/ok:online", messages: [question] },
		);
		expect(res.status).toBe(200);
		expect(res.headers.get("x-venym-web-search")).toBe("failed");
		const body = (await res.json()) as Completion;
		expect(body.venym).toBeUndefined();
		expect(body.choices[0]?.message.content).toBe("Echo: what is quantum tunnelling");
		await waitOnExecutionContext(ctx);
		const { chats } = await engineCalls(since);
		expect(systemText(chats[0]?.body ?? null)).toBe("");
	});

	it("gives up on a search backend that times out and still answers", async () => {
		const { key } = await createKey();
		const started = Date.now();
		const { res } = await withConfig(
			(cfg) => {
				const ws = cfg.web_search as Record<string, unknown>;
				ws.url = `${env.ENGINE_URL}/s/searchslow/search`;
				ws.timeout_ms = 300;
			},
			key,
			{ model: "test/ok:online", stream: true, messages: [question] },
		);
		expect(res.headers.get("x-venym-web-search")).toBe("failed");
		const frames = await readSse(res);
		expect(frames.some((f) => f.includes("venym.sources"))).toBe(false);
		expect(frames.at(-1)).toBe("[DONE]");
		expect(Date.now() - started).toBeLessThan(4000);
	});

	it("does not read a search answer past its size cap: the search failed, the model still answers", async () => {
		const { key } = await createKey();
		const since = await lastEngineId();
		const { res, ctx } = await withConfig(
			(cfg) => {
				(cfg.web_search as Record<string, unknown>).url = `${env.ENGINE_URL}/s/searchhuge/search`;
			},
			key,
			{ model: "test/ok:online", messages: [question] },
		);
		expect(res.status).toBe(200);
		expect(res.headers.get("x-venym-web-search")).toBe("failed");
		expect(((await res.json()) as Completion).venym).toBeUndefined();
		await waitOnExecutionContext(ctx);
		const { chats, searches } = await engineCalls(since);
		expect(systemText(chats[0]?.body ?? null)).toBe("");
		// The rest of the answer was left unread.
		await waitFor(async () => (await engineCalls(since)).searches[0]?.aborted === true);
		expect(searches).toHaveLength(1);
	});

	it("estimates the prompt of an engine that reports no usage from what it was sent, the grounding included", async () => {
		const { key } = await createKey();
		const since = await lastEngineId();
		const res = await chat(key, { model: "test/nousage:online", messages: [question] });
		expect(res.headers.get("x-venym-web-search")).toBe("ok");
		const body = (await res.json()) as { usage: { prompt_tokens: number } };
		const { chats } = await engineCalls(since);
		const sent = chats[0]?.body as Record<string, unknown>;
		expect(systemText(sent)).toMatch(/^Web search results/);
		expect(body.usage.prompt_tokens).toBe(estimatePromptTokens(sent));
	});

	it("lowers the output cap to what the context leaves once the grounding is added to a prompt near it", async () => {
		const { key } = await createKey();
		const since = await lastEngineId();
		const long = { role: "system", content: "word ".repeat(2950) };
		const { res, ctx } = await withConfig(
			(cfg) => {
				const models = cfg.models as Array<Record<string, unknown>>;
				const base = models.find((m) => m.id === "test/ok") as Record<string, unknown>;
				// The engine enforces a context of 4096 tokens (prompt + max tokens), as the catalog says.
				models.push({ ...base, id: "test/ctx4096", nodes: [`${env.ENGINE_URL}/s/ctx4096/v1`], context_length: 4096 });
			},
			key,
			{ model: "test/ctx4096:online", messages: [long, question] },
		);
		expect(res.status).toBe(200);
		expect(res.headers.get("x-venym-web-search")).toBe("ok");
		await waitOnExecutionContext(ctx);
		const { chats } = await engineCalls(since);
		const sent = chats[0]?.body as { max_tokens: number; messages: Array<{ content: string }> };
		expect(systemText(sent)).toMatch(/^Web search results/);
		const prompt = Math.ceil(sent.messages.reduce((n, m) => n + m.content.length, 0) / 4);
		expect(prompt + sent.max_tokens).toBeLessThanOrEqual(4096);
	});

	it("adds price_usd_per_search to the cost and counts the search in the usage record", async () => {
		const { id, key } = await createKey({ balance_usd: 1 });
		const plain = await chat(key, { model: "test/ok", messages: [question] });
		const online = await chat(key, { model: "test/ok:online", messages: [question] });
		const plainCost = Number(plain.headers.get("x-venym-cost-usd"));
		const onlineBody = (await online.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
		// $1/Mtok in, $2/Mtok out, $0.005 a search.
		const expectedNanos = onlineBody.usage.prompt_tokens * 1000 + onlineBody.usage.completion_tokens * 2000 + 5_000_000;
		expect(Math.round(Number(online.headers.get("x-venym-cost-usd")) * 1e9)).toBe(expectedNanos);
		expect(plainCost).toBeLessThan(0.005);
		const ledger = env.LEDGER.get(env.LEDGER.idFromName(id));
		await runDurableObjectAlarm(ledger);
		const rows = await waitFor(async () => {
			const r = await env.DB.prepare(
				"SELECT search_count, cost_nanos, model, requested_model FROM usage_records WHERE key_id = ? ORDER BY search_count",
			)
				.bind(id)
				.all();
			return r.results.length === 2 ? r.results : null;
		});
		expect(rows.map((r) => r.search_count)).toEqual([0, 1]);
		expect(rows[1]?.cost_nanos).toBe(expectedNanos);
		// One model, whatever the suffix: the record names the catalog model, the request keeps what was sent.
		expect(rows.map((r) => [r.model, r.requested_model])).toEqual([
			["test/ok", "test/ok"],
			["test/ok", "test/ok:online"],
		]);
	});
});

describe("web search asked for on the embeddings lane", () => {
	const engine = ownEngineUrl("search-embeddings");
	const node = (scenario?: string) => (scenario ? `${engine}/s/${scenario}/v1` : `${engine}/v1`);
	let key: string;
	beforeAll(async () => {
		key = (await createKey({ balance_usd: 10 })).key;
	});
	const gateway = gatewayWith(fleetConfig([model("embed", [node()], { capabilities: ["embeddings"] })]));

	it("refuses venym.web_search as it refuses :online (no search runs, none is charged)", async () => {
		// `model: "embed:online"` is a 400, but `venym: {web_search: true}` is accepted and ignored.
		const a = await gateway.post(key, "/v1/embeddings", { model: "embed", input: "hi", venym: { web_search: true } });
		expect(a.res.status).toBe(400);
		expect((a.json?.error as Json | undefined)?.param).toMatch(/^venym/);
	});
});

describe("web search and tool-call repair on one non-stream answer", () => {
	const engine = ownEngineUrl("search-repair");
	const node = (scenario?: string) => (scenario ? `${engine}/s/${scenario}/v1` : `${engine}/v1`);
	let key: string;
	beforeAll(async () => {
		key = (await createKey({ balance_usd: 10 })).key;
	});
	const TOOLS = [
		{ type: "function", function: { name: "lookup", parameters: { type: "object", properties: { query: { type: "string" } } } } },
	];
	const gateway = gatewayWith({
		...fleetConfig([model("broken", [node("brokentool")], { tool_call_repair: true, capabilities: ["tools", "web_search"] })]),
		web_search: { provider: "searxng", url: `${engine}/search`, price_usd_per_search: 0.005, timeout_ms: 1500 },
	});

	it("keeps venym.tool_calls_repaired next to venym.sources", async () => {
		// run-chat.ts sets body.venym = {tool_calls_repaired}, then attachSources() replaces body.venym
		// with {sources}: the repair count is lost whenever :online (or venym.web_search) ran.
		const a = await gateway.chat(key, {
			model: "broken:online",
			tools: TOOLS,
			messages: [{ role: "user", content: `find ${marker()}` }],
		});
		expect(a.res.status).toBe(200);
		const venym = a.json?.venym as Json | undefined;
		expect(Array.isArray(venym?.sources)).toBe(true);
		expect(venym?.tool_calls_repaired).toBe(1);
	});
});
