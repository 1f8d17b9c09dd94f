/**
 * Billed: at least what was delivered, at most what was held (issue 33), on every lane that runs
 * the chat pipeline (chat stream and non-stream, legacy completions, Responses, Messages) and on
 * embeddings. The development engine plays three honest engines the chars/4 estimate got wrong:
 * a byte-level tokenizer on CJK text, rare 3-byte characters and images (`bytetok`), llama.cpp
 * counting one choice of several (`onechoice`), and 0/0 usage beside an answer (`zerousage`).
 * Each case checks what the client is told, the usage record and the ledger's debit agree
 * (records = debits), and that what was billed is at least what the engine delivered and at
 * most what was held. Arithmetic as in test/support/billing.ts ($1/Mtok in, $2/Mtok out).
 */
import { describe, expect, it } from "vitest";
import { IN, info as ledgerInfo, OUT, ping, settled, type UsageRow } from "../../support/billing";
import { chat, createKey, engineRequests, gw, readSse } from "../../support/gateway";
import { expectBooks } from "../../support/ledger";

const CREDIT = 1_000_000_000;
const MAX_TOKENS = 10;
/** The test catalog's image_tokens_max (the default) and the gateway's template slack. */
const IMAGE_TOKENS_MAX = 16_384;
const SLACK = 1024;

type Lane = "chat" | "chat-stream" | "completions" | "responses" | "messages";
const LANES: Lane[] = ["chat", "chat-stream", "completions", "responses", "messages"];

interface Told {
	prompt: number;
	completion: number;
}

function post(path: string, key: string, body: Record<string, unknown>): Promise<Response> {
	return gw(path, {
		method: "POST",
		headers: {
			authorization: `Bearer ${key}`,
			"anthropic-version": "2023-06-01",
			"content-type": "application/json",
		},
		body: JSON.stringify(body),
	});
}

/**
 * One request on `lane`: `system` as the system prompt (chat, Responses' instructions, Messages'
 * system; legacy completions: the prompt's head), `user` as the user's text. Returns the usage the
 * client was told.
 */
async function send(lane: Lane, key: string, model: string, system: string, user: string): Promise<Told> {
	let res: Response;
	switch (lane) {
		case "chat":
		case "chat-stream": {
			const stream = lane === "chat-stream";
			const messages = [...(system ? [{ role: "system", content: system }] : []), { role: "user", content: user }];
			res = await chat(key, { model, stream, max_tokens: MAX_TOKENS, messages });
			expect(res.status).toBe(200);
			if (stream) {
				const frames = (await readSse(res)).filter((f) => f !== "[DONE]").map((f) => JSON.parse(f));
				const usage = frames.at(-1).usage;
				return { prompt: usage.prompt_tokens, completion: usage.completion_tokens };
			}
			const { usage } = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
			return { prompt: usage.prompt_tokens, completion: usage.completion_tokens };
		}
		case "completions": {
			res = await post("/v1/completions", key, { model, max_tokens: MAX_TOKENS, prompt: system ? `${user} ${system}` : user });
			expect(res.status).toBe(200);
			const { usage } = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
			return { prompt: usage.prompt_tokens, completion: usage.completion_tokens };
		}
		case "responses": {
			res = await post("/v1/responses", key, {
				model,
				max_output_tokens: MAX_TOKENS,
				...(system ? { instructions: system } : {}),
				input: user,
			});
			expect(res.status).toBe(200);
			const { usage } = (await res.json()) as { usage: { input_tokens: number; output_tokens: number } };
			return { prompt: usage.input_tokens, completion: usage.output_tokens };
		}
		case "messages": {
			res = await post("/v1/messages", key, {
				model,
				max_tokens: MAX_TOKENS,
				...(system ? { system } : {}),
				messages: [{ role: "user", content: user }],
			});
			expect(res.status).toBe(200);
			const { usage } = (await res.json()) as { usage: { input_tokens: number; output_tokens: number } };
			return { prompt: usage.input_tokens, completion: usage.output_tokens };
		}
	}
}

/** The key's one record, checked against the ledger (records = debits) and what the client was told. */
async function billed(keyId: string, told: Told): Promise<UsageRow> {
	const { rows } = await settled(keyId, 1);
	const { charged } = await expectBooks(keyId, CREDIT);
	const row = rows[0] as UsageRow;
	expect(rows).toHaveLength(1);
	expect(row.cost_nanos).toBe(row.prompt_tokens * IN + row.completion_tokens * OUT);
	expect(charged).toBe(row.cost_nanos);
	expect({ prompt: row.prompt_tokens, completion: row.completion_tokens }).toEqual(told);
	return row;
}

const utf8 = (s: string) => new TextEncoder().encode(s).length;

