/**
 * Attack on the Anthropic Messages lane (`/v1/messages`, `/v1/messages/count_tokens`), as a
 * hostile or merely unusual client. Each test is one confirmed finding with its exact
 * reproduction, and fails until the lane is fixed.
 */
import { describe, expect, it } from "vitest";
import { fleetConfig, gatewayWith, model, ownEngineUrl } from "../support/fleet";
import { createKey, engineRequests, gw } from "../support/gateway";

type Json = Record<string, unknown>;

function marker(): string {
	return `m${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
}

function messages(key: string, body: Json, path = "/v1/messages"): Promise<Response> {
	return gw(path, {
		method: "POST",
		headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
		body: JSON.stringify(body),
	});
}

function countTokens(key: string, body: Json): Promise<Response> {
	return messages(key, body, "/v1/messages/count_tokens");
}

interface AnthropicError {
	type: string;
	error: { type: string; message: string };
}

interface Event {
	event: string;
	data: Json;
}

function eventsIn(text: string): Event[] {
	return text
		.split("\n\n")
		.filter((f) => f.trim())
		.map((f) => {
			const lines = f.split("\n");
			const event = (lines.find((l) => l.startsWith("event: ")) ?? "").slice(7);
			return { event, data: JSON.parse((lines.find((l) => l.startsWith("data: ")) ?? "").slice(6)) as Json };
		});
}

/** A lone (unpaired) UTF-16 surrogate. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

describe("Messages attack: money", () => {
	it("count_tokens is under the key's rate limit: it makes the engine tokenize, for free", async () => {
		// A key allowed one request a minute. Each count_tokens call is a POST {node}/tokenize with
		// the client's whole body (up to max_body_bytes), so unlimited calls are free engine work.
		const key = await createKey({ name: "h10-count-rpm", balance_usd: 10, rpm: 1 });
		const statuses: number[] = [];
		const m = marker();
		let refused: AnthropicError | undefined;
		for (let i = 0; i < 3; i++) {
			const res = await countTokens(key.key, { model: "test/ok", messages: [{ role: "user", content: `count ${m} ${i}` }] });
			statuses.push(res.status);
			if (res.status === 429) refused = (await res.json()) as AnthropicError;
			else await res.body?.cancel();
		}
		// Before the fix: [200, 200, 200] (and a /v1/messages call afterwards is still admitted).
		expect(statuses).toEqual([200, 429, 429]);
		expect(refused?.error.type).toBe("rate_limit_error");
		// The refused calls never reached the engine's tokenizer; the minute's one request is used up.
		const asked = (await engineRequests({ contains: m })).filter((r) => r.path === "/tokenize");
		expect(asked.length).toBeLessThanOrEqual(1);
		const after = await messages(key.key, { model: "test/ok", max_tokens: 4, messages: [{ role: "user", content: `hi ${m}` }] });
		expect(after.status).toBe(429);
		await after.body?.cancel();
	});

	it("count_tokens refuses an embeddings model, as /v1/messages does, without asking its node", async () => {
		const key = await createKey({ name: "h10-count-embed", balance_usd: 10 });
		const m = marker();
		const created = await messages(key.key, { model: "test/embed", max_tokens: 4, messages: [{ role: "user", content: m }] });
		expect(created.status).toBe(400);
		await created.body?.cancel();
		const res = await countTokens(key.key, { model: "test/embed", messages: [{ role: "user", content: `count ${m}` }] });
		const text = await res.text();
		// Before the fix: 200 {"input_tokens":…}, counted by the embeddings node's /tokenize.
		expect(res.status, text).toBe(400);
		expect((JSON.parse(text) as AnthropicError).error.type).toBe("invalid_request_error");
		expect((await engineRequests({ contains: m })).filter((r) => r.path === "/tokenize")).toEqual([]);
	});
});

describe("Messages attack: input", () => {
	it("an empty user turn is a 400, not a billed call with the user's turn gone", async () => {
		const key = await createKey({ name: "h10-empty", balance_usd: 10 });
		const m = marker();
		// `content: []` translates to no chat message at all: the engine got only the system prompt
		// and the key paid for the answer. Anthropic refuses empty content.
		const res = await messages(key.key, {
			model: "test/ok",
			max_tokens: 20,
			system: `sys ${m}`,
			messages: [{ role: "user", content: [] }],
		});
		const text = await res.text();
		expect(res.status, text).toBe(400);
		expect((JSON.parse(text) as AnthropicError).error).toMatchObject({ type: "invalid_request_error" });
		expect((JSON.parse(text) as AnthropicError).error.message).toContain("messages[0].content");
		expect(await engineRequests({ contains: m })).toEqual([]);
	});

	it("too many stop_sequences: the 400 names 'stop_sequences', not chat's 'stop'", async () => {
		const key = await createKey({ name: "h10-stop", balance_usd: 10 });
		const res = await messages(key.key, {
			model: "test/ok",
			max_tokens: 20,
			stop_sequences: ["a1", "b2", "c3", "d4", "e5"],
			messages: [{ role: "user", content: `hi ${marker()}` }],
		});
		const text = await res.text();
		// Before the fix: 400 "Invalid value for 'stop': expected a string or an array of at most 4 strings."
		// (Anthropic takes more than four; accepting them is a fix too.)
		const named = res.status === 400 && (JSON.parse(text) as AnthropicError).error.message.includes("stop_sequences");
		expect(res.status === 200 || named, text).toBe(true);
	});

	it("a tool_result may carry a document block (Anthropic allows text, image, document)", async () => {
		const key = await createKey({ name: "h10-doc", balance_usd: 10 });
		const m = marker();
		const res = await messages(key.key, {
			model: "test/ok",
			max_tokens: 20,
			messages: [
				{ role: "user", content: "read it" },
				{ role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "Read", input: { path: "a.txt" } }] },
				{
					role: "user",
					content: [
						{
							type: "tool_result",
							tool_use_id: "toolu_1",
							content: [{ type: "document", source: { type: "text", media_type: "text/plain", data: `doc ${m}` } }],
						},
					],
				},
			],
		});
		const text = await res.text();
		// Before the fix: 400 "Invalid value for 'messages[2].content[0].content': Invalid input".
		expect(res.status, text).toBe(200);
		const [call] = (await engineRequests({ contains: m })).filter((r) => r.path.endsWith("/chat/completions"));
		expect(call?.body?.messages).toContainEqual(expect.objectContaining({ role: "tool", tool_call_id: "toolu_1" }));
		expect(JSON.stringify(call?.body?.messages)).toContain(`doc ${m}`);
	});

	it("a user's search_result block reaches the model, or is refused, never silently dropped", async () => {
		const key = await createKey({ name: "h10-search-result", balance_usd: 10 });
		const m = marker();
		const res = await messages(key.key, {
			model: "test/ok",
			max_tokens: 20,
			messages: [
				{
					role: "user",
					content: [
						{
							type: "search_result",
							source: "https://example.com/a",
							title: "A",
							content: [{ type: "text", text: `fact ${m}` }],
						},
						{ type: "text", text: `question ${m}` },
					],
				},
			],
		});
		const text = await res.text();
		expect(res.status, text).toBe(200);
		const [call] = (await engineRequests({ contains: `question ${m}` })).filter((r) => r.path.endsWith("/chat/completions"));
		// Before the fix: the engine got only "question …"; the user's RAG content was dropped (and not billed).
		expect(JSON.stringify(call?.body?.messages)).toContain(`fact ${m}`);
	});

	it("metadata.user_id is cut to 256 without splitting a surrogate pair", async () => {
		const key = await createKey({ name: "h10-user-id", balance_usd: 10 });
		const m = marker();
		const res = await messages(key.key, {
			model: "test/ok",
			max_tokens: 10,
			metadata: { user_id: `${"a".repeat(255)}😀` },
			messages: [{ role: "user", content: `surrogate ${m}` }],
		});
		expect(res.status).toBe(200);
		await res.body?.cancel();
		const [call] = (await engineRequests({ contains: m })).filter((r) => r.path.endsWith("/chat/completions"));
		const user = String(call?.body?.user);
		// Before the fix: `slice(0, 256)` leaves a lone \uD83D at the end of `user` (sent to the
		// engine and used as the prompt-cache affinity key).
		expect(LONE_SURROGATE.test(user), JSON.stringify(user.slice(-2))).toBe(false);
	});
});

describe("Messages attack: streams", () => {
	it("a streamed tool_use's input_json_delta assembles to the JSON object the non-stream answer gives", async () => {
		const url = ownEngineUrl("h10-brokentool");
		// The engine ends its tool-call arguments without their closing `"}` (a weak model); the
		// model has no tool_call_repair.
		const g = gatewayWith(fleetConfig([model("x/broken", [`${url}/s/brokentool/v1`], { capabilities: ["tools"] })]));
		const key = await createKey({ name: "h10-brokentool", balance_usd: 10 });
		const body = {
			model: "x/broken",
			max_tokens: 100,
			tools: [{ name: "Bash", input_schema: { type: "object", properties: { command: { type: "string" } } } }],
			tool_choice: { type: "any" },
			messages: [{ role: "user", content: `go ${marker()}` }],
		};
		const plain = await g.post(key.key, "/v1/messages", body);
		expect(plain.res.status, plain.text).toBe(200);
		const input = ((plain.json as { content: Json[] }).content.find((b) => b.type === "tool_use") as Json).input;
		const streamed = await g.post(key.key, "/v1/messages", { ...body, stream: true });
		expect(streamed.res.status).toBe(200);
		const json = eventsIn(streamed.text)
			.filter((e) => e.event === "content_block_delta")
			.map((e) => e.data.delta as { type: string; partial_json?: string })
			.filter((d) => d.type === "input_json_delta")
			.map((d) => d.partial_json)
			.join("");
		// Before the fix: the non-stream answer says `input: {}`, the stream's deltas assemble to
		// `{"query":"go m…` (not JSON): the same call, two answers, one of which a client cannot parse.
		let parsed: unknown;
		expect(() => {
			parsed = JSON.parse(json);
		}, json).not.toThrow();
		expect(parsed).toEqual(input);
	});
});
