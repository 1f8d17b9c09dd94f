/**
 * The hosted web_search tool on the Responses lane: offered to the engine as a function, run by
 * the gateway when the model calls it (one search, charged), the engine asked again with the
 * result, the client shown a web_search_call item and the second answer; both calls' tokens and
 * the search settled once, however the request ends. The dev engine calls the search when the
 * user's text says "search" (dev/engine-reply.mjs), and counts a prompt as its text's length / 4.
 */
import { createExecutionContext, env, waitOnExecutionContext } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { estimatePromptTokens } from "../../../src/estimate";
import worker from "../../../src/index";
import { settled, type UsageRow } from "../../support/billing";
import { BASE, createKey, engineRequestsSince, gw, lastEngineId, readSse, releaseEngine, waitFor } from "../../support/gateway";
import { expectBooks, ledger } from "../../support/ledger";
import { created, settled as settledResponse } from "../../support/responses";
import { devPrompt, type EngineMessage, engineCalls, toolNames } from "../../support/search-round";

type Json = Record<string, unknown>;
type Item = Json & { type: string };
interface Usage {
	input_tokens: number;
	output_tokens: number;
	total_tokens: number;
}
type Message = EngineMessage;

const SEARCH_NANOS = 5_000_000;
const WEB = { type: "web_search" };
const EXEC = { type: "function", name: "exec_command", parameters: { type: "object", properties: {} } };

function post(key: string, body: Json): Promise<Response> {
	return gw("/v1/responses", {
		method: "POST",
		headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
		body: JSON.stringify(body),
	});
}

/** The response object of a JSON answer or a stream's last event, and the stream's events. */
async function answered(
	res: Response,
	stream: boolean,
): Promise<{ response: Json & { output: Item[]; usage: Usage }; events: Json[] }> {
	expect(res.status).toBe(200);
	if (!stream) return { response: (await res.json()) as never, events: [] };
	const events = (await readSse(res)).map((d) => JSON.parse(d) as Json);
	const last = events.at(-1) as { type: string; response: never };
	expect(last.type).toBe("response.completed");
	return { response: last.response, events };
}

function messageText(output: Item[]): string {
	const message = output.find((i) => i.type === "message") as { content: Array<{ text: string }> } | undefined;
	return message?.content.map((c) => c.text).join("") ?? "";
}

/** The key's one usage record, once settled. */
async function onlyRecord(keyId: string): Promise<UsageRow> {
	const { rows } = await settled(keyId, 1);
	expect(rows).toHaveLength(1);
	return rows[0] as UsageRow;
}

