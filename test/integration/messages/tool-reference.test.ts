/**
 * Anthropic's deferred tools on the Messages lane (the Anthropic SDK through the worker), as
 * Claude Code 2.1.x uses them by default: a tool with `defer_loading` is withheld from the engine
 * until a `tool_reference` block (its ToolSearch tool's answer) names it; the reference reaches the
 * engine as text; a reference to no tool of the request is a 400 naming it; count_tokens alike.
 * And Claude Code's recorded round trip (test/fixtures/claude-code-tool-search.json) replayed.
 */
import { SELF } from "cloudflare:test";
import Anthropic from "@anthropic-ai/sdk";
import { describe, expect, it } from "vitest";
import fixture from "../../fixtures/claude-code-tool-search.json";
import { settled } from "../../support/billing";
import { createKey, engineRequestsSince, gw, lastEngineId } from "../../support/gateway";
import { type EngineMessage, engineCalls, toolNames } from "../../support/search-round";

type Json = Record<string, unknown>;

function client(key: string): Anthropic {
	return new Anthropic({
		apiKey: key,
		baseURL: "http://gateway.test",
		maxRetries: 0,
		fetch: (input, init) => SELF.fetch(input instanceof Request ? input : String(input), init as RequestInit),
	});
}

function post(key: string, body: Json, path = "/v1/messages"): Promise<Response> {
	return gw(path, {
		method: "POST",
		headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
		body: JSON.stringify(body),
	});
}

const schema = { type: "object" as const, properties: {} };
/** Claude Code's shape: tools always offered, its ToolSearch, deferred tools and its placeholder. */
const TOOLS = [
	{ name: "Read", description: "Read a file", input_schema: schema },
	{ name: "ToolSearch", description: "Fetches deferred tools", input_schema: schema },
	{ name: "CronList", description: "List the scheduled cron jobs", input_schema: schema, defer_loading: true },
	{ name: "CronCreate", description: "Schedule a cron job", input_schema: schema, defer_loading: true },
	{ name: "DeferredToolPlaceholder", description: "never call this tool", input_schema: schema, defer_loading: true },
] as Anthropic.Tool[];

function ask(): Anthropic.MessageParam {
	return { role: "user", content: `list my cron jobs ${crypto.randomUUID().slice(0, 8)}` };
}

/** The conversation after Claude Code's ToolSearch answered with references to `names`. */
function searched(names: string[]): Anthropic.MessageParam[] {
	return [
		ask(),
		{ role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "ToolSearch", input: { query: "cron list" } }] },
		{
			role: "user",
			content: [
				{
					type: "tool_result",
					tool_use_id: "toolu_1",
					content: names.map((tool_name) => ({ type: "tool_reference", tool_name })),
				},
			] as unknown as Anthropic.ToolResultBlockParam[],
		},
	];
}