describe("an honest engine's prompt count above the old chars/4 bound is billed in full, within the hold", () => {
	const cases = [
		// 20,000 CJK characters: the estimate says about 5,000 tokens, a byte-level tokenizer up to 60,000.
		["Chinese text", "中文".repeat(10_000)],
		// Rare 3-byte characters (Yi syllables), each a token per byte: 120,000 tokens where the estimate says 10,000.
		["rare 3-byte characters", "\uA000".repeat(40_000)],
	] as const;

	for (const [what, text] of cases) {
		for (const lane of LANES) {
			it(`${what} (${lane})`, async () => {
				const k = await createKey({ balance_usd: CREDIT / 1e9 });
				const user = ping();
				const told = await send(lane, k.key, "test/bytetok", text, user);
				const row = await billed(k.id, told);
				// The engine counts one token per UTF-8 byte, 3 per message (legacy: the one prompt's bytes).
				const delivered = lane === "completions" ? utf8(`${user} ${text}`) : utf8(text) + 3 + utf8(user) + 3;
				expect(row.prompt_tokens).toBe(delivered);
				expect(row.estimated).toBe(false);
				// Far above the old bound (4 × the chars/4 estimate + 1,024) and below the hold's.
				expect(row.prompt_tokens).toBeGreaterThan(4 * Math.ceil(text.length / 4) + 8 + SLACK);
				const heldPrompt = lane === "completions" ? delivered + SLACK : utf8(text) + utf8(user) + 8 + SLACK;
				expect(row.cost_nanos).toBeLessThanOrEqual(heldPrompt * IN + MAX_TOKENS * OUT);
			});
		}
	}

	for (const stream of [false, true]) {
		it(`four images at 16,384 tokens each, held in full (chat, ${stream ? "stream" : "non-stream"})`, async () => {
			const k = await createKey({ balance_usd: CREDIT / 1e9 });
			const user = ping();
			const image = { type: "image_url", image_url: { url: "https://example.org/cat.png" } };
			const res = await chat(k.key, {
				model: "test/bytetok",
				stream,
				max_tokens: MAX_TOKENS,
				messages: [{ role: "user", content: [{ type: "text", text: user }, image, image, image, image] }],
			});
			expect(res.status).toBe(200);
			const body = stream ? (await readSse(res)).filter((f) => f !== "[DONE]").map((f) => JSON.parse(f)) : [await res.json()];
			const usage = body.at(-1).usage;
			const row = await billed(k.id, { prompt: usage.prompt_tokens, completion: usage.completion_tokens });
			const delivered = utf8(user) + 3 + 4 * IMAGE_TOKENS_MAX;
			expect(row).toMatchObject({ prompt_tokens: delivered, estimated: false });
			expect(row.cost_nanos).toBeLessThanOrEqual((utf8(user) + 4 + 4 * IMAGE_TOKENS_MAX + SLACK) * IN + MAX_TOKENS * OUT);
		});
	}
});

describe("text the chat template renders from chat_template_kwargs is in the bound", () => {
	for (const stream of [false, true]) {
		it(`gpt-oss's model_identity of 20,000 CJK characters is billed in full (chat, ${stream ? "stream" : "non-stream"})`, async () => {
			const k = await createKey({ balance_usd: CREDIT / 1e9 });
			const user = ping();
			const identity = "中文".repeat(10_000);
			const res = await chat(k.key, {
				model: "test/bytetok",
				stream,
				max_tokens: MAX_TOKENS,
				chat_template_kwargs: { model_identity: identity },
				messages: [{ role: "user", content: user }],
			});
			expect(res.status).toBe(200);
			const body = stream ? (await readSse(res)).filter((f) => f !== "[DONE]").map((f) => JSON.parse(f)) : [await res.json()];
			const usage = body.at(-1).usage;
			const row = await billed(k.id, { prompt: usage.prompt_tokens, completion: usage.completion_tokens });
			// The engine renders the identity into the prompt: a token per byte of it, as of the message.
			expect(row).toMatchObject({ prompt_tokens: utf8(identity) + utf8(user) + 3, estimated: false });
			const heldPrompt = utf8(JSON.stringify({ model_identity: identity })) + utf8(user) + 4 + SLACK;
			expect(row.cost_nanos).toBeLessThanOrEqual(heldPrompt * IN + MAX_TOKENS * OUT);
		});
	}
});

describe("a tool call's id is prompt text too (Mistral's template renders it)", () => {
	it("bills a 20,000-character id in the call and its result, within the hold", async () => {
		const k = await createKey({ balance_usd: CREDIT / 1e9 });
		const user = ping();
		const id = "中".repeat(20_000);
		const call = { id, type: "function", function: { name: "f", arguments: "{}" } };
		const res = await chat(k.key, {
			model: "test/bytetok",
			max_tokens: MAX_TOKENS,
			messages: [
				{ role: "user", content: user },
				{ role: "assistant", content: null, tool_calls: [call] },
				{ role: "tool", tool_call_id: id, content: "ok" },
			],
		});
		expect(res.status).toBe(200);
		const { usage } = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
		const row = await billed(k.id, { prompt: usage.prompt_tokens, completion: usage.completion_tokens });
		const delivered = utf8(user) + 3 + 3 + 2 * utf8(id) + utf8("ok") + 3;
		expect(row.prompt_tokens).toBe(delivered);
	});
});