describe("the model calls the hosted search", () => {
	for (const stream of [false, true]) {
		it(`runs one search, asks the engine again with its result, and bills both calls and the search once (${stream ? "stream" : "JSON"})`, async () => {
			const { id, key } = await createKey({ balance_usd: 5 });
			const since = await lastEngineId();
			const input = "search the tides of Brest";
			const res = await post(key, { model: "test/ok", input, tools: [WEB, EXEC], stream });
			// A stream starts before its search ran: the search's status is in its web_search_call item.
			expect(res.headers.get("x-venym-web-search")).toBe(stream ? null : "ok");
			const { response, events } = await answered(res, stream);

			// The engine: offered the search beside the client's tool, then asked again without it,
			// with its call and the grounding text as the tool's result.
			const { searches, chats } = await engineCalls(since);
			expect(searches).toHaveLength(1);
			expect(chats).toHaveLength(2);
			const [first, second] = chats as [Json & { messages: Message[] }, Json & { messages: Message[] }];
			expect(toolNames(first)).toEqual(["exec_command", "web_search"]);
			expect(toolNames(second)).toEqual(["exec_command"]);
			const [call, result] = second.messages.slice(-2) as [Message, Message];
			expect(call.tool_calls?.[0]?.function).toEqual({ name: "web_search", arguments: JSON.stringify({ query: input }) });
			expect(result).toMatchObject({ role: "tool", tool_call_id: call.tool_calls?.[0]?.id });
			expect(String(result.content)).toMatch(
				/^Web search results \(retrieved \d{4}-\d{2}-\d{2}\):\n\n\[1\] search the tides of Brest/,
			);

			// The client: the search as a web_search_call item, then the second answer, citing it.
			expect(response.output.map((i) => i.type)).toEqual(["web_search_call", "message"]);
			const item = response.output[0] as Item & { action: { query: string; sources: unknown[] } };
			expect(item).toMatchObject({ status: "completed", action: { type: "search", query: input } });
			expect(item.action.sources).toHaveLength(6);
			expect(item.action.sources[0]).toEqual({ type: "url", url: "https://example.com/search-the-tides-of-brest/1" });
			const text = messageText(response.output);
			expect(text).toBe(`According to [1], ${input} is covered in the results [2].`);
			expect(JSON.stringify(response.output[1])).toContain("url_citation");
			expect(JSON.stringify(response.output)).not.toContain("function_call");

			// Money: both calls' tokens, as the engine counted them, and one search.
			const prompt = devPrompt(first.messages) + devPrompt(second.messages);
			const completion = Math.ceil(JSON.stringify({ query: input }).length / 8) + text.split(/\s+/).length;
			expect(response.usage).toMatchObject({
				input_tokens: prompt,
				output_tokens: completion,
				total_tokens: prompt + completion,
			});
			const cost = prompt * 1_000 + completion * 2_000 + SEARCH_NANOS;
			if (!stream) expect(Math.round(Number(res.headers.get("x-venym-cost-usd")) * 1e9)).toBe(cost);
			const record = await onlyRecord(id);
			expect(record).toMatchObject({
				status: "completed",
				prompt_tokens: prompt,
				completion_tokens: completion,
				search_count: 1,
				cost_nanos: cost,
			});
			const { info } = await expectBooks(id, 5e9);
			expect(info.spentNanos).toBe(cost);

			if (stream) {
				const searchEvents = events.filter((e) => (e as { output_index?: number }).output_index === 0).map((e) => e.type);
				expect(searchEvents).toEqual([
					"response.output_item.added",
					"response.web_search_call.in_progress",
					"response.web_search_call.searching",
					"response.web_search_call.completed",
					"response.output_item.done",
				]);
				const added = events.find((e) => e.type === "response.output_item.added" && (e.item as Item).type === "message");
				expect(added).toMatchObject({ output_index: 1 });
			}
			// Stored as answered.
			const stored = (await (
				await gw(`/v1/responses/${response.id}`, { headers: { authorization: `Bearer ${key}` } })
			).json()) as { output: Item[] };
			await waitOnExecutionContext(createExecutionContext());
			expect(stored.output.map((i) => i.type)).toEqual(["web_search_call", "message"]);
		});
	}

	it("must call it when tool_choice names it, and a web_search_call item sent back later is accepted", async () => {
		const { key } = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		const res = await post(key, {
			model: "test/ok",
			input: "tides",
			tools: [WEB, EXEC],
			tool_choice: { type: "web_search" },
			store: false,
		});
		const { response } = await answered(res, false);
		const { chats } = await engineCalls(since);
		expect(chats[0]?.tool_choice).toEqual({ type: "function", function: { name: "web_search" } });
		expect(chats[1]).not.toHaveProperty("tool_choice");
		expect(response.output.map((i) => i.type)).toEqual(["web_search_call", "message"]);
		// The next stateless turn replays it.
		const again = await post(key, {
			model: "test/ok",
			tools: [WEB],
			store: false,
			input: [{ role: "user", content: "tides" }, ...response.output, { role: "user", content: "thanks" }],
		});
		expect(again.status).toBe(200);
	});

	it("is offered under a reserved name beside a client function named web_search, and never shown as a function_call", async () => {
		const { key } = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		const own = { type: "function", name: "web_search", parameters: { type: "object", properties: {} } };
		const res = await post(key, { model: "test/ok", input: "search the news", tools: [own, WEB], store: false });
		const { response } = await answered(res, false);
		const { chats, searches } = await engineCalls(since);
		expect(toolNames(chats[0] as Json)).toEqual(["web_search", "venym_web_search"]);
		expect(toolNames(chats[1] as Json)).toEqual(["web_search"]);
		expect(searches).toHaveLength(1);
		expect(response.output.map((i) => i.type)).toEqual(["web_search_call", "message"]);
	});
});

describe("a background response whose model calls the hosted search", () => {
	it("runs the round in the queue, bills both calls and the search once, and leaves no hold", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		const input = "search the background tides";
		const queued = await created(key, { model: "test/ok", input, tools: [WEB], background: true });
		const done = await settledResponse(key, queued.id);
		expect(done.status).toBe("completed");
		expect(done.output.map((i) => i.type)).toEqual(["web_search_call", "message"]);
		const { chats, searches } = await engineCalls(since);
		expect([chats.length, searches.length]).toEqual([2, 1]);
		const prompt = devPrompt(chats[0]?.messages ?? []) + devPrompt(chats[1]?.messages ?? []);
		const record = await onlyRecord(id);
		expect(record).toMatchObject({ status: "completed", search_count: 1, prompt_tokens: prompt });
		expect(record.cost_nanos).toBe(prompt * 1_000 + record.completion_tokens * 2_000 + SEARCH_NANOS);
		const { info } = await expectBooks(id, 5e9);
		expect(info.spentNanos).toBe(record.cost_nanos);
	});
});

describe("the model does not call the hosted search", () => {
	for (const stream of [false, true]) {
		it(`searches nothing and charges no search (${stream ? "stream" : "JSON"})`, async () => {
			const { id, key } = await createKey({ balance_usd: 5 });
			const since = await lastEngineId();
			const res = await post(key, { model: "test/ok", input: "hello there", tools: [WEB], stream, store: false });
			expect(res.headers.get("x-venym-web-search")).toBeNull();
			const { response } = await answered(res, stream);
			const { searches, chats } = await engineCalls(since);
			expect(searches).toHaveLength(0);
			expect(chats).toHaveLength(1);
			expect(toolNames(chats[0] as Json)).toEqual(["web_search"]);
			expect(response.output.map((i) => i.type)).toEqual(["message"]);
			expect(messageText(response.output)).toBe("Echo: hello there");
			const prompt = devPrompt((chats[0] as { messages: Message[] }).messages);
			const record = await onlyRecord(id);
			expect(record).toMatchObject({ search_count: 0, prompt_tokens: prompt, cost_nanos: prompt * 1_000 + 3 * 2_000 });
		});
	}
});

