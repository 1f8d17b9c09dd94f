/**
 * Anthropic's web search server tool on /v1/messages, served by the gateway's search round: the
 * engine is offered the search as a function, the gateway runs it when the model calls it and
 * asks the engine again; the client sees Anthropic's `server_tool_use` and
 * `web_search_tool_result` blocks before the answer, and `usage.server_tool_use`; both calls and
 * one search are billed once. The dev engine calls the search when the user's text says "search"
 * (dev/engine-reply.mjs), and counts a prompt as its text's length / 4.
 */

import { createExecutionContext, env, SELF, waitOnExecutionContext } from "cloudflare:test";
import Anthropic from "@anthropic-ai/sdk";
import { describe, expect, it } from "vitest";
import worker from "../../../src/index";
import { SEARCH, settled, type UsageRow } from "../../support/billing";
import { BASE, createKey, engineRequestsSince, gw, lastEngineId, readSse } from "../../support/gateway";
import { expectBooks } from "../../support/ledger";
import { devPrompt, type EngineMessage, engineCalls, toolNames } from "../../support/search-round";

type Json = Record<string, unknown>;
type ChatMessage = EngineMessage;

/** An Anthropic stream event, as parsed. */
interface Event {
	type: string;
	index?: number;
	content_block?: Json;
	usage?: Json;
}

const SERVER_SEARCH = { type: "web_search_20250305", name: "web_search", max_uses: 5 };

function client(key: string): Anthropic {
	return new Anthropic({
		apiKey: key,
		baseURL: "http://gateway.test",
		maxRetries: 0,
		fetch: (input, init) => SELF.fetch(input instanceof Request ? input : String(input), init as RequestInit),
	});
}

function post(key: string, body: Json): Promise<Response> {
	return gw("/v1/messages", {
		method: "POST",
		headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
		body: JSON.stringify(body),
	});
}

async function onlyRecord(keyId: string): Promise<UsageRow> {
	const { rows } = await settled(keyId, 1);
	expect(rows).toHaveLength(1);
	return rows[0] as UsageRow;
}

/** The shared test config, with another search backend scenario or none; the worker called directly. */
function direct(search: { scenario?: string; none?: boolean; engine?: string }) {
	const cfg = JSON.parse(env.GATEWAY_CONFIG) as { web_search?: Json; models: Json[] };
	// A model `test/search-<engine>` whose node plays that dev engine scenario.
	if (search.engine) {
		const base = cfg.models.find((m) => m.id === "test/ok") as Json;
		cfg.models.push({ ...base, id: `test/search-${search.engine}`, nodes: [`${env.ENGINE_URL}/s/${search.engine}/v1`] });
	}
	if (search.none) delete cfg.web_search;
	else if (search.scenario && cfg.web_search) cfg.web_search.url = `${env.ENGINE_URL}/s/${search.scenario}/search`;
	const bindings = { ...env, GATEWAY_CONFIG: JSON.stringify(cfg) };
	return async (key: string, body: Json): Promise<Response> => {
		const ctx = createExecutionContext();
		const req = new Request(`${BASE}/v1/messages`, {
			method: "POST",
			headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
			body: JSON.stringify(body),
		}) as Request<unknown, IncomingRequestCfProperties>;
		const res = await worker.fetch(req, bindings, ctx);
		const text = await res.text();
		await waitOnExecutionContext(ctx);
		return new Response(text, { status: res.status, headers: res.headers });
	};
}

