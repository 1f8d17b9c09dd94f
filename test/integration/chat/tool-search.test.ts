/**
 * Deferred tools on chat completions and Responses (openai-node through the worker): a tool sent
 * with `defer_loading: true` is withheld from the engine, which is offered `venym_tool_search`;
 * when it calls it, the gateway searches the deferred tools and offers those found in a second
 * engine call of the same request. The client never sees the search; the hold covers both calls,
 * and the request settles once with both calls' tokens. The engine is the development engine's
 * `deferred-tool` scenario: it searches "cron list", then calls CronList.
 */
import { SELF } from "cloudflare:test";
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { offerToolSearch, toolSearchRoundSize, withholdDeferred } from "../../../src/chat/tool-search";
import { addSizes, measureChatPrompt } from "../../../src/estimate";
import { bound, IN, info, OUT, settled } from "../../support/billing";
import { chat, createKey, lastEngineId } from "../../support/gateway";
import { devPrompt, type EngineMessage, engineCalls, toolNames } from "../../support/search-round";

type Json = Record<string, unknown>;

function client(key: string): OpenAI {
	return new OpenAI({
		apiKey: key,
		baseURL: "http://gateway.test/v1",
		maxRetries: 0,
		fetch: (input, init) => SELF.fetch(input instanceof Request ? input : String(input), init as RequestInit),
	});
}

const params = { type: "object", properties: {} };
/** A tool the engine always sees, and three deferred ones (two of them match "cron list"). */
function tools(): Json[] {
	return [
		{ type: "function", function: { name: "Read", description: "Read a file", parameters: params } },
		{
			type: "function",
			function: { name: "CronList", description: "List the scheduled cron jobs", parameters: params },
			defer_loading: true,
		},
		{
			type: "function",
			function: { name: "CronCreate", description: "Schedule a cron job", parameters: params, defer_loading: true },
		},
		{
			type: "function",
			function: { name: "WebFetch", description: "Fetch a web page", parameters: params },
			defer_loading: true,
		},
	];
}

function ask(): Json[] {
	return [{ role: "user", content: `list my cron jobs ${crypto.randomUUID().slice(0, 8)}` }];
}

type EngineBody = Json & { messages: EngineMessage[] };

describe("chat completions: deferred tools and venym_tool_search", () => {
	it("withholds deferred tools, searches them when the engine asks, and offers those found in the same request (SDK)", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		const completion = await client(key).chat.completions.create({
			model: "test/deferred-tool",
			max_tokens: 100,
			messages: ask() as unknown as OpenAI.ChatCompletionMessageParam[],
			tools: tools() as unknown as OpenAI.ChatCompletionTool[],
		});

		const { chats } = await engineCalls(since);
		expect(chats).toHaveLength(2);
		const [first, second] = chats as [EngineBody, EngineBody];
		// The first call: the tool always offered, and the search; no defer_loading reaches an engine.
		expect(toolNames(first)).toEqual(["Read", "venym_tool_search"]);
		expect(JSON.stringify(first)).not.toContain("defer_loading");
		// The second: the tools found, the search's call and result at the end of the conversation.
		expect(toolNames(second)).toEqual(["Read", "CronList", "CronCreate"]);
		const [call, result] = second.messages.slice(-2);
		expect(call?.tool_calls?.[0]?.function).toEqual({ name: "venym_tool_search", arguments: '{"query":"cron list"}' });
		expect(result).toMatchObject({ role: "tool", content: "Tools loaded, callable now: CronList, CronCreate" });

		// The client: the deferred tool's call, never the gateway's search.
		const message = completion.choices[0]?.message;
		expect(message?.tool_calls?.map((c) => (c as { function: { name: string } }).function.name)).toEqual(["CronList"]);
		expect(completion.choices[0]?.finish_reason).toBe("tool_calls");
		expect(JSON.stringify(completion)).not.toContain("venym_tool_search");

		// Money: one record with both calls' tokens, no search charged.
		const prompt = devPrompt(first.messages) + devPrompt(second.messages);
		expect(completion.usage?.prompt_tokens).toBe(prompt);
		const { rows } = await settled(id, 1);
		expect(rows).toHaveLength(1);
		expect(rows[0]).toMatchObject({ status: "completed", prompt_tokens: prompt, search_count: 0 });
	});

	it("streams the deferred tool's call, the search never shown, and holds both engine calls", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		const body = { model: "test/deferred-tool", max_tokens: 100, messages: ask(), tools: tools() };
		const res = await chat(key, { ...body, stream: true });
		expect(res.status).toBe(200);
		const reader = (res.body as ReadableStream<Uint8Array>).getReader();
		const firstBytes = new TextDecoder().decode((await reader.read()).value);
		const held = (await info(id)).heldNanos;
		let rest = "";
		for (let r = await reader.read(); !r.done; r = await reader.read()) rest += new TextDecoder().decode(r.value);
		const frames = `${firstBytes}${rest}`;
		expect(frames).toContain('"name":"CronList"');
		expect(frames).not.toContain("venym_tool_search");
		expect(frames.trim().endsWith("data: [DONE]")).toBe(true);

		// The hold: both calls' prompt at its bound (the round's call, result and every deferred
		// tool's definition included) and both calls' output.
		const offered = { ...body, tools: tools() };
		const deferred = withholdDeferred(offered, false);
		offerToolSearch(offered, deferred);
		const heldSize = addSizes(measureChatPrompt(offered).size, toolSearchRoundSize(deferred));
		expect(held).toBe(2 * (bound(heldSize) * IN + 100 * OUT));
		const { chats } = await engineCalls(since);
		expect(chats).toHaveLength(2);
		const { rows } = await settled(id, 1);
		expect(rows).toHaveLength(1);
		expect(rows[0]?.cost_nanos).toBeLessThanOrEqual(held);
	});

	it("offers a deferred tool the conversation already called from the start; its answer takes one call", async () => {
		const { key } = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		const messages = [
			...ask(),
			{
				role: "assistant",
				content: null,
				tool_calls: [{ id: "c1", type: "function", function: { name: "CronList", arguments: "{}" } }],
			},
			{ role: "tool", tool_call_id: "c1", content: "No scheduled jobs." },
		];
		const res = await chat(key, { model: "test/deferred-tool", max_tokens: 100, messages, tools: tools() });
		expect(res.status).toBe(200);
		const answer = (await res.json()) as { choices: Array<{ message: { content: string } }> };
		expect(answer.choices[0]?.message.content).toBe("Tool said: No scheduled jobs.");
		const { chats } = await engineCalls(since);
		expect(chats).toHaveLength(1);
		// CronList loaded; the other two still deferred behind the search.
		expect(toolNames(chats[0] as Json)).toEqual(["Read", "CronList", "venym_tool_search"]);
	});

	it("offers every tool, and no search, when the request calls no tool", async () => {
		const { key } = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		const res = await chat(key, {
			model: "test/deferred-tool",
			max_tokens: 100,
			messages: ask(),
			tools: tools(),
			tool_choice: "none",
		});
		expect(res.status).toBe(200);
		const { chats } = await engineCalls(since);
		expect(toolNames(chats[0] as Json)).toEqual(["Read", "CronList", "CronCreate", "WebFetch"]);
		expect(JSON.stringify(chats[0])).not.toContain("defer_loading");
	});

	it("refuses a defer_loading that is not a boolean with a 400 naming it, before anything is held", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const bad = tools();
		(bad[1] as Json).defer_loading = "yes";
		const res = await chat(key, { model: "test/deferred-tool", max_tokens: 100, messages: ask(), tools: bad });
		expect(res.status).toBe(400);
		const body = (await res.json()) as { error: { param: string; message: string } };
		expect(body.error.param).toBe("tools[1].defer_loading");
		expect((await info(id)).heldNanos).toBe(0);
	});

	it("names the search venym_tool_search_2 when a client tool has its name", async () => {
		const { key } = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		const own = { type: "function", function: { name: "venym_tool_search", description: "mine", parameters: params } };
		const res = await chat(key, { model: "test/deferred-tool", max_tokens: 100, messages: ask(), tools: [own, ...tools()] });
		expect(res.status).toBe(200);
		const { chats } = await engineCalls(since);
		expect(toolNames(chats[0] as Json)).toEqual(["venym_tool_search", "Read", "venym_tool_search_2"]);
	});
});