/**
 * The shared test config with a model `test/search-<scenario>` on one dev-engine scenario (its
 * other settings `extra`), maybe another search backend, and other gateway `settings`.
 */
function direct(scenario: string, searchScenario?: string, extra: Json = {}, settings: Json = {}) {
	const cfg = { ...JSON.parse(env.GATEWAY_CONFIG), ...settings } as { models: Json[]; web_search: Json };
	const base = cfg.models.find((m) => m.id === "test/ok") as Json;
	cfg.models.push({ ...base, id: `test/search-${scenario}`, nodes: [`${env.ENGINE_URL}/s/${scenario}/v1`], ...extra });
	if (searchScenario) cfg.web_search.url = `${env.ENGINE_URL}/s/${searchScenario}/search`;
	const bindings = { ...env, GATEWAY_CONFIG: JSON.stringify(cfg) };
	return (key: string, body: Json, signal?: AbortSignal) => {
		const ctx = createExecutionContext();
		const req = new Request(`${BASE}/v1/responses`, {
			method: "POST",
			headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
			body: JSON.stringify({ model: `test/search-${scenario}`, ...body }),
			signal,
		}) as Request<unknown, IncomingRequestCfProperties>;
		return { answer: Promise.resolve(worker.fetch(req, bindings, ctx)), ctx };
	};
}

