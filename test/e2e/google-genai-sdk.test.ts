// Google's official SDK (@google/genai) against the gateway: the Gemini lane as Google's clients use
// it, unmodified but for the base URL. generateContent, generateContentStream with a function call
// (test/qwen-loop calls `run_shell_command`) and its answer sent back, countTokens, and the errors
// the SDK throws carrying the gateway's status and message.
import { ApiError, GoogleGenAI } from "@google/genai";
import { describe, expect, it } from "vitest";
import { admin, createKey, engineRequestsWith, gatewayUrl, marker, waitFor } from "./support";

function genai(apiKey: string): GoogleGenAI {
	return new GoogleGenAI({ apiKey, httpOptions: { baseUrl: gatewayUrl(), timeout: 20_000 } });
}

interface Row {
	request_id: string;
	prompt_tokens: number;
	completion_tokens: number;
	cost_nanos: number;
	lane: string | null;
	status: string;
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

const SHELL = {
	functionDeclarations: [
		{
			name: "run_shell_command",
			description: "Runs a shell command",
			parametersJsonSchema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] },
		},
	],
};

describe("@google/genai against the gateway", () => {
	it("generateContent answers a GenerateContentResponse, recorded on the gemini lane", async () => {
		const key = await createKey({ name: "genai-generate" });
		const text = marker("genai");
		const r = await genai(key.key).models.generateContent({
			model: "test/dev-echo",
			contents: text,
			config: { systemInstruction: "Be brief.", temperature: 0.5, maxOutputTokens: 100_000 },
		});
		expect(r.text).toBe(`Echo: ${text}`);
		expect(r.candidates?.[0]?.finishReason).toBe("STOP");
		expect(r.modelVersion).toBe("test/dev-echo");
		expect(r.responseId).toBeTruthy();
		const [row] = await rowsOf(key.id, 1);
		expect(row).toMatchObject({ lane: "gemini", status: "completed" });
		expect(r.usageMetadata).toMatchObject({
			promptTokenCount: row?.prompt_tokens,
			candidatesTokenCount: row?.completion_tokens,
			totalTokenCount: (row?.prompt_tokens ?? 0) + (row?.completion_tokens ?? 0),
		});
		// maxOutputTokens is capped at the model's output limit, never refused for being large.
		const [sent] = await engineRequestsWith(text);
		expect(sent?.body).toMatchObject({ temperature: 0.5, messages: [{ role: "system", content: "Be brief." }, {}] });
		expect(sent?.body?.max_tokens).toBeLessThan(100_000);
	});

	it("generateContentStream streams a whole function call; its answer sent back is answered", async () => {
		const key = await createKey({ name: "genai-stream" });
		const ai = genai(key.key);
		const calls: { id?: string; name?: string; args?: Record<string, unknown> }[] = [];
		let finish: string | undefined;
		let usage: unknown;
		const ask = `Run echo hi ${marker("genai-stream")}`;
		for await (const chunk of await ai.models.generateContentStream({
			model: "test/qwen-loop",
			contents: ask,
			config: { tools: [SHELL] },
		})) {
			calls.push(...(chunk.functionCalls ?? []));
			finish = chunk.candidates?.[0]?.finishReason ?? finish;
			usage = chunk.usageMetadata ?? usage;
		}
		expect(calls).toHaveLength(1);
		expect(calls[0]).toMatchObject({ name: "run_shell_command", args: { command: "echo hi" } });
		expect(finish).toBe("STOP");
		expect(usage).toMatchObject({ promptTokenCount: expect.any(Number), candidatesTokenCount: expect.any(Number) });

		const call = calls[0] as { id?: string; name: string; args: Record<string, unknown> };
		let answer = "";
		for await (const chunk of await ai.models.generateContentStream({
			model: "test/qwen-loop",
			contents: [
				{ role: "user", parts: [{ text: ask }] },
				{ role: "model", parts: [{ functionCall: call, thoughtSignature: "venym-unsigned" }] },
				{ role: "user", parts: [{ functionResponse: { id: call.id, name: call.name, response: { output: "hi" } } }] },
			],
			config: { tools: [SHELL] },
		})) {
			answer += chunk.text ?? "";
		}
		expect(answer).toContain("Tool said: hi");
		const rows = await rowsOf(key.id, 2);
		expect(rows.every((r) => r.lane === "gemini" && r.cost_nanos > 0)).toBe(true);
	});

	it("countTokens counts the request, free", async () => {
		const key = await createKey({ name: "genai-count" });
		const ai = genai(key.key);
		const short = await ai.models.countTokens({ model: "test/ok", contents: "count these words" });
		const long = await ai.models.countTokens({ model: "test/ok", contents: "count these words ".repeat(30) });
		expect(short.totalTokens).toBeGreaterThan(0);
		expect(long.totalTokens).toBeGreaterThan(short.totalTokens ?? 0);
		const info = await admin<{ spent_usd: number }>(`/keys/${key.id}`);
		expect(info.spent_usd).toBe(0);
	});

	it("throws ApiError with the gateway's status and words: a wrong key, an empty balance, an unknown model", async () => {
		const refusal = async (apiKey: string, model: string): Promise<ApiError> => {
			try {
				await genai(apiKey).models.generateContent({ model, contents: "hi" });
			} catch (err) {
				if (err instanceof ApiError) return err;
				throw err;
			}
			throw new Error("answered");
		};
		const wrong = await refusal("vk-wrong-key", "test/ok");
		expect(wrong.status).toBe(401);
		expect(wrong.message).toContain("Incorrect API key provided.");
		const empty = await createKey({ name: "genai-empty", balance_usd: 0 });
		const broke = await refusal(empty.key, "test/ok");
		expect(broke.status).toBe(402);
		expect(broke.message).toContain("RESOURCE_EXHAUSTED");
		expect(broke.message).toContain("Insufficient balance");
		const key = await createKey({ name: "genai-404" });
		const missing = await refusal(key.key, "gemini-9-ultra");
		expect(missing.status).toBe(404);
		expect(missing.message).toContain("The model 'gemini-9-ultra' does not exist");
	});
});