describe("deferred tools and tool_reference on the Messages lane", () => {
	it("withholds every deferred tool until a reference names it: the engine searches first", async () => {
		const { key } = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		const message = await client(key).messages.create({
			model: "test/deferred-tool",
			max_tokens: 200,
			tools: TOOLS,
			messages: [ask()],
		});
		const { chats } = await engineCalls(since);
		expect(chats).toHaveLength(1);
		expect(toolNames(chats[0] as Json)).toEqual(["Read", "ToolSearch"]);
		expect(message.content).toMatchObject([{ type: "tool_use", name: "ToolSearch", input: { query: "cron list" } }]);
	});

	it("offers a deferred tool that tool_choice names, or that the conversation already called, without a reference", async () => {
		const { key } = await createKey({ balance_usd: 5 });
		let since = await lastEngineId();
		await client(key).messages.create({
			model: "test/deferred-tool",
			max_tokens: 200,
			tools: TOOLS,
			tool_choice: { type: "tool", name: "CronCreate" },
			messages: [ask()],
		});
		expect(toolNames((await engineCalls(since)).chats[0] as Json)).toEqual(["Read", "ToolSearch", "CronCreate"]);
		since = await lastEngineId();
		await client(key).messages.create({
			model: "test/deferred-tool",
			max_tokens: 200,
			tools: TOOLS,
			messages: [
				ask(),
				{ role: "assistant", content: [{ type: "tool_use", id: "toolu_9", name: "CronList", input: {} }] },
				{ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_9", content: "No scheduled jobs." }] },
			],
		});
		expect(toolNames((await engineCalls(since)).chats[0] as Json)).toEqual(["Read", "ToolSearch", "CronList"]);
	});

	it("offers the referenced tools from that turn on, the reference read as text; the model calls one (SDK, stream)", async () => {
		const { key } = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		const message = await client(key)
			.messages.stream({
				model: "test/deferred-tool",
				max_tokens: 200,
				tools: TOOLS,
				messages: searched(["CronList", "CronCreate"]),
			})
			.finalMessage();
		const { chats } = await engineCalls(since);
		expect(chats).toHaveLength(1);
		const body = chats[0] as Json & { messages: EngineMessage[] };
		expect(toolNames(body)).toEqual(["Read", "ToolSearch", "CronList", "CronCreate"]);
		expect(JSON.stringify(body)).not.toContain("defer_loading");
		expect(body.messages.at(-1)).toMatchObject({
			role: "tool",
			tool_call_id: "toolu_1",
			content: "Tool loaded: CronList\nTool loaded: CronCreate",
		});
		expect(message.content).toMatchObject([{ type: "tool_use", name: "CronList", input: {} }]);
		expect(message.stop_reason).toBe("tool_use");
	});

	it("answers a reference to no tool of the request 400, naming it, in Anthropic's shape (SDK)", async () => {
		const { key } = await createKey({ balance_usd: 5 });
		const err = await client(key)
			.messages.create({ model: "test/deferred-tool", max_tokens: 200, tools: TOOLS, messages: searched(["CronList", "Nope"]) })
			.catch((e: unknown) => e);
		expect(err).toBeInstanceOf(Anthropic.BadRequestError);
		const body = (err as InstanceType<typeof Anthropic.BadRequestError>).error as {
			type: string;
			error: { type: string; message: string };
		};
		expect(body.type).toBe("error");
		expect(body.error.type).toBe("invalid_request_error");
		expect(body.error.message).toContain("'messages[2].content[0].content[1].tool_name'");
		expect(body.error.message).toContain("'Nope'");
	});

	it("serves Anthropic's server tool search with the gateway's: the tool found is called in the same request (SDK)", async () => {
		const { id, key } = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		const tools = [
			{ type: "tool_search_tool_regex_20251119", name: "tool_search_tool_regex" },
			...TOOLS.filter((t) => t.name !== "ToolSearch"),
		] as unknown as Anthropic.Tool[];
		const message = await client(key).messages.create({ model: "test/deferred-tool", max_tokens: 200, tools, messages: [ask()] });
		const { chats } = await engineCalls(since);
		expect(chats).toHaveLength(2);
		expect(toolNames(chats[0] as Json)).toEqual(["Read", "venym_tool_search"]);
		expect(toolNames(chats[1] as Json)).toEqual(["Read", "CronList", "CronCreate"]);
		expect(message.content).toMatchObject([{ type: "tool_use", name: "CronList" }]);
		expect(JSON.stringify(message)).not.toContain("venym_tool_search");
		const { rows } = await settled(id, 1);
		expect(rows).toHaveLength(1);
	});

	it("refuses a defer_loading that is not a boolean with a 400 naming it", async () => {
		const { key } = await createKey({ balance_usd: 5 });
		const tools = [{ ...TOOLS[0], defer_loading: "yes" }];
		const res = await post(key, { model: "test/deferred-tool", max_tokens: 200, tools, messages: [ask()] });
		expect(res.status).toBe(400);
		expect(((await res.json()) as { error: { message: string } }).error.message).toContain("tools[0].defer_loading");
	});

	it("count_tokens takes tool_reference blocks, counts only the tools offered, and refuses an unknown reference", async () => {
		const { key } = await createKey({ balance_usd: 5 });
		const since = await lastEngineId();
		const counted = await client(key).messages.countTokens({
			model: "test/deferred-tool",
			tools: TOOLS,
			messages: searched(["CronList"]),
		});
		expect(counted.input_tokens).toBeGreaterThan(0);
		const tokenize = (await engineRequestsSince(since)).filter((r) => r.path.endsWith("/tokenize"));
		expect(tokenize).toHaveLength(1);
		expect(toolNames(tokenize[0]?.body as Json)).toEqual(["Read", "ToolSearch", "CronList"]);
		const res = await post(
			key,
			{ model: "test/deferred-tool", tools: TOOLS, messages: searched(["Nope"]) },
			"/v1/messages/count_tokens",
		);
		expect(res.status).toBe(400);
		expect(((await res.json()) as { error: { message: string } }).error.message).toContain("'Nope'");
	});
});

interface Recorded {
	url: string;
	body: Json & { tools?: Array<{ name: string; defer_loading?: boolean }>; messages: unknown[] };
}

describe("Claude Code's recorded round trip with its defaults (test/fixtures/claude-code-tool-search.json)", () => {
	const legs = Object.entries(fixture.legs) as Array<[string, { requests: Recorded[] }]>;
	it.each(legs)(
		"the %s leg: every request answers 200, the engine offered what was referenced and no placeholder",
		async (_, leg) => {
			const { key } = await createKey({ balance_usd: 5 });
			for (const recorded of leg.requests) {
				const since = await lastEngineId();
				const res = await gw(recorded.url, {
					method: "POST",
					headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
					body: JSON.stringify({ ...recorded.body, model: "test/deferred-tool" }),
				});
				const text = await res.text();
				expect(res.status, text.slice(0, 300)).toBe(200);
				const { chats } = await engineCalls(since);
				const offered = toolNames(chats[0] as Json);
				const referenced = JSON.stringify(recorded.body.messages).match(/"tool_reference","tool_name":"\w+"/g) ?? [];
				for (const t of recorded.body.tools ?? []) {
					if (!t.name || t.name === "web_search") continue;
					const shown = !t.defer_loading || referenced.some((r) => r.endsWith(`"${t.name}"`));
					expect(offered.includes(t.name), t.name).toBe(shown);
				}
				expect(offered).not.toContain("DeferredToolPlaceholder");
			}
		},
	);
});