describe("a search round that does not end well settles once, billing what was used", () => {
	it("a client that leaves during the second call pays the first call, the search and the second prompt; no hold stranded", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const call = direct("search-slow-answer");
		const client = new AbortController();
		const since = await lastEngineId();
		const { answer, ctx } = call(
			key,
			{ input: "search the slow tides", tools: [WEB], stream: true, store: false },
			client.signal,
		);
		const res = await answer;
		expect(res.status).toBe(200);
		// The search item is out: the second call is answering, slowly.
		const reader = (res.body as ReadableStream<Uint8Array>).getReader();
		let seen = "";
		while (!seen.includes("response.web_search_call.completed")) seen += new TextDecoder().decode((await reader.read()).value);
		// One hold covers both calls and the search (test/ok's prices, context 8192, output cap 1000): each
		// call's prompt bound, with the search's result, is the context.
		expect((await ledger(id).info()).heldNanos).toBe(2 * (8192 * 1_000 + 1000 * 2_000) + SEARCH_NANOS);
		client.abort();
		await reader.cancel().catch(() => undefined);
		await waitOnExecutionContext(ctx);
		const { rows, info } = await expectBooks(id, 5e9);
		expect(rows).toHaveLength(1);
		const { chats } = await engineCalls(since);
		expect(chats).toHaveLength(2);
		const record = (await onlyRecord(id)) as UsageRow;
		expect(record).toMatchObject({ status: "client_disconnected", search_count: 1 });
		// At least the first call (as the engine counted it) and the search.
		const first = devPrompt((chats[0] as { messages: Message[] }).messages) * 1_000;
		expect(info.spentNanos).toBeGreaterThan(first + SEARCH_NANOS);
		expect(record.prompt_tokens).toBeGreaterThan(devPrompt((chats[0] as { messages: Message[] }).messages));
	});

	it("a client that leaves while the model reasons before calling it: the engine is let go, nothing searched, no hold", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		// The engine reasons first (reasoning_effort), then waits after its first frame until released: never, here.
		const call = direct("gated");
		const client = new AbortController();
		const since = await lastEngineId();
		const body = { input: "search the pondered tides", tools: [WEB], stream: true, store: false, reasoning: { effort: "low" } };
		const { answer, ctx } = call(key, body, client.signal);
		const pending = answer.catch((err: unknown) => err);
		const asked = await waitFor(async () => (await engineCalls(since)).chats[0]);
		expect(asked.reasoning_effort).toBe("low");
		client.abort();
		await pending;
		await waitOnExecutionContext(ctx);
		await waitFor(async () => (await engineRequestsSince(since))[0]?.aborted === true);
		const { chats, searches } = await engineCalls(since);
		expect([chats.length, searches.length]).toEqual([1, 0]);
		const record = await onlyRecord(id);
		expect(record).toMatchObject({ status: "client_disconnected", search_count: 0 });
		await expectBooks(id, 5e9);
	});

	it("a client that leaves while the search runs pays the first call only: no search charged, no second call, no hold", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const call = direct("ok", "searchslow");
		const client = new AbortController();
		const since = await lastEngineId();
		const input = "search the abandoned tides";
		const { answer, ctx } = call(key, { input, tools: [WEB], stream: true, store: false }, client.signal);
		const pending = answer.catch((err: unknown) => err);
		await waitFor(async () => (await engineCalls(since)).searches.length === 1);
		client.abort();
		await pending;
		await waitOnExecutionContext(ctx);
		const { chats, searches } = await engineCalls(since);
		expect([chats.length, searches.length]).toEqual([1, 1]);
		const prompt = devPrompt((chats[0] as { messages: Message[] }).messages);
		const completion = Math.ceil(JSON.stringify({ query: input }).length / 8);
		const record = await onlyRecord(id);
		expect(record).toMatchObject({
			status: "client_disconnected",
			search_count: 0,
			prompt_tokens: prompt,
			completion_tokens: completion,
			cost_nanos: prompt * 1_000 + completion * 2_000,
		});
		await expectBooks(id, 5e9);
	});

	it("an engine that fails on the second call is an error in the Responses shape; the first call and the search are billed (JSON)", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const call = direct("search-failed-answer");
		const since = await lastEngineId();
		const { answer, ctx } = call(key, { input: "search the failing tides", tools: [WEB], store: false });
		const res = await answer;
		expect(res.status).toBe(502);
		const body = (await res.json()) as { error: { code: string; message: string; type: string } };
		expect(body.error).toMatchObject({ code: "upstream_unavailable" });
		await waitOnExecutionContext(ctx);
		await expectFirstCallAndSearch(id, since, "search the failing tides");
	});

	it("a stream whose second call fails on every node ends with response.failed, the HTTP path's code; stored failed; the first call and the search billed", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const call = direct("search-failed-answer");
		const since = await lastEngineId();
		const input = "search the failing streamed tides";
		const { answer, ctx } = call(key, { input, tools: [WEB], stream: true });
		const res = await answer;
		expect(res.status).toBe(200);
		const events = (await readSse(res)).map((d) => JSON.parse(d) as Json & { type: string });
		expect(events.map((e) => e.type)).toEqual([
			"response.created",
			"response.in_progress",
			"response.output_item.added",
			"response.web_search_call.in_progress",
			"response.web_search_call.searching",
			"response.web_search_call.completed",
			"response.output_item.done",
			"error",
			"response.failed",
		]);
		const failed = events.at(-1) as unknown as { response: Json & { id: string; error: Json; output: Item[] } };
		expect(failed.response).toMatchObject({ status: "failed", error: { code: "upstream_unavailable" } });
		expect(failed.response.output.map((i) => [i.type, i.status])).toEqual([["web_search_call", "completed"]]);
		await waitOnExecutionContext(ctx);
		expect(await settledResponse(key, failed.response.id)).toMatchObject({
			status: "failed",
			error: { code: "upstream_unavailable" },
		});
		await expectFirstCallAndSearch(id, since, input);
	});

	it("a search backend that fails: the model still answers, and no search is charged", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const call = direct("ok", "searchfail");
		const since = await lastEngineId();
		const { answer, ctx } = call(key, { input: "search the lost tides", tools: [WEB], store: false });
		const res = await answer;
		expect(res.headers.get("x-venym-web-search")).toBe("failed");
		const { response } = await answered(res, false);
		await waitOnExecutionContext(ctx);
		expect(response.output.map((i) => i.type)).toEqual(["web_search_call", "message"]);
		expect(response.output[0]).toMatchObject({ status: "failed", action: { query: "search the lost tides", sources: [] } });
		const { chats } = await engineCalls(since);
		expect(String(chats[1]?.messages.at(-1)?.content)).toMatch(/failed/);
		const record = await onlyRecord(id);
		expect(record.search_count).toBe(0);
		const prompt = devPrompt(chats[0]?.messages ?? []) + devPrompt(chats[1]?.messages ?? []);
		expect(record.prompt_tokens).toBe(prompt);
		expect(record.cost_nanos).toBe(prompt * 1_000 + record.completion_tokens * 2_000);
	});
});

describe("a model that starts answering and calls the search later", () => {
	for (const stream of [false, true]) {
		it(`keeps its answer, the call taken out, and searches nothing (${stream ? "stream" : "JSON"})`, async () => {
			const { id, key } = await createKey({ balance_usd: 5 });
			const call = direct("search-late");
			const since = await lastEngineId();
			const { answer, ctx } = call(key, { input: "search the late tides", tools: [WEB, EXEC], stream, store: false });
			const res = await answer;
			expect(res.headers.get("x-venym-web-search")).toBeNull();
			const { response, events } = await answered(res, stream);
			await waitOnExecutionContext(ctx);
			expect(response.output.map((i) => i.type)).toEqual(["message"]);
			expect(messageText(response.output)).toBe("Let me look that up.");
			expect(response.status).toBe("completed");
			expect(JSON.stringify([response, events])).not.toMatch(/function_call|web_search_call/);
			const { chats, searches } = await engineCalls(since);
			expect([chats.length, searches.length]).toEqual([1, 0]);
			expect((await onlyRecord(id)).search_count).toBe(0);
		});
	}
});

