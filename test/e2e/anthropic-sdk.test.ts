// The official Anthropic SDK (@anthropic-ai/sdk) against the gateway under wrangler dev: the
// Messages lane as Claude Code and Anthropic clients use it, unmodified but for the base URL.
import Anthropic, {
	APIError,
	AuthenticationError,
	BadRequestError,
	ContentTooLargeError,
	GatewayTimeoutError,
	InternalServerError,
	NotFoundError,
	OverloadedError,
	PermissionDeniedError,
	RateLimitError,
} from "@anthropic-ai/sdk";
import { describe, expect, it } from "vitest";
import { admin, createKey, gatewayUrl, marker, openaiClient, waitFor } from "./support";

function anthropic(apiKey: string): Anthropic {
	return new Anthropic({ baseURL: gatewayUrl(), apiKey, maxRetries: 0, timeout: 20_000 });
}

const ask = (text: string) => [{ role: "user" as const, content: text }];

interface Row {
	request_id: string;
	prompt_tokens: number;
	completion_tokens: number;
	cost_nanos: number;
	lane: string | null;
}

async function rowsOf(keyId: string, count: number): Promise<Row[]> {
	return waitFor(
		async () => {
			const page = await admin<{ data: Row[] }>(`/usage?key_id=${encodeURIComponent(keyId)}`);
			return page.data.length >= count && page.data;
		},
		15_000,
		`${count} usage records`,
	);
}