describe("a legacy completion's suffix is prompt text too (SGLang's fill-in-the-middle template)", () => {
	it("bills each prompt with its suffix at a token a byte, within the hold", async () => {
		const k = await createKey({ balance_usd: CREDIT / 1e9 });
		const suffix = "中文".repeat(5_000);
		const prompts = [ping(), ping()];
		const res = await post("/v1/completions", k.key, { model: "test/bytetok", max_tokens: MAX_TOKENS, prompt: prompts, suffix });
		expect(res.status).toBe(200);
		const { usage } = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
		const row = await billed(k.id, { prompt: usage.prompt_tokens, completion: usage.completion_tokens });
		const delivered = prompts.reduce((a, p) => a + utf8(p) + utf8(suffix), 0);
		// The engine's prompt count is billed (its completion count of the two choices may be the gateway's own).
		expect(row.prompt_tokens).toBe(delivered);
		expect(row.cost_nanos).toBeLessThanOrEqual((delivered + 2 * SLACK) * IN + 2 * MAX_TOKENS * OUT);
	});
});

describe("a content part whose size no byte bound can see never reaches an engine", () => {
	// vLLM fetches video and audio by URL (and takes embeddings): thousands of prompt tokens behind
	// a few bytes, which no hold placed from the body could cover.
	const parts = [
		{ type: "video_url", video_url: { url: "https://example.org/hour.mp4" } },
		{ type: "audio_url", audio_url: { url: "https://example.org/hour.wav" } },
		{ type: "image_embeds", image_embeds: "AAAA" },
		{ type: "Image_url", image_url: { url: "https://example.org/cat.png" } },
	];
	for (const part of parts) {
		it(`${part.type} is refused before anything is held`, async () => {
			const k = await createKey({ balance_usd: CREDIT / 1e9 });
			const marker = ping();
			const res = await chat(k.key, {
				model: "test/bytetok",
				max_tokens: MAX_TOKENS,
				messages: [{ role: "user", content: [{ type: "text", text: marker }, part] }],
			});
			expect(res.status).toBe(400);
			const { error } = (await res.json()) as { error: { param: string } };
			expect(error.param).toBe("messages[0].content[1].type");
			expect(await engineRequests({ contains: marker })).toEqual([]);
			expect((await expectBooks(k.id, CREDIT)).charged).toBe(0);
		});
	}
});

describe("an engine count above the bound is billed at the bound, not at the estimate", () => {
	it("bills test/bigprompt's 1,040 prompt tokens at the 1,039-token bound of an 11-byte message", async () => {
		const k = await createKey({ balance_usd: CREDIT / 1e9 });
		const told = await send("chat", k.key, "test/bigprompt", "", ping());
		const row = await billed(k.id, told);
		expect(row).toMatchObject({ prompt_tokens: 11 + 4 + SLACK, completion_tokens: 1, estimated: false });
	});
});