describe("a search round served by two models", () => {
	it("bills each call at the prices of the model that served it (the second failed over to a dearer fallback)", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		// The requested model answers the first call and fails the second ('"tool_call_id"' is in it
		// only); test/fb-dear (ten times the price) serves the second.
		const call = direct("search-failed-answer", undefined, { fallbacks: ["test/fb-dear"] });
		const since = await lastEngineId();
		const input = "search the mixed tides";
		const { answer, ctx } = call(key, { input, tools: [WEB], store: false });
		const res = await answer;
		const { response } = await answered(res, false);
		await waitOnExecutionContext(ctx);
		expect(response.output.map((i) => i.type)).toEqual(["web_search_call", "message"]);
		const { chats } = await engineCalls(since);
		// The first call, the second refused by the requested model, the second on the fallback.
		expect(chats.map((c) => c.model)).toEqual(["engine-ok", "engine-ok", "engine-fb-dear"]);
		const firstPrompt = devPrompt((chats[0] as { messages: Message[] }).messages);
		const firstCompletion = Math.ceil(JSON.stringify({ query: input }).length / 8);
		const secondPrompt = devPrompt((chats[2] as { messages: Message[] }).messages);
		const secondCompletion = messageText(response.output).split(/\s+/).length;
		const cost = firstPrompt * 1_000 + firstCompletion * 2_000 + secondPrompt * 10_000 + secondCompletion * 20_000 + SEARCH_NANOS;
		expect(Math.round(Number(res.headers.get("x-venym-cost-usd")) * 1e9)).toBe(cost);
		const record = await onlyRecord(id);
		expect(record).toMatchObject({
			status: "completed",
			prompt_tokens: firstPrompt + secondPrompt,
			completion_tokens: firstCompletion + secondCompletion,
			cost_nanos: cost,
		});
		const { info } = await expectBooks(id, 5e9);
		expect(info.spentNanos).toBe(cost);
	});
});

describe("a streamed search round served by two models", () => {
	it("bills the second call at the fallback's prices, the usage event equal to what was billed, stored as streamed", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		// The requested model answers the first call and fails the second; test/fb-dear serves it.
		const call = direct("search-failed-answer", undefined, { fallbacks: ["test/fb-dear"] });
		const since = await lastEngineId();
		const input = "search the mixed streamed tides";
		const { answer, ctx } = call(key, { input, tools: [WEB], stream: true });
		const { response, events } = await answered(await answer, true);
		await waitOnExecutionContext(ctx);
		expect(response.output.map((i) => i.type)).toEqual(["web_search_call", "message"]);
		// One usage: on the terminal event only; sequence numbers run 0..n-1.
		expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
		const { chats } = await engineCalls(since);
		expect(chats.map((c) => c.model)).toEqual(["engine-ok", "engine-ok", "engine-fb-dear"]);
		const firstPrompt = devPrompt((chats[0] as { messages: Message[] }).messages);
		const firstCompletion = Math.ceil(JSON.stringify({ query: input }).length / 8);
		const secondPrompt = devPrompt((chats[2] as { messages: Message[] }).messages);
		const secondCompletion = messageText(response.output).split(/\s+/).length;
		const cost = firstPrompt * 1_000 + firstCompletion * 2_000 + secondPrompt * 10_000 + secondCompletion * 20_000 + SEARCH_NANOS;
		const record = await onlyRecord(id);
		expect(record).toMatchObject({
			status: "completed",
			prompt_tokens: firstPrompt + secondPrompt,
			completion_tokens: firstCompletion + secondCompletion,
			cost_nanos: cost,
		});
		expect(response.usage).toMatchObject({
			input_tokens: firstPrompt + secondPrompt,
			output_tokens: firstCompletion + secondCompletion,
		});
		const { info } = await expectBooks(id, 5e9);
		expect(info.spentNanos).toBe(cost);
		const stored = (await settledResponse(key, response.id as string)) as unknown as Json & { output: Item[]; usage: Usage };
		expect(stored.output).toEqual(response.output);
		expect(stored.usage).toEqual(response.usage);
		expect(stored.model).toBe(response.model);
	});
});

describe("a streamed search round whose engine reasons", () => {
	it("numbers the items in order (search, reasoning, message), one usage, and stores what streamed", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const call = direct("reasoning");
		const { answer, ctx } = call(key, { input: "search the pondering tides", tools: [WEB], stream: true });
		const { response, events } = await answered(await answer, true);
		await waitOnExecutionContext(ctx);
		expect(response.output.map((i) => i.type)).toEqual(["web_search_call", "reasoning", "message"]);
		const added = events.filter((e) => e.type === "response.output_item.added");
		expect(added.map((e) => [e.output_index, (e.item as Item).type])).toEqual([
			[0, "web_search_call"],
			[1, "reasoning"],
			[2, "message"],
		]);
		const done = events.filter((e) => e.type === "response.output_item.done");
		expect(done.map((e) => e.item)).toEqual(response.output);
		expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
		const record = await onlyRecord(id);
		expect(record).toMatchObject({ status: "completed", search_count: 1 });
		expect(response.usage).toMatchObject({ input_tokens: record.prompt_tokens, output_tokens: record.completion_tokens });
		const stored = (await settledResponse(key, response.id as string)) as unknown as Json & { output: Item[] };
		expect(stored.output).toEqual(response.output);
		await expectBooks(id, 5e9);
	});
});