describe("Responses: deferred function tools and venym_tool_search", () => {
	const responseTools = () =>
		tools().map((t) => {
			const fn = t.function as Json;
			const { defer_loading: inner, ...rest } = fn;
			return { type: "function", ...rest, ...(t.defer_loading || inner ? { defer_loading: true } : {}) };
		});

	it("answers with the found tool's function_call, the search not shown, and echoes defer_loading (SDK)", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		const response = await client(key).responses.create({
			model: "test/deferred-tool",
			max_output_tokens: 100,
			input: `list my cron jobs ${crypto.randomUUID().slice(0, 8)}`,
			tools: responseTools() as unknown as OpenAI.Responses.FunctionTool[],
		});
		const { chats } = await engineCalls(since);
		expect(chats).toHaveLength(2);
		expect(toolNames(chats[0] as Json)).toEqual(["Read", "venym_tool_search"]);
		expect(toolNames(chats[1] as Json)).toEqual(["Read", "CronList", "CronCreate"]);
		expect(response.output.map((o) => o.type)).toEqual(["function_call"]);
		expect(response.output[0]).toMatchObject({ type: "function_call", name: "CronList" });
		expect(JSON.stringify(response)).not.toContain("venym_tool_search");
		expect(response.tools[1]).toMatchObject({ name: "CronList", defer_loading: true });
		const { rows } = await settled(id, 1);
		expect(rows).toHaveLength(1);
	});

	it("streams the function_call events of the found tool", async () => {
		const { key } = await createKey({ balance_usd: 5 });
		const stream = await client(key).responses.create({
			model: "test/deferred-tool",
			max_output_tokens: 100,
			input: `list my cron jobs ${crypto.randomUUID().slice(0, 8)}`,
			tools: responseTools() as unknown as OpenAI.Responses.FunctionTool[],
			stream: true,
		});
		const events: OpenAI.Responses.ResponseStreamEvent[] = [];
		for await (const e of stream) events.push(e);
		const done = events.find((e) => e.type === "response.completed") as OpenAI.Responses.ResponseCompletedEvent;
		expect(done.response.output.map((o) => (o as { name?: string }).name)).toEqual(["CronList"]);
		expect(JSON.stringify(events)).not.toContain("venym_tool_search");
	});
});
