/**
 * The Gemini API (`/v1beta/models/{model}:generateContent`, `:streamGenerateContent`,
 * `:countTokens`, the models list) through the gateway against the development engine: the chat
 * body the engine receives, Gemini's answer and frames, the money (the same hold, settlement and
 * usage record as chat, with `lane: "gemini"`), and errors in Google's shape. Plain fetch: the
 * `@google/genai` SDK is not among the project's packages.
 */
import { describe, expect, it } from "vitest";
import cliRequests from "../../fixtures/gemini-cli-requests.json";
import { usageRecordOf } from "../../support/billing";
import { chat, createKey, type EngineRequest, engineRequests, gw, waitFor } from "../../support/gateway";

type Json = Record<string, unknown>;

function marker(): string {
	return `g${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
}

function gemini(key: string | null, model: string, method: string, body: Json, query = ""): Promise<Response> {
	return gw(`/v1beta/models/${model}:${method}${query}`, {
		method: "POST",
		headers: { ...(key ? { "x-goog-api-key": key } : {}), "content-type": "application/json" },
		body: JSON.stringify(body),
	});
}

function ask(text: string): Json {
	return { contents: [{ role: "user", parts: [{ text }] }] };
}

async function engineCall(m: string): Promise<EngineRequest> {
	const calls = await waitFor(async () => {
		const c = (await engineRequests({ contains: m })).filter((r) => r.path.endsWith("/chat/completions"));
		return c.length > 0 && c;
	});
	return calls.at(-1) as EngineRequest;
}

async function expectError(res: Response, code: number, status: string): Promise<string> {
	const body = (await res.json()) as { error: { code: number; message: string; status: string } };
	expect(res.status, JSON.stringify(body)).toBe(code);
	expect(body.error).toMatchObject({ code, status });
	expect(typeof body.error.message).toBe("string");
	return body.error.message;
}

/** The `data:` frames of a Gemini SSE body; there is no `[DONE]`. */
async function framesOf(res: Response): Promise<Json[]> {
	const text = await res.text();
	expect(text).not.toContain("[DONE]");
	return text
		.split("\n\n")
		.filter((f) => f.trim())
		.map((f) => {
			expect(f.startsWith("data: ")).toBe(true);
			return JSON.parse(f.slice(6)) as Json;
		});
}

const TOOLS = [
	{
		functionDeclarations: [
			{
				name: "Bash",
				description: "Runs a command",
				parameters: { type: "OBJECT", properties: { command: { type: "STRING" } } },
			},
		],
	},
];

describe("POST /v1beta/models/{model}:generateContent", () => {
	it("translates the request and answers a GenerateContentResponse, billed as chat is", async () => {
		const key = await createKey({ name: "gemini-basic", balance_usd: 10 });
		const m = marker();
		const res = await gemini(key.key, "test/ok", "generateContent", {
			...ask(`hello ${m}`),
			systemInstruction: { parts: [{ text: "Be brief." }] },
			generationConfig: { maxOutputTokens: 32_000, temperature: 0.5, topP: 0.9, stopSequences: ["STOP"] },
			safetySettings: [{ category: "HARM_CATEGORY_HARASSMENT", threshold: "BLOCK_NONE" }],
		});
		const body = (await res.json()) as Json;
		expect(res.status, JSON.stringify(body)).toBe(200);
		expect(body).toMatchObject({
			candidates: [{ content: { role: "model", parts: [{ text: `Echo: hello ${m}` }] }, finishReason: "STOP", index: 0 }],
			modelVersion: "test/ok",
		});
		expect(typeof body.responseId).toBe("string");

		const call = await engineCall(m);
		expect(call.body).toMatchObject({
			model: "engine-ok",
			max_tokens: 1000,
			messages: [
				{ role: "system", content: "Be brief." },
				{ role: "user", content: `hello ${m}` },
			],
			stop: ["STOP"],
			temperature: 0.5,
			top_p: 0.9,
		});
		for (const dropped of ["safetySettings", "contents", "generationConfig", "systemInstruction"]) {
			expect(call.body).not.toHaveProperty(dropped);
		}

		const row = await usageRecordOf(key.id, res.headers.get("x-request-id") as string);
		expect(row).toMatchObject({ lane: "gemini", status: "completed", model: "test/ok" });
		expect(body.usageMetadata).toEqual({
			promptTokenCount: row.prompt_tokens,
			candidatesTokenCount: row.completion_tokens,
			cachedContentTokenCount: 0,
			thoughtsTokenCount: 0,
			totalTokenCount: row.prompt_tokens + row.completion_tokens,
		});
		// The record is the debit: the balance fell by exactly the recorded cost.
		const keyInfo = (await (await gw("/v1/key", { headers: { authorization: `Bearer ${key.key}` } })).json()) as Json;
		expect(Math.round((keyInfo.spent_usd as number) * 1e9)).toBe(row.cost_nanos);
		expect(keyInfo.held_usd).toBe(0);
		expect(row.cost_nanos).toBeGreaterThan(0);
	});

	it("bills exactly what chat bills for the same tokens", async () => {
		const key = await createKey({ name: "gemini-billing", balance_usd: 10 });
		const text = `same words ${marker()}`;
		const viaGemini = await gemini(key.key, "test/ok", "generateContent", {
			...ask(text),
			generationConfig: { maxOutputTokens: 50 },
		});
		expect(viaGemini.status).toBe(200);
		const viaChat = await chat(key.key, { model: "test/ok", max_tokens: 50, messages: [{ role: "user", content: text }] });
		const a = await usageRecordOf(key.id, viaGemini.headers.get("x-request-id") as string);
		const b = await usageRecordOf(key.id, viaChat.headers.get("x-request-id") as string);
		expect([a.lane, b.lane]).toEqual(["gemini", "chat"]);
		expect(a.cost_nanos).toBe(b.cost_nanos);
		expect(a.prompt_tokens).toBe(b.prompt_tokens);
	});

	it("takes the key as ?key= and keeps the model's / unencoded", async () => {
		const key = await createKey({ name: "gemini-query-key", balance_usd: 10 });
		const res = await gemini(null, "test/ok", "generateContent", ask(`q ${marker()}`), `?key=${key.key}`);
		expect(res.status).toBe(200);
		const bearer = await gw("/v1beta/models/test%2Fok:generateContent", {
			method: "POST",
			headers: { authorization: `Bearer ${key.key}`, "content-type": "application/json" },
			body: JSON.stringify(ask("encoded")),
		});
		expect(bearer.status).toBe(200);
	});

	it("runs a function call round trip: one whole functionCall part, then the functionResponse answered", async () => {
		const key = await createKey({ name: "gemini-tools", balance_usd: 10 });
		const m = marker();
		const first = await gemini(key.key, "test/tool-loop", "generateContent", { ...ask(`list files ${m}`), tools: TOOLS });
		const turn = (await first.json()) as { candidates: { content: { parts: Json[] }; finishReason: string }[] };
		expect(first.status, JSON.stringify(turn)).toBe(200);
		const part = turn.candidates[0]?.content.parts.find((p) => p.functionCall) as {
			functionCall: { id: string; name: string; args: Json };
		};
		expect(part.functionCall).toMatchObject({ name: "Bash", args: { command: "echo hi" } });
		expect(turn.candidates[0]?.finishReason).toBe("STOP");
		const call = await engineCall(m);
		expect(call.body?.tools).toEqual([
			{
				type: "function",
				function: {
					name: "Bash",
					description: "Runs a command",
					parameters: { type: "object", properties: { command: { type: "string" } } },
				},
			},
		]);

		const second = await gemini(key.key, "test/tool-loop", "generateContent", {
			contents: [
				{ role: "user", parts: [{ text: `list files ${m}` }] },
				{ role: "model", parts: [{ ...part, thoughtSignature: "sig" }] },
				{ role: "user", parts: [{ functionResponse: { id: part.functionCall.id, name: "Bash", response: { output: "hi" } } }] },
			],
			tools: TOOLS,
		});
		const answer = (await second.json()) as { candidates: { content: { parts: { text: string }[] } }[] };
		expect(answer.candidates[0]?.content.parts[0]?.text).toBe("Tool said: hi");
		const replayed = (await engineCall(m)).body?.messages as Json[];
		expect(replayed.slice(1)).toEqual([
			{
				role: "assistant",
				content: null,
				tool_calls: [
					{
						id: part.functionCall.id,
						type: "function",
						function: { name: "Bash", arguments: JSON.stringify(part.functionCall.args) },
					},
				],
			},
			{ role: "tool", tool_call_id: part.functionCall.id, content: "hi" },
		]);
	});
});

describe("the lane's allowlist", () => {
	it("refuses an unknown top-level field with 400 naming it, before any hold", async () => {
		const key = await createKey({ name: "gemini-unknown", balance_usd: 10 });
		for (const [field, value] of [
			["someFutureField", true],
			["guided_regex", "a+"],
			["n_cmpl", 8],
		] as const) {
			const message = await expectError(
				await gemini(key.key, "test/ok", "generateContent", { ...ask("hi"), [field]: value }),
				400,
				"INVALID_ARGUMENT",
			);
			expect(message).toContain(`'${field}'`);
		}
		const counted = await gemini(key.key, "test/ok", "countTokens", { ...ask("hi"), someFutureField: 1 });
		expect(await expectError(counted, 400, "INVALID_ARGUMENT")).toContain("'someFutureField'");
		const info = (await (await gw("/v1/key", { headers: { authorization: `Bearer ${key.key}` } })).json()) as Json;
		expect(info.spent_usd).toBe(0);
		expect(info.held_usd).toBe(0);
	});

	it("sends a field the model's pass_through_fields lists to the engine as sent, and no other", async () => {
		const key = await createKey({ name: "gemini-pass", balance_usd: 10 });
		const m = marker();
		const res = await gemini(key.key, "test/passthrough", "generateContent", { ...ask(`pass ${m}`), guided_regex: "a+" });
		expect(res.status, await res.clone().text()).toBe(200);
		const call = await engineCall(m);
		expect(call.body).toMatchObject({ guided_regex: "a+" });
		const refused = await gemini(key.key, "test/passthrough", "generateContent", { ...ask("hi"), n_cmpl: 8 });
		expect(await expectError(refused, 400, "INVALID_ARGUMENT")).toContain("'n_cmpl'");
	});
});

describe("Gemini CLI 0.61's recorded requests (test/fixtures/gemini-cli-requests.json)", () => {
	it("translates its tool round trip: the call with its thoughtSignature (12k tokens: test/big), the shell's output as the tool's answer", async () => {
		const key = await createKey({ name: "gemini-cli-round", balance_usd: 10 });
		const m = marker();
		const body = structuredClone(cliRequests.toolRound.body) as Json & { contents: { role: string; parts: Json[] }[] };
		body.contents[0]?.parts.push({ text: m });
		const res = await gemini(key.key, "test/big", "streamGenerateContent", body, "?alt=sse");
		expect(res.status, await res.clone().text()).toBe(200);
		const frames = await framesOf(res);
		expect(frames.at(-1)).toMatchObject({ candidates: [{ finishReason: "STOP" }] });
		const call = await engineCall(m);
		const messages = call.body?.messages as Json[];
		expect(messages[0]).toMatchObject({ role: "system" });
		expect(messages.slice(-2)).toEqual([
			{
				role: "assistant",
				content: null,
				tool_calls: [
					{
						id: "call_loop1",
						type: "function",
						function: {
							name: "run_shell_command",
							arguments: JSON.stringify({ command: "echo hi", description: "Print hi", is_background: false }),
						},
					},
				],
			},
			{ role: "tool", tool_call_id: "call_loop1", content: expect.stringContaining("Output: hi") },
		]);
		const tools = call.body?.tools as { function: { name: string } }[];
		expect(tools.map((t) => t.function.name)).toContain("run_shell_command");
		expect(call.body).toMatchObject({ temperature: 1, top_p: 0.95, top_k: 64, stream: true });
	});

	it("serves its router's helper call on an alias, Google's upper-case schema types lower-cased", async () => {
		const key = await createKey({ name: "gemini-cli-helper", balance_usd: 10 });
		const m = marker();
		const body = structuredClone(cliRequests.routerHelper.body) as Json & { contents: { parts: Json[] }[] };
		body.contents[0]?.parts.push({ text: m });
		const res = await gemini(key.key, "gemini-3-flash-preview", "generateContent", body);
		expect(res.status, await res.clone().text()).toBe(200);
		const call = await engineCall(m);
		expect(call.body?.response_format).toMatchObject({
			type: "json_schema",
			json_schema: {
				schema: {
					type: "object",
					properties: { complexity_reasoning: { type: "string" }, complexity_score: { type: "integer" } },
				},
			},
		});
	});
});

describe("POST /v1beta/models/{model}:streamGenerateContent?alt=sse", () => {
	it("streams text frames, finishReason and usageMetadata on the last, no [DONE], billed", async () => {
		const key = await createKey({ name: "gemini-stream", balance_usd: 10 });
		const m = marker();
		const res = await gemini(key.key, "test/ok", "streamGenerateContent", ask(`stream ${m}`), "?alt=sse");
		expect(res.status).toBe(200);
		expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
		const frames = await framesOf(res);
		expect(frames.length).toBeGreaterThan(1);
		const parts = frames.flatMap((f) =>
			(f.candidates as { content: { parts: { text?: string }[] } }[]).flatMap((c) => c.content.parts),
		);
		expect(parts.map((p) => p.text ?? "").join("")).toBe(`Echo: stream ${m}`);
		for (const f of frames.slice(0, -1)) {
			expect(f.usageMetadata).toBeUndefined();
			expect((f.candidates as Json[])[0]?.finishReason).toBeUndefined();
		}
		const last = frames.at(-1) as { candidates: Json[]; usageMetadata: Json; modelVersion: string };
		expect(last.candidates[0]?.finishReason).toBe("STOP");
		expect(last.modelVersion).toBe("test/ok");
		expect(new Set(frames.map((f) => f.responseId)).size).toBe(1);
		const row = await usageRecordOf(key.id, res.headers.get("x-request-id") as string);
		expect(row).toMatchObject({ lane: "gemini", status: "completed" });
		expect(last.usageMetadata).toMatchObject({
			promptTokenCount: row.prompt_tokens,
			candidatesTokenCount: row.completion_tokens,
		});
	});

	it("streams a function call as one whole functionCall part", async () => {
		const key = await createKey({ name: "gemini-stream-tools", balance_usd: 10 });
		const res = await gemini(
			key.key,
			"test/tool-loop",
			"streamGenerateContent",
			{ ...ask(`go ${marker()}`), tools: TOOLS },
			"?alt=sse",
		);
		const frames = await framesOf(res);
		const parts = frames.flatMap((f) => (f.candidates as { content: { parts: Json[] } }[]).flatMap((c) => c.content.parts));
		const calls = parts.filter((p) => p.functionCall);
		expect(calls).toHaveLength(1);
		expect(calls[0]?.functionCall).toMatchObject({ name: "Bash", args: { command: "echo hi", description: "Print hi" } });
		expect((frames.at(-1)?.candidates as Json[] | undefined)?.[0]?.finishReason).toBe("STOP");
		expect(frames.at(-1)?.usageMetadata).toBeDefined();
	});

	it("ends a failed stream with a Google-shaped error frame", async () => {
		const key = await createKey({ name: "gemini-stream-fail", balance_usd: 10 });
		const res = await gemini(key.key, "test/midstream", "streamGenerateContent", ask(`x ${marker()}`), "?alt=sse");
		const frames = await framesOf(res);
		expect(frames.at(-1)).toMatchObject({ error: { code: 502, status: "UNAVAILABLE" } });
	});
});

describe("Gemini errors in Google's shape", () => {
	it("401 UNAUTHENTICATED, 402 RESOURCE_EXHAUSTED, 403 PERMISSION_DENIED, 404 NOT_FOUND, 400 INVALID_ARGUMENT", async () => {
		await expectError(await gemini("vk-nope", "test/ok", "generateContent", ask("hi")), 401, "UNAUTHENTICATED");
		const empty = await createKey({ name: "gemini-402", balance_usd: 0 });
		const broke = await expectError(await gemini(empty.key, "test/ok", "generateContent", ask("hi")), 402, "RESOURCE_EXHAUSTED");
		expect(broke.toLowerCase()).toContain("balance");
		const scoped = await createKey({ name: "gemini-403", balance_usd: 10, allowed_models: ["test/slow"] });
		await expectError(await gemini(scoped.key, "test/ok", "generateContent", ask("hi")), 403, "PERMISSION_DENIED");
		const key = await createKey({ name: "gemini-404", balance_usd: 10 });
		const missing = await expectError(await gemini(key.key, "gemini-9-ultra", "generateContent", ask("hi")), 404, "NOT_FOUND");
		expect(missing).toContain("gemini-9-ultra");
		await expectError(await gemini(key.key, "test/ok", "embedContent", ask("hi")), 404, "NOT_FOUND");
		await expectError(await gemini(key.key, "test/ok", "generateContent", { contents: "nope" }), 400, "INVALID_ARGUMENT");
		const engineName = await expectError(
			await gemini(key.key, "test/ok", "generateContent", { ...ask("hi"), n_predict: 9 }),
			400,
			"INVALID_ARGUMENT",
		);
		expect(engineName).toContain("n_predict");
	});

	it("429 RESOURCE_EXHAUSTED with Google's RetryInfo", async () => {
		const key = await createKey({ name: "gemini-429", balance_usd: 10, rpm: 1 });
		expect((await gemini(key.key, "test/ok", "generateContent", ask("one"))).status).toBe(200);
		const limited = await gemini(key.key, "test/ok", "generateContent", ask("two"));
		const body = (await limited.clone().json()) as { error: { details?: Json[] } };
		await expectError(limited, 429, "RESOURCE_EXHAUSTED");
		expect(body.error.details?.[0]).toMatchObject({ "@type": "type.googleapis.com/google.rpc.RetryInfo" });
		expect(Number(limited.headers.get("retry-after"))).toBeGreaterThan(0);
	});
});

describe(":countTokens and aliases", () => {
	it("counts a request's tokens (the SDK's wrapped form too), free and unrecorded", async () => {
		const key = await createKey({ name: "gemini-count", balance_usd: 10 });
		const plain = await gemini(key.key, "test/ok", "countTokens", ask("count these words"));
		const counted = (await plain.json()) as { totalTokens: number };
		expect(plain.status, JSON.stringify(counted)).toBe(200);
		expect(counted.totalTokens).toBeGreaterThan(0);
		const wrapped = await gemini(key.key, "test/ok", "countTokens", {
			generateContentRequest: { model: "models/test/ok", ...ask("count these words") },
		});
		expect(((await wrapped.json()) as { totalTokens: number }).totalTokens).toBe(counted.totalTokens);
		const longer = await gemini(key.key, "test/ok", "countTokens", ask("count these words ".repeat(20)));
		expect(((await longer.json()) as { totalTokens: number }).totalTokens).toBeGreaterThan(counted.totalTokens);
		const info = (await (await gw("/v1/key", { headers: { authorization: `Bearer ${key.key}` } })).json()) as Json;
		expect(info.spent_usd).toBe(0);
	});

	it("serves a configured alias on every lane, billed as the model it names; an unmapped one is a 404 naming it", async () => {
		const key = await createKey({ name: "gemini-alias", balance_usd: 10 });
		const m = marker();
		const res = await gemini(key.key, "gemini-3-flash-preview", "generateContent", ask(`alias ${m}`));
		const body = (await res.json()) as { candidates: { content: { parts: { text: string }[] } }[] };
		expect(res.status, JSON.stringify(body)).toBe(200);
		expect(body.candidates[0]?.content.parts[0]?.text).toBe(`Echo: alias ${m}`);
		expect((await engineCall(m)).body?.model).toBe("engine-ok");
		const row = await usageRecordOf(key.id, res.headers.get("x-request-id") as string);
		expect(row.model).toBe("test/ok");
		const viaChat = await chat(key.key, { model: "gemini-2.5-flash-lite", messages: [{ role: "user", content: "hi" }] });
		expect(viaChat.status).toBe(200);
		// A prefix alias ("gemini-3.*"): the name sent is kept as the answer's model.
		const prefixed = await gemini(key.key, "gemini-3.1-pro-preview", "generateContent", ask("hi"));
		expect(((await prefixed.json()) as Json).modelVersion).toBe("gemini-3.1-pro-preview");
		const missing = await expectError(
			await gemini(key.key, "gemini-3-pro-preview", "generateContent", ask("hi")),
			404,
			"NOT_FOUND",
		);
		expect(missing).toContain("gemini-3-pro-preview");
	});
});

describe("thinkingConfig", () => {
	it("turns reasoning on at the level asked and returns it as thought parts; a budget of 0 turns it off", async () => {
		const key = await createKey({ name: "gemini-thinking", balance_usd: 10 });
		const m = marker();
		const res = await gemini(key.key, "test/reasoning", "generateContent", {
			...ask(`think ${m}`),
			generationConfig: { thinkingConfig: { includeThoughts: true, thinkingLevel: "HIGH" } },
		});
		const body = (await res.json()) as { candidates: { content: { parts: Json[] } }[] };
		expect(res.status, JSON.stringify(body)).toBe(200);
		expect((await engineCall(m)).body).toMatchObject({
			reasoning_effort: "high",
			chat_template_kwargs: { enable_thinking: true },
		});
		const parts = body.candidates[0]?.content.parts ?? [];
		expect(parts[0]).toMatchObject({ thought: true, text: expect.any(String) });
		expect(parts.at(-1)).toMatchObject({ text: expect.stringContaining(m) });
		expect(parts.at(-1)).not.toHaveProperty("thought");

		const off = marker();
		const quiet = await gemini(key.key, "test/reasoning", "generateContent", {
			...ask(`quiet ${off}`),
			generationConfig: { thinkingConfig: { thinkingBudget: 0, thinkingLevel: "HIGH" } },
		});
		expect(quiet.status).toBe(200);
		const sent = (await engineCall(off)).body;
		expect(sent).toMatchObject({ chat_template_kwargs: { enable_thinking: false } });
		expect(sent).not.toHaveProperty("reasoning_effort");
	});
});

describe("scopes, browser keys and candidates, as on chat", () => {
	it("serves a browser key from its origin only, caps maxOutputTokens at the key's max_tokens", async () => {
		const key = await createKey({
			name: "gemini-browser",
			balance_usd: 10,
			allowed_origins: ["https://app.example"],
			max_tokens: 7,
		});
		const from = (origin: string | null, body: Json) =>
			gw("/v1beta/models/test/ok:generateContent", {
				method: "POST",
				headers: { "x-goog-api-key": key.key, "content-type": "application/json", ...(origin ? { origin } : {}) },
				body: JSON.stringify(body),
			});
		await expectError(await from(null, ask("hi")), 403, "PERMISSION_DENIED");
		await expectError(await from("https://evil.example", ask("hi")), 403, "PERMISSION_DENIED");
		const m = marker();
		const ok = await from("https://app.example", { ...ask(`browser ${m}`), generationConfig: { maxOutputTokens: 500 } });
		expect(ok.status, await ok.clone().text()).toBe(200);
		expect(ok.headers.get("access-control-allow-origin")).toBe("https://app.example");
		expect((await engineCall(m)).body?.max_tokens).toBe(7);
	});

	it("holds candidateCount like n: every candidate answered and billed, more than max_n refused", async () => {
		const key = await createKey({ name: "gemini-candidates", balance_usd: 10 });
		const m = marker();
		const res = await gemini(key.key, "test/ok", "generateContent", {
			...ask(`two ${m}`),
			generationConfig: { candidateCount: 2, maxOutputTokens: 20 },
		});
		const body = (await res.json()) as { candidates: { index: number }[]; usageMetadata: { candidatesTokenCount: number } };
		expect(res.status, JSON.stringify(body)).toBe(200);
		expect((await engineCall(m)).body?.n).toBe(2);
		expect(body.candidates.map((c) => c.index)).toEqual([0, 1]);
		const row = await usageRecordOf(key.id, res.headers.get("x-request-id") as string);
		expect(row.completion_tokens).toBe(body.usageMetadata.candidatesTokenCount);
		const many = await gemini(key.key, "test/ok", "generateContent", {
			...ask("hi"),
			generationConfig: { candidateCount: 1000 },
		});
		await expectError(many, 400, "INVALID_ARGUMENT");
	});
});

describe("Gemini from a browser", () => {
	it("answers a preflight allowing Google's key header", async () => {
		const res = await gw("/v1beta/models/test/ok:generateContent", {
			method: "OPTIONS",
			headers: {
				origin: "https://app.example",
				"access-control-request-method": "POST",
				"access-control-request-headers": "x-goog-api-key, x-goog-api-client, content-type",
			},
		});
		expect(res.status).toBeLessThan(300);
		const allowed = (res.headers.get("access-control-allow-headers") ?? "").split(/,\s*/);
		expect(allowed).toEqual(expect.arrayContaining(["x-goog-api-key", "x-goog-api-client"]));
	});
});

describe("GET /v1beta/models", () => {
	it("lists the key's models as Gemini's Model, and one by its id with its /", async () => {
		const key = await createKey({ name: "gemini-models", balance_usd: 10, allowed_models: ["test/ok"] });
		const list = (await (await gw("/v1beta/models", { headers: { "x-goog-api-key": key.key } })).json()) as { models: Json[] };
		expect(list.models.map((m) => m.name)).toEqual(["models/test/ok"]);
		expect(list.models[0]).toMatchObject({
			outputTokenLimit: 1000,
			supportedGenerationMethods: expect.arrayContaining(["generateContent"]),
		});
		const one = await gw(`/v1beta/models/test/ok?key=${key.key}`);
		expect(((await one.json()) as Json).name).toBe("models/test/ok");
		await expectError(await gw(`/v1beta/models/test/reasoning?key=${key.key}`), 404, "NOT_FOUND");
	});
});