describe("a second answer that calls the search again", () => {
	for (const stream of [false, true]) {
		it(`keeps its text, the call taken out, and searches once (${stream ? "stream" : "JSON"})`, async () => {
			const { id, key } = await createKey({ balance_usd: 5 });
			const call = direct("search-again");
			const since = await lastEngineId();
			const { answer, ctx } = call(key, { input: "search the twice tides", tools: [WEB, EXEC], stream, store: false });
			const res = await answer;
			const { response, events } = await answered(res, stream);
			await waitOnExecutionContext(ctx);
			expect(response.output.map((i) => i.type)).toEqual(["web_search_call", "message"]);
			expect(messageText(response.output)).toBe("Here is what I found.");
			expect(response.status).toBe("completed");
			expect(JSON.stringify([response.output, events])).not.toMatch(/function_call|once more/);
			const { chats, searches } = await engineCalls(since);
			expect([chats.length, searches.length]).toEqual([2, 1]);
			expect((await onlyRecord(id)).search_count).toBe(1);
		});
	}
});

describe("an engine that reports no usage", () => {
	it("has each call's prompt estimated from what that call was sent, the search's result included", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const call = direct("nousage");
		const since = await lastEngineId();
		const { answer, ctx } = call(key, { input: "search the uncounted tides", tools: [WEB], store: false });
		const { response } = await answered(await answer, false);
		await waitOnExecutionContext(ctx);
		expect(response.output.map((i) => i.type)).toEqual(["web_search_call", "message"]);
		const { chats } = await engineCalls(since);
		expect(chats).toHaveLength(2);
		// The first body offers the search tool; the second carries the search's result instead.
		const [first, second] = chats.map((c) => estimatePromptTokens(c)) as [number, number];
		expect(second).toBeGreaterThan(first);
		const record = await onlyRecord(id);
		expect(record).toMatchObject({ estimated: true, prompt_tokens: first + second });
		expect(response.usage.input_tokens).toBe(first + second);
	});
});

describe("a prompt near the model's context", () => {
	it("has the second call's output cap lowered to what the context leaves once the search's result is added", async () => {
		const { key } = await createKey({ balance_usd: 5 });
		// The engine enforces a context of 4096 tokens (prompt + max tokens), as the catalog says.
		const call = direct("ctx4096", undefined, { context_length: 4096 });
		const since = await lastEngineId();
		// Instructions of about 3,700 tokens: the first call's cap is the few hundred the context leaves.
		const instructions = "word ".repeat(2950);
		const { answer, ctx } = call(key, { instructions, input: "search the long tides", tools: [WEB], store: false });
		const res = await answer;
		const { response } = await answered(res, false);
		await waitOnExecutionContext(ctx);
		expect(response.output.map((i) => i.type)).toEqual(["web_search_call", "message"]);
		const { chats } = await engineCalls(since);
		expect(chats).toHaveLength(2);
		const [first, second] = chats as [Json & { messages: Message[] }, Json & { messages: Message[] }];
		expect(second.max_tokens).toBeLessThan(first.max_tokens as number);
		expect(devPrompt(second.messages) + (second.max_tokens as number)).toBeLessThanOrEqual(4096);
	});
});

/** The books of a round whose second call failed: the first call as the engine counted it and the search, once. */
async function expectFirstCallAndSearch(id: string, since: number, input: string): Promise<void> {
	const { chats } = await engineCalls(since);
	const prompt = devPrompt((chats[0] as { messages: Message[] }).messages);
	const completion = Math.ceil(JSON.stringify({ query: input }).length / 8);
	const record = await onlyRecord(id);
	expect(record).toMatchObject({
		status: "failed",
		search_count: 1,
		prompt_tokens: prompt,
		completion_tokens: completion,
		cost_nanos: prompt * 1_000 + completion * 2_000 + SEARCH_NANOS,
	});
	await expectBooks(id, 5e9);
}

/** Reads a stream's events until one of `type` (inclusive). */
async function eventsUntil(reader: ReadableStreamDefaultReader<Uint8Array>, type: string): Promise<string[]> {
	const decoder = new TextDecoder();
	let text = "";
	while (!text.includes(`event: ${type}\n`)) {
		const { value, done } = await reader.read();
		if (done) throw new Error(`the stream ended before ${type}`);
		text += decoder.decode(value, { stream: true });
	}
	return [...text.matchAll(/^event: (.+)$/gm)].map((m) => m[1] as string);
}