describe("the model calls Anthropic's web search server tool", () => {
	it("answers server_tool_use, web_search_tool_result, then the text, and bills both calls and one search (SDK, JSON)", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		const query = "search the tides of Brest";
		const { data: message, response } = await client(key)
			.messages.create({
				model: "test/ok",
				max_tokens: 200,
				messages: [{ role: "user", content: query }],
				tools: [SERVER_SEARCH as Anthropic.WebSearchTool20250305],
			})
			.withResponse();
		expect(response.headers.get("x-venym-web-search")).toBe("ok");

		// The engine: offered the search as a function, then asked again without it, with its result.
		const { searches, chats } = await engineCalls(since);
		expect(searches).toHaveLength(1);
		expect(chats).toHaveLength(2);
		const [first, second] = chats as [Json & { messages: ChatMessage[] }, Json & { messages: ChatMessage[] }];
		expect(toolNames(first)).toEqual(["web_search"]);
		expect(second).not.toHaveProperty("tools");
		expect(String(second.messages.at(-1)?.content)).toMatch(/^Web search results/);

		// The client: Anthropic's blocks.
		expect(message.content.map((b) => b.type)).toEqual(["server_tool_use", "web_search_tool_result", "text"]);
		const [call, result, text] = message.content as [
			Anthropic.ServerToolUseBlock,
			Anthropic.WebSearchToolResultBlock,
			Anthropic.TextBlock,
		];
		expect(call).toMatchObject({ name: "web_search", input: { query } });
		expect(call.id).toMatch(/^srvtoolu_[0-9a-f]{24}$/);
		expect(result.tool_use_id).toBe(call.id);
		const results = result.content as Anthropic.WebSearchResultBlock[];
		expect(results).toHaveLength(6);
		expect(results[0]).toMatchObject({
			type: "web_search_result",
			url: "https://example.com/search-the-tides-of-brest/1",
			page_age: null,
		});
		expect(typeof results[0]?.title).toBe("string");
		expect(results[0]?.encrypted_content).toMatch(/^[A-Za-z0-9+/=]+$/);
		expect(text.text).toBe(`According to [1], ${query} is covered in the results [2].`);
		expect(JSON.stringify(message.content)).not.toContain('tool_use","id":"call_');
		expect(message.stop_reason).toBe("end_turn");

		// Money: both calls' tokens as the engine counted them, and one search, exactly.
		const prompt = devPrompt(first.messages) + devPrompt(second.messages);
		const completion = Math.ceil(JSON.stringify({ query }).length / 8) + text.text.split(/\s+/).length;
		expect(message.usage).toMatchObject({
			input_tokens: prompt,
			output_tokens: completion,
			server_tool_use: { web_search_requests: 1 },
		});
		const cost = prompt * 1_000 + completion * 2_000 + SEARCH;
		expect(Math.round(Number(response.headers.get("x-venym-cost-usd")) * 1e9)).toBe(cost);
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
	});

	it("streams the search blocks first, the answer's blocks after them, and server_tool_use in message_delta", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const query = "search the tides of Roscoff";
		const body = {
			model: "test/ok",
			max_tokens: 200,
			messages: [{ role: "user", content: query }],
			tools: [SERVER_SEARCH],
			stream: true,
		};
		const res = await post(key, body);
		expect(res.status).toBe(200);
		const events = (await readSse(res)).map((d) => JSON.parse(d) as Event);
		const shape = events.filter((e) => e.type !== "ping").map((e) => (e.index === undefined ? e.type : `${e.type}:${e.index}`));
		expect(shape.slice(0, 6)).toEqual([
			"message_start",
			"content_block_start:0",
			"content_block_delta:0",
			"content_block_stop:0",
			"content_block_start:1",
			"content_block_stop:1",
		]);
		expect(shape[6]).toBe("content_block_start:2");
		expect(shape.slice(-3)).toEqual(["content_block_stop:2", "message_delta", "message_stop"]);
		const starts = events.filter((e) => e.type === "content_block_start").map((e) => e.content_block ?? {});
		const call = starts[0] as { id: string };
		expect(call).toEqual({ type: "server_tool_use", id: call.id, name: "web_search", input: {} });
		expect(events.find((e) => e.type === "content_block_delta")).toMatchObject({
			index: 0,
			delta: { type: "input_json_delta", partial_json: JSON.stringify({ query }) },
		});
		expect(starts[1]).toMatchObject({ type: "web_search_tool_result", tool_use_id: call.id });
		expect(starts[1]?.content).toHaveLength(6);
		expect(starts[2]).toEqual({ type: "text", text: "" });
		const delta = events.find((e) => e.type === "message_delta");
		expect(delta?.usage?.server_tool_use).toEqual({ web_search_requests: 1 });
		const record = await onlyRecord(id);
		expect(record).toMatchObject({ status: "completed", search_count: 1 });
		expect(record.cost_nanos).toBe(record.prompt_tokens * 1_000 + record.completion_tokens * 2_000 + SEARCH);
		await expectBooks(id, 5e9);

		// The SDK's stream assembles the same message.
		const { key: other } = await createKey({ balance_usd: 5 });
		const final = await client(other)
			.messages.stream({ ...body, stream: undefined } as unknown as Anthropic.MessageStreamParams)
			.finalMessage();
		expect(final.content.map((b) => b.type)).toEqual(["server_tool_use", "web_search_tool_result", "text"]);
		expect((final.content[0] as Anthropic.ServerToolUseBlock).input).toEqual({ query });
		expect(final.usage.server_tool_use?.web_search_requests).toBe(1);
	});

	it("searches nothing when the model does not call it, and bills one call", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		const res = await post(key, {
			model: "test/ok",
			max_tokens: 50,
			messages: [{ role: "user", content: "hello tides" }],
			tools: [SERVER_SEARCH],
		});
		expect(res.status).toBe(200);
		const message = (await res.json()) as { content: Json[]; usage: Json };
		expect(message.content.map((b) => b.type)).toEqual(["text"]);
		expect(message.usage).not.toHaveProperty("server_tool_use");
		const { searches, chats } = await engineCalls(since);
		expect(searches).toHaveLength(0);
		expect(chats).toHaveLength(1);
		expect(toolNames(chats[0] as Json)).toEqual(["web_search"]);
		const record = await onlyRecord(id);
		expect(record).toMatchObject({
			search_count: 0,
			cost_nanos: record.prompt_tokens * 1_000 + record.completion_tokens * 2_000,
		});
	});

	it("must search when tool_choice names it; beside a custom tool both are offered", async () => {
		const { key } = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		const custom = { name: "exec", description: "run", input_schema: { type: "object", properties: {} } };
		const res = await post(key, {
			model: "test/ok",
			max_tokens: 100,
			messages: [{ role: "user", content: "tides" }],
			tools: [custom, SERVER_SEARCH],
			tool_choice: { type: "tool", name: "web_search" },
		});
		expect(res.status).toBe(200);
		const message = (await res.json()) as { content: Json[] };
		expect(message.content.map((b) => b.type)).toEqual(["server_tool_use", "web_search_tool_result", "text"]);
		const { chats } = await engineCalls(since);
		expect(toolNames(chats[0] as Json)).toEqual(["exec", "web_search"]);
		expect(chats[0]?.tool_choice).toEqual({ type: "function", function: { name: "web_search" } });
		expect(toolNames(chats[1] as Json)).toEqual(["exec"]);
		expect(chats[1]).not.toHaveProperty("tool_choice");
	});

	it("max_uses 0 offers no search: the tool is accepted and the engine never sees it", async () => {
		const { key } = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		const res = await post(key, {
			model: "test/ok",
			max_tokens: 50,
			messages: [{ role: "user", content: "search the tides" }],
			tools: [{ ...SERVER_SEARCH, max_uses: 0, allowed_domains: ["example.com"] }],
		});
		expect(res.status).toBe(200);
		expect(((await res.json()) as { content: Json[] }).content.map((b) => b.type)).toEqual(["text"]);
		const { chats, searches } = await engineCalls(since);
		expect(searches).toHaveLength(0);
		expect(chats[0]).not.toHaveProperty("tools");
	});

	it("accepts a later turn replaying the search blocks, the results given to the engine as the assistant's text", async () => {
		const { key } = await createKey({ balance_usd: 5 });
		const query = "search the tides of Brest";
		const first = await post(key, {
			model: "test/ok",
			max_tokens: 200,
			messages: [{ role: "user", content: query }],
			tools: [SERVER_SEARCH],
		});
		const answer = (await first.json()) as { content: Json[] };
		expect(answer.content).toHaveLength(3);
		const since = await lastEngineId();
		const res = await post(key, {
			model: "test/ok",
			max_tokens: 50,
			tools: [SERVER_SEARCH],
			messages: [
				{ role: "user", content: query },
				{ role: "assistant", content: answer.content },
				{ role: "user", content: "thanks" },
			],
		});
		expect(res.status).toBe(200);
		const { chats } = await engineCalls(since);
		expect(chats).toHaveLength(1);
		const assistant = (chats[0]?.messages ?? []).find((m) => m.role === "assistant") as ChatMessage;
		expect(assistant.content).toMatch(/^Web search results:\n\[1\] .+\nhttps:\/\/example\.com\/search-the-tides-of-brest\/1\n/);
		expect(assistant.content).toContain("According to [1]");
		expect(assistant).not.toHaveProperty("tool_calls");
	});

	it("a failed search is a web_search_tool_result error, not billed as a search", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const call = direct({ scenario: "searchfail" });
		const res = await call(key, {
			model: "test/ok",
			max_tokens: 100,
			messages: [{ role: "user", content: "search the storm" }],
			tools: [SERVER_SEARCH],
		});
		expect(res.status).toBe(200);
		expect(res.headers.get("x-venym-web-search")).toBe("failed");
		const message = (await res.json()) as { content: Json[]; usage: Json };
		expect(message.content.map((b) => b.type)).toEqual(["server_tool_use", "web_search_tool_result", "text"]);
		expect(message.content[1]?.content).toEqual({ type: "web_search_tool_result_error", error_code: "unavailable" });
		expect(message.usage.server_tool_use).toEqual({ web_search_requests: 0 });
		const record = await onlyRecord(id);
		expect(record).toMatchObject({
			search_count: 0,
			cost_nanos: record.prompt_tokens * 1_000 + record.completion_tokens * 2_000,
		});
	});

	it("a stream whose second call fails on every node ends with an error event, no message_stop; the first call and the search billed once", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const call = direct({ engine: "search-failed-answer" });
		const since = await lastEngineId();
		const query = "search the failing streamed tides";
		const res = await call(key, {
			model: "test/search-search-failed-answer",
			max_tokens: 100,
			messages: [{ role: "user", content: query }],
			tools: [SERVER_SEARCH],
			stream: true,
		});
		expect(res.status).toBe(200);
		const events = (await readSse(res)).map((d) => JSON.parse(d) as Event & { error?: Json });
		const shape = events.filter((e) => e.type !== "ping").map((e) => (e.index === undefined ? e.type : `${e.type}:${e.index}`));
		expect(shape).toEqual([
			"message_start",
			"content_block_start:0",
			"content_block_delta:0",
			"content_block_stop:0",
			"content_block_start:1",
			"content_block_stop:1",
			"error",
		]);
		expect(events.at(-1)?.error).toMatchObject({ type: "api_error" });
		const { chats } = await engineCalls(since);
		const prompt = devPrompt(chats[0]?.messages ?? []);
		const completion = Math.ceil(JSON.stringify({ query }).length / 8);
		expect(await onlyRecord(id)).toMatchObject({
			status: "failed",
			search_count: 1,
			prompt_tokens: prompt,
			completion_tokens: completion,
			cost_nanos: prompt * 1_000 + completion * 2_000 + SEARCH,
		});
		await expectBooks(id, 5e9);
	});

	it("a tool name used twice (a custom web_search beside the server tool, or the server tool twice) is a 400, as Anthropic's", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		const custom = { name: "web_search", description: "mine", input_schema: { type: "object", properties: {} } };
		for (const tools of [
			[SERVER_SEARCH, custom],
			[SERVER_SEARCH, { ...SERVER_SEARCH, type: "web_search_20260101" }],
		]) {
			const res = await post(key, {
				model: "test/ok",
				max_tokens: 20,
				messages: [{ role: "user", content: "search the twin tides" }],
				tools,
				tool_choice: { type: "tool", name: "web_search" },
			});
			expect(res.status).toBe(400);
			const body = (await res.json()) as { error: { type: string; message: string } };
			expect(body.error.type).toBe("invalid_request_error");
			expect(body.error.message).toContain("tools[1].name");
		}
		expect(await engineRequestsSince(since)).toEqual([]);
		await expectBooks(id, 5e9);
	});

	it("a streamed round whose engine reasons: the search blocks, then thinking and text, indexes in order", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const call = direct({ engine: "reasoning" });
		const res = await call(key, {
			model: "test/search-reasoning",
			max_tokens: 200,
			messages: [{ role: "user", content: "search the thoughtful tides" }],
			tools: [SERVER_SEARCH],
			stream: true,
		});
		expect(res.status).toBe(200);
		const events = (await readSse(res)).map((d) => JSON.parse(d) as Event);
		const blocks = events.filter((e) => e.type.startsWith("content_block_"));
		// Each block starts, gets its deltas and stops before the next one starts, at the next index.
		let open = -1;
		let next = 0;
		for (const e of blocks) {
			if (e.type === "content_block_start") {
				expect([open, e.index]).toEqual([-1, next]);
				open = e.index as number;
			} else expect(e.index).toBe(open);
			if (e.type === "content_block_stop") {
				open = -1;
				next += 1;
			}
		}
		const kinds = blocks.filter((e) => e.type === "content_block_start").map((e) => e.content_block?.type);
		expect(kinds).toEqual(["server_tool_use", "web_search_tool_result", "thinking", "text"]);
		const deltas = events.filter((e) => e.type === "message_delta");
		expect(deltas).toHaveLength(1);
		expect(events.at(-1)?.type).toBe("message_stop");
		const record = await onlyRecord(id);
		expect(record).toMatchObject({ status: "completed", search_count: 1 });
		// The one usage the stream reports is what was billed: both calls, and the search.
		expect(deltas[0]?.usage).toMatchObject({
			input_tokens: record.prompt_tokens,
			output_tokens: record.completion_tokens,
			server_tool_use: { web_search_requests: 1 },
		});
		await expectBooks(id, 5e9);
	});

	for (const max_uses of [-1, 1.5, "3", 1e12 + 0.5]) {
		it(`max_uses ${JSON.stringify(max_uses)} is a 400 naming tools[0].max_uses, nothing held or searched`, async () => {
			const { id, key } = await createKey({ balance_usd: 5 });
			const since = await lastEngineId();
			const res = await post(key, {
				model: "test/ok",
				max_tokens: 20,
				messages: [{ role: "user", content: "search the bad tides" }],
				tools: [{ ...SERVER_SEARCH, max_uses }],
			});
			expect(res.status).toBe(400);
			const body = (await res.json()) as { error: { type: string; message: string } };
			expect(body.error.type).toBe("invalid_request_error");
			expect(body.error.message).toContain("tools[0].max_uses");
			expect(await engineRequestsSince(since)).toEqual([]);
			await expectBooks(id, 5e9);
		});
	}

	it("without a search backend the server tool stays a 400", async () => {
		const { key } = await createKey({ balance_usd: 5 });
		const call = direct({ none: true });
		const res = await call(key, {
			model: "test/ok",
			max_tokens: 20,
			messages: [{ role: "user", content: "search" }],
			tools: [SERVER_SEARCH],
		});
		expect(res.status).toBe(400);
		const body = (await res.json()) as { type: string; error: { type: string; message: string } };
		expect(body).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
		expect(body.error.message).toMatch(/server tool "web_search_20250305" is not offered.*:online/);
	});
});