describe("@anthropic-ai/sdk against the gateway", () => {
	it("messages.create answers an Anthropic message billed like chat", async () => {
		const key = await createKey({ name: "anthropic-create" });
		const text = marker("create");
		const message = await anthropic(key.key).messages.create({ model: "test/ok", max_tokens: 32_000, messages: ask(text) });
		expect(message).toMatchObject({
			type: "message",
			role: "assistant",
			model: "test/ok",
			content: [{ type: "text", text: `Echo: ${text}` }],
			stop_reason: "end_turn",
		});
		expect(message.usage.input_tokens).toBeGreaterThan(0);
		expect(message.usage.output_tokens).toBeGreaterThan(0);

		// The same tokens through chat cost the same.
		await openaiClient(key.key).chat.completions.create({ model: "test/ok", max_tokens: 32_000, messages: ask(text) });
		const rows = await rowsOf(key.id, 2);
		const byLane = Object.fromEntries(rows.map((r) => [r.lane, r]));
		expect(Object.keys(byLane).sort()).toEqual(["chat", "messages"]);
		const [viaMessages, viaChat] = [byLane.messages as Row, byLane.chat as Row];
		expect(viaMessages.cost_nanos).toBe(viaChat.cost_nanos);
		expect(viaMessages.prompt_tokens).toBe(viaChat.prompt_tokens);
		expect(message.usage).toMatchObject({
			input_tokens: viaMessages.prompt_tokens,
			output_tokens: viaMessages.completion_tokens,
		});
	});

	it("messages.stream() gives finalMessage() and text events", async () => {
		const key = await createKey({ name: "anthropic-stream" });
		const text = marker("stream");
		const stream = anthropic(key.key).messages.stream({ model: "test/ok", max_tokens: 100, messages: ask(text) });
		let streamed = "";
		stream.on("text", (t) => {
			streamed += t;
		});
		const message = await stream.finalMessage();
		expect(streamed).toBe(`Echo: ${text}`);
		expect(message.content).toEqual([{ type: "text", text: `Echo: ${text}` }]);
		expect(message.stop_reason).toBe("end_turn");
		const [row] = await rowsOf(key.id, 1);
		expect(row?.lane).toBe("messages");
		expect(message.usage).toMatchObject({ input_tokens: row?.prompt_tokens, output_tokens: row?.completion_tokens });
	});

	it("completes a tool-use round trip, streamed and not", async () => {
		const client = anthropic((await createKey({ name: "anthropic-tools" })).key);
		const tools: Anthropic.Tool[] = [
			{
				name: "Bash",
				description: "Runs a shell command",
				input_schema: { type: "object", properties: { command: { type: "string" } } },
			},
		];
		const messages: Anthropic.MessageParam[] = ask(marker("tools"));
		const first = await client.messages.stream({ model: "test/tool-loop", max_tokens: 200, tools, messages }).finalMessage();
		expect(first.stop_reason).toBe("tool_use");
		const use = first.content.find((b): b is Anthropic.ToolUseBlock => b.type === "tool_use");
		expect(use).toMatchObject({ name: "Bash", input: { command: "echo hi" } });
		messages.push({ role: "assistant", content: first.content });
		messages.push({ role: "user", content: [{ type: "tool_result", tool_use_id: use?.id as string, content: "hi" }] });
		const second = await client.messages.create({ model: "test/tool-loop", max_tokens: 200, tools, messages });
		expect(second.content).toEqual([{ type: "text", text: "Tool said: hi" }]);
		expect(second.stop_reason).toBe("end_turn");
	});

	it("runs Claude Code's tool search loop: ToolSearch, tool_reference, the deferred tool, its answer", async () => {
		const client = anthropic((await createKey({ name: "anthropic-tool-search" })).key);
		const schema = { type: "object" as const, properties: {} };
		const tools = [
			{ name: "ToolSearch", description: "Fetches deferred tools", input_schema: schema },
			{ name: "CronList", description: "List the scheduled cron jobs", input_schema: schema, defer_loading: true },
			{ name: "DeferredToolPlaceholder", description: "never call this tool", input_schema: schema, defer_loading: true },
		] as Anthropic.Tool[];
		const messages: Anthropic.MessageParam[] = ask(marker("tool-search"));
		const search = await client.messages.create({ model: "test/deferred-tool", max_tokens: 200, tools, messages });
		const find = search.content.find((b): b is Anthropic.ToolUseBlock => b.type === "tool_use");
		expect(find).toMatchObject({ name: "ToolSearch", input: { query: "cron list" } });
		messages.push({ role: "assistant", content: search.content });
		const reference = [{ type: "tool_reference", tool_name: "CronList" }] as unknown as Anthropic.TextBlockParam[];
		messages.push({ role: "user", content: [{ type: "tool_result", tool_use_id: find?.id as string, content: reference }] });
		const call = await client.messages.stream({ model: "test/deferred-tool", max_tokens: 200, tools, messages }).finalMessage();
		const use = call.content.find((b): b is Anthropic.ToolUseBlock => b.type === "tool_use");
		expect(use).toMatchObject({ name: "CronList", input: {} });
		messages.push({ role: "assistant", content: call.content });
		messages.push({ role: "user", content: [{ type: "tool_result", tool_use_id: use?.id as string, content: "No jobs." }] });
		const answer = await client.messages.create({ model: "test/deferred-tool", max_tokens: 200, tools, messages });
		expect(answer.content).toEqual([{ type: "text", text: "Tool said: No jobs." }]);
	});

	it("answers thinking blocks when thinking is enabled", async () => {
		const client = anthropic((await createKey({ name: "anthropic-thinking" })).key);
		const params = {
			model: "test/ok",
			max_tokens: 5000,
			thinking: { type: "enabled" as const, budget_tokens: 2048 },
			messages: ask(marker("think")),
		};
		const message = await client.messages.create(params);
		expect(message.content.map((b) => b.type)).toEqual(["thinking", "text"]);
		const streamed = await client.messages.stream(params).finalMessage();
		expect(streamed.content[0]).toMatchObject({
			type: "thinking",
			thinking: "Thinking about it.",
			signature: expect.any(String),
		});
	});

	it("countTokens counts the prompt and costs nothing", async () => {
		const key = await createKey({ name: "anthropic-count" });
		const counted = await anthropic(key.key).messages.countTokens({
			model: "test/ok",
			system: "Be brief.",
			messages: ask("count me"),
		});
		expect(counted.input_tokens).toBeGreaterThan(0);
		const info = await admin<{ spent_usd: number; held_usd: number }>(`/keys/${key.id}`);
		expect(info).toMatchObject({ spent_usd: 0, held_usd: 0 });
	});

	it("throws the SDK's error class for every error the gateway answers", async () => {
		const key = await createKey({ name: "anthropic-errors", rpm: 30 });
		const client = anthropic(key.key);
		const call = (model: string, extra: Record<string, unknown> = {}) =>
			client.messages.create({ model, max_tokens: 20, messages: ask(marker("err")), ...extra });
		const failure = async (p: Promise<unknown>) => {
			const err = await p.then(
				() => null,
				(e: unknown) => e,
			);
			expect(err).toBeInstanceOf(APIError);
			return err as APIError;
		};

		const bad = await failure(call("test/ok", { temperature: "hot" }));
		expect(bad).toBeInstanceOf(BadRequestError);
		expect((bad.error as { error: { type: string } }).error.type).toBe("invalid_request_error");
		expect(bad.requestID).toMatch(/^req_/);
		expect(
			await failure(anthropic("vk-wrong").messages.create({ model: "test/ok", max_tokens: 5, messages: ask("x") })),
		).toBeInstanceOf(AuthenticationError);
		const broke = await failure(
			anthropic((await createKey({ name: "anthropic-402", balance_usd: 0 })).key).messages.create({
				model: "test/ok",
				max_tokens: 5,
				messages: ask("x"),
			}),
		);
		expect(broke.status).toBe(402);
		expect((broke.error as { error: { type: string } }).error.type).toBe("billing_error");
		const scoped = anthropic((await createKey({ name: "anthropic-403", allowed_models: ["test/slow"] })).key);
		expect(await failure(scoped.messages.create({ model: "test/ok", max_tokens: 5, messages: ask("x") }))).toBeInstanceOf(
			PermissionDeniedError,
		);
		expect(await failure(call("test/nope"))).toBeInstanceOf(NotFoundError);
		expect(await failure(call("test/ok", { system: "x".repeat(5 * 1024 * 1024) }))).toBeInstanceOf(ContentTooLargeError);
		expect(await failure(call("test/all-down"))).toBeInstanceOf(InternalServerError);
		expect(await failure(call("test/all-hang"))).toBeInstanceOf(GatewayTimeoutError);
		expect(await failure(call("test/all-busy"))).toBeInstanceOf(OverloadedError);

		const limited = anthropic((await createKey({ name: "anthropic-429", rpm: 1 })).key);
		await limited.messages.create({ model: "test/ok", max_tokens: 5, messages: ask("x") });
		const throttled = await failure(limited.messages.create({ model: "test/ok", max_tokens: 5, messages: ask("x") }));
		expect(throttled).toBeInstanceOf(RateLimitError);
		expect(Number(throttled.headers?.get("retry-after"))).toBeGreaterThan(0);
	});

	it("throws from a stream whose engine fails midway, with no clean end", async () => {
		const client = anthropic((await createKey({ name: "anthropic-midstream" })).key);
		const stream = client.messages.stream({ model: "test/midstream", max_tokens: 100, messages: ask(marker("mid")) });
		const err = await stream.finalMessage().then(
			() => null,
			(e: unknown) => e,
		);
		expect(err).toBeInstanceOf(APIError);
		expect((err as APIError).error).toMatchObject({ type: "error", error: { type: "api_error" } });
	});

	// Claude Code's WebSearch: a separate call whose only tool is Anthropic's web search server tool.
	it("serves the web_search server tool: server_tool_use and web_search_tool_result, then the answer", async () => {
		const client = anthropic((await createKey({ name: "anthropic-web-search", balance_usd: 50 })).key);
		const tools: Anthropic.ToolUnion[] = [{ type: "web_search_20250305", name: "web_search", max_uses: 8 }];
		const query = "Please search for volcano eruptions";
		const created = await client.messages.create({ model: "test/ok", max_tokens: 500, messages: ask(query), tools });
		const streamed = await client.messages
			.stream({ model: "test/ok", max_tokens: 500, messages: ask(query), tools })
			.finalMessage();
		for (const message of [created, streamed]) {
			expect(message.content.map((b) => b.type)).toEqual(["server_tool_use", "web_search_tool_result", "text"]);
			const [call, result, text] = message.content as [
				Anthropic.ServerToolUseBlock,
				Anthropic.WebSearchToolResultBlock,
				Anthropic.TextBlock,
			];
			expect(call).toMatchObject({ name: "web_search", input: { query } });
			expect(result.tool_use_id).toBe(call.id);
			const results = result.content as Anthropic.WebSearchResultBlock[];
			expect(results.length).toBeGreaterThan(0);
			expect(results[0]?.url).toMatch(/^https:\/\//);
			expect(text.text).toContain("[1]");
			expect(message.usage.server_tool_use?.web_search_requests).toBe(1);
		}
		// Without a search in the prompt: the tool is offered, the model answers without it.
		const plain = await client.messages.create({ model: "test/ok", max_tokens: 50, messages: ask("Say hello"), tools });
		expect(plain.content.map((b) => b.type)).toEqual(["text"]);
	});
});