describe("an engine that counts one choice of several is billed for every choice delivered", () => {
	// Each choice says "Echo: ping XXXXXX" (3 words, 17 characters, a delta a word): the engine counts
	// 3 tokens for all of them, short of the 2 × 3 deltas relayed; the gateway bills the larger of
	// those and its estimate of the whole output, ceil(34 / 4) = 9.
	for (const lane of ["chat", "chat-stream", "completions"] as const) {
		it(`n: 2 (${lane})`, async () => {
			const k = await createKey({ balance_usd: CREDIT / 1e9 });
			const user = ping();
			const path = lane === "completions" ? "/v1/completions" : "/v1/chat/completions";
			const body =
				lane === "completions"
					? { model: "test/onechoice", n: 2, prompt: user }
					: { model: "test/onechoice", n: 2, stream: lane === "chat-stream", messages: [{ role: "user", content: user }] };
			const res = await post(path, k.key, body);
			expect(res.status).toBe(200);
			const usage =
				lane === "chat-stream"
					? (await readSse(res))
							.filter((f) => f !== "[DONE]")
							.map((f) => JSON.parse(f))
							.at(-1).usage
					: ((await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
			const row = await billed(k.id, { prompt: usage.prompt_tokens, completion: usage.completion_tokens });
			// Delivered: 2 × 3 words; billed: the gateway's estimate, flagged as its own count.
			expect(row).toMatchObject({ completion_tokens: 9, estimated: true });
			expect(row.completion_tokens).toBeGreaterThanOrEqual(2 * 3);
		});
	}

	// One CJK character a word: each delta is a token of the engine's (as llama.cpp streams a token
	// a delta), 2 characters; chars/4 would say half of what each choice delivered.
	for (const lane of ["chat", "chat-stream", "completions"] as const) {
		it(`n: 4 of one-character words, a token a delta (${lane})`, async () => {
			const k = await createKey({ balance_usd: CREDIT / 1e9 });
			const user = `${"中 ".repeat(40)}${ping()}`;
			const path = lane === "completions" ? "/v1/completions" : "/v1/chat/completions";
			const common = { model: "test/onechoice", n: 4, max_tokens: MAX_TOKENS };
			const body =
				lane === "completions"
					? { ...common, prompt: user }
					: { ...common, stream: lane === "chat-stream", messages: [{ role: "user", content: user }] };
			const res = await post(path, k.key, body);
			expect(res.status).toBe(200);
			const usage =
				lane === "chat-stream"
					? (await readSse(res))
							.filter((f) => f !== "[DONE]")
							.map((f) => JSON.parse(f))
							.at(-1).usage
					: ((await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
			const row = await billed(k.id, { prompt: usage.prompt_tokens, completion: usage.completion_tokens });
			// Delivered: 4 choices of MAX_TOKENS words each (the engine counted one choice's).
			expect(row.completion_tokens).toBeGreaterThanOrEqual(4 * MAX_TOKENS);
			expect(row.completion_tokens).toBeLessThanOrEqual(4 * MAX_TOKENS);
		});
	}

	it("a legacy prompt array (completions)", async () => {
		const k = await createKey({ balance_usd: CREDIT / 1e9 });
		const res = await post("/v1/completions", k.key, { model: "test/onechoice", prompt: [ping(), ping()] });
		expect(res.status).toBe(200);
		const { usage, choices } = (await res.json()) as {
			usage: { prompt_tokens: number; completion_tokens: number };
			choices: unknown[];
		};
		expect(choices).toHaveLength(2);
		const row = await billed(k.id, { prompt: usage.prompt_tokens, completion: usage.completion_tokens });
		expect(row).toMatchObject({ completion_tokens: 9, estimated: true });
	});
});

describe("usage of 0/0 beside an answer is estimated, not free", () => {
	for (const lane of LANES) {
		it(lane, async () => {
			const k = await createKey({ balance_usd: CREDIT / 1e9 });
			const told = await send(lane, k.key, "test/zerousage", "", ping());
			const row = await billed(k.id, told);
			// "Echo: ping XXXXXX" was delivered: 3 words the engine generated, an 11-character prompt it read.
			expect(row.estimated).toBe(true);
			expect(row.completion_tokens).toBeGreaterThanOrEqual(3);
			expect(row.prompt_tokens).toBeGreaterThanOrEqual(3);
		});
	}

	it("embeddings", async () => {
		const k = await createKey({ balance_usd: CREDIT / 1e9 });
		const res = await post("/v1/embeddings", k.key, { model: "test/zero-embed", input: [ping(), ping()] });
		expect(res.status).toBe(200);
		const { usage } = (await res.json()) as { usage: { prompt_tokens: number } };
		const row = await billed(k.id, { prompt: usage.prompt_tokens, completion: 0 });
		// Two 11-character inputs: 3 tokens each by the estimate.
		expect(row).toMatchObject({ prompt_tokens: 6, estimated: true });
	});
});

describe("the search round: two engine calls, both held at their bound", () => {
	it("bills both calls' honest byte counts and the search, within what was held (Responses, stream)", async () => {
		const k = await createKey({ balance_usd: CREDIT / 1e9 });
		const instructions = "中文".repeat(5_000);
		const res = await post("/v1/responses", k.key, {
			model: "test/bytetok",
			instructions,
			input: `search the tides ${ping()}`,
			tools: [{ type: "web_search" }],
			max_output_tokens: 100,
			stream: true,
		});
		expect(res.status).toBe(200);
		const reader = (res.body as ReadableStream<Uint8Array>).getReader();
		await reader.read();
		const held = (await ledgerInfo(k.id)).heldNanos;
		let text = "";
		for (let r = await reader.read(); !r.done; r = await reader.read()) text += new TextDecoder().decode(r.value);
		expect(text.includes("response.completed"), "the stream completes").toBe(true);
		const { rows } = await settled(k.id, 1);
		const { charged } = await expectBooks(k.id, CREDIT);
		const row = rows[0] as UsageRow;
		expect(row).toMatchObject({ search_count: 1, estimated: false });
		// Both calls read the instructions, counted a token a byte: twice the old bound's worth.
		expect(row.prompt_tokens).toBeGreaterThan(2 * utf8(instructions));
		expect(charged).toBe(row.cost_nanos);
		expect(charged).toBeLessThanOrEqual(held);
	});
});