describe("a streamed round starts before its search ran", () => {
	it("sends the response's opening and the search under way at once, the search's end once it ran, then the answer", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		// The search backend answers only once this test lets it.
		const call = direct("ok", "searchgated");
		const input = "search the early tides";
		const { answer, ctx } = call(key, { input, tools: [WEB], stream: true, store: false });
		const res = await answer;
		expect(res.status).toBe(200);
		const reader = (res.body as ReadableStream<Uint8Array>).getReader();
		const head = await eventsUntil(reader, "response.web_search_call.searching");
		expect(head).toEqual([
			"response.created",
			"response.in_progress",
			"response.output_item.added",
			"response.web_search_call.in_progress",
			"response.web_search_call.searching",
		]);
		expect(await releaseEngine("early tides")).toBe(1);
		let rest = "";
		for (let r = await reader.read(); !r.done; r = await reader.read()) rest += new TextDecoder().decode(r.value);
		const events = rest
			.split("\n\n")
			.filter((f) => f.startsWith("event: "))
			.map((f) => JSON.parse(f.slice(f.indexOf("data: ") + 6)) as Json & { type: string });
		expect(events.slice(0, 2).map((e) => e.type)).toEqual(["response.web_search_call.completed", "response.output_item.done"]);
		const last = events.at(-1) as { type: string; response: Json & { output: Item[] } };
		expect(last.type).toBe("response.completed");
		expect(last.response.output.map((i) => i.type)).toEqual(["web_search_call", "message"]);
		expect(last.response.output[0]).toMatchObject({ status: "completed", action: { query: input } });
		expect(messageText(last.response.output)).toBe(`According to [1], ${input} is covered in the results [2].`);
		await waitOnExecutionContext(ctx);
		expect(await onlyRecord(id)).toMatchObject({ status: "completed", search_count: 1 });
		await expectBooks(id, 5e9);
	});

	it("a client that leaves while the search waits settles once, with the first call's tokens; the search unanswered is not charged", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const call = direct("ok", "searchgated");
		const client = new AbortController();
		const since = await lastEngineId();
		const input = "search the deserted tides";
		const { answer, ctx } = call(key, { input, tools: [WEB], stream: true, store: false }, client.signal);
		const res = await answer;
		const reader = (res.body as ReadableStream<Uint8Array>).getReader();
		await eventsUntil(reader, "response.web_search_call.searching");
		// The events go out before the backend is asked: the client leaves once it is waiting on it.
		await waitFor(async () => (await engineCalls(since)).searches.length === 1);
		client.abort();
		await reader.cancel().catch(() => undefined);
		await waitOnExecutionContext(ctx);
		const { chats, searches } = await engineCalls(since);
		expect([chats.length, searches.length]).toEqual([1, 1]);
		const prompt = devPrompt((chats[0] as { messages: Message[] }).messages);
		const completion = Math.ceil(JSON.stringify({ query: input }).length / 8);
		expect(await onlyRecord(id)).toMatchObject({
			status: "client_disconnected",
			search_count: 0,
			prompt_tokens: prompt,
			completion_tokens: completion,
			cost_nanos: prompt * 1_000 + completion * 2_000,
		});
		await expectBooks(id, 5e9);
	});

	it("a client that leaves after the search answered, before the second call's first token, pays the first call, the search and the second prompt", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const call = direct("search-late-answer");
		const client = new AbortController();
		const since = await lastEngineId();
		const input = "search the departing tides";
		const { answer, ctx } = call(key, { input, tools: [WEB], stream: true, store: false }, client.signal);
		const res = await answer;
		const reader = (res.body as ReadableStream<Uint8Array>).getReader();
		await eventsUntil(reader, "response.output_item.done");
		// The second call is asked: its headers are 5 s away.
		await waitFor(async () => (await engineCalls(since)).chats.length === 2);
		client.abort();
		await reader.cancel().catch(() => undefined);
		await waitOnExecutionContext(ctx);
		// The second call is let go, not left to answer into nothing.
		await waitFor(
			async () => (await engineRequestsSince(since)).filter((r) => r.path.endsWith("/chat/completions"))[1]?.aborted === true,
		);
		const { chats } = await engineCalls(since);
		const prompt = devPrompt((chats[0] as { messages: Message[] }).messages);
		const completion = Math.ceil(JSON.stringify({ query: input }).length / 8);
		const record = await onlyRecord(id);
		expect(record).toMatchObject({ status: "client_disconnected", search_count: 1 });
		// The second prompt's estimate on top of the first call as the engine counted it.
		expect(record.prompt_tokens).toBeGreaterThan(prompt + devPrompt((chats[0] as { messages: Message[] }).messages) / 2);
		expect(record.completion_tokens).toBe(completion);
		expect(record.cost_nanos).toBe(record.prompt_tokens * 1_000 + completion * 2_000 + SEARCH_NANOS);
		const { info } = await expectBooks(id, 5e9);
		expect(info.spentNanos).toBe(record.cost_nanos);
	});

	it("a second call that goes mute mid-answer ends in-band after stream_idle_timeout_ms, settled once: first call, search, what it sent", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const call = direct("search-mute-answer", undefined, {}, { stream_idle_timeout_ms: 400 });
		const since = await lastEngineId();
		const input = "search the silent tides";
		const { answer, ctx } = call(key, { input, tools: [WEB], stream: true, store: false });
		const res = await answer;
		expect(res.status).toBe(200);
		const events = (await readSse(res)).map((d) => JSON.parse(d) as Json & { type: string });
		const types = events.map((e) => e.type);
		expect(types.slice(0, 7)).toEqual([
			"response.created",
			"response.in_progress",
			"response.output_item.added",
			"response.web_search_call.in_progress",
			"response.web_search_call.searching",
			"response.web_search_call.completed",
			"response.output_item.done",
		]);
		expect(types.at(-1)).toMatch(/^response\.(failed|incomplete)$/);
		expect(types.filter((t) => t === "response.completed")).toEqual([]);
		expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
		await waitOnExecutionContext(ctx);
		const { chats, searches } = await engineCalls(since);
		expect([chats.length, searches.length]).toEqual([2, 1]);
		const prompt = devPrompt((chats[0] as { messages: Message[] }).messages);
		const completion = Math.ceil(JSON.stringify({ query: input }).length / 8);
		const record = await onlyRecord(id);
		expect(record).toMatchObject({ search_count: 1 });
		expect(record.status).not.toBe("completed");
		expect(record.cost_nanos).toBeGreaterThanOrEqual(prompt * 1_000 + completion * 2_000 + SEARCH_NANOS);
		const { info } = await expectBooks(id, 5e9);
		expect(info.spentNanos).toBe(record.cost_nanos);
	});

	it("a stream cancelled while the search waits, the runtime's signal never fired, settles once: no search charged, the backend let go", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const call = direct("ok", "searchgated");
		const since = await lastEngineId();
		const input = "search the cancelled tides";
		const { answer, ctx } = call(key, { input, tools: [WEB], stream: true, store: false });
		const res = await answer;
		const reader = (res.body as ReadableStream<Uint8Array>).getReader();
		await eventsUntil(reader, "response.web_search_call.searching");
		await waitFor(async () => (await engineCalls(since)).searches.length >= 1);
		await reader.cancel();
		await waitOnExecutionContext(ctx);
		await waitFor(async () => (await engineRequestsSince(since)).find((r) => r.path.endsWith("/search"))?.aborted === true);
		const { chats } = await engineCalls(since, input);
		expect(chats).toHaveLength(1);
		const prompt = devPrompt((chats[0] as { messages: Message[] }).messages);
		const completion = Math.ceil(JSON.stringify({ query: input }).length / 8);
		expect(await onlyRecord(id)).toMatchObject({
			status: "client_disconnected",
			search_count: 0,
			cost_nanos: prompt * 1_000 + completion * 2_000,
		});
		await expectBooks(id, 5e9);
	});

	it("a search backend that hangs past web_search.timeout_ms: the stream goes on with the search failed, not charged", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const web = (JSON.parse(env.GATEWAY_CONFIG) as { web_search: Json }).web_search;
		const call = direct("ok", "searchslow", {}, { web_search: { ...web, timeout_ms: 300 } });
		const { answer, ctx } = call(key, { input: "search the hung tides", tools: [WEB], stream: true, store: false });
		const { response } = await answered(await answer, true);
		await waitOnExecutionContext(ctx);
		expect(response.output.map((i) => [i.type, i.status])).toEqual([
			["web_search_call", "failed"],
			["message", "completed"],
		]);
		const record = await onlyRecord(id);
		expect(record).toMatchObject({ status: "completed", search_count: 0 });
		expect(record.cost_nanos).toBe(record.prompt_tokens * 1_000 + record.completion_tokens * 2_000);
		await expectBooks(id, 5e9);
	});

	it("a client that reads nothing while the search waits is cut after client_idle_timeout_ms: the search let go, settled once", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const call = direct("ok", "searchgated", {}, { client_idle_timeout_ms: 300 });
		const since = await lastEngineId();
		const input = "search the idle tides";
		// The client never reads the opening events, and never leaves: only the gateway can end this.
		const { answer, ctx } = call(key, { input, tools: [WEB], stream: true, store: false });
		expect((await answer).status).toBe(200);
		await waitOnExecutionContext(ctx);
		// The round's work is over (the request settled): its search, if it was sent yet, was let go.
		await waitFor(async () => {
			const search = (await engineRequestsSince(since)).find((r) => r.path.endsWith("/search"));
			return !search || search.aborted;
		});
		const { chats } = await engineCalls(since);
		expect(chats).toHaveLength(1);
		const prompt = devPrompt((chats[0] as { messages: Message[] }).messages);
		const completion = Math.ceil(JSON.stringify({ query: input }).length / 8);
		expect(await onlyRecord(id)).toMatchObject({
			status: "client_disconnected",
			search_count: 0,
			cost_nanos: prompt * 1_000 + completion * 2_000,
		});
		await expectBooks(id, 5e9);
	});
});
