/**
 * Legacy `POST /v1/completions` and `POST /v1/embeddings`: validated, held, routed, rewritten and
 * billed like chat, with the official openai SDK as a client. Test pricing: $1/Mtok in
 * (1_000 nano$/token), $2/Mtok out.
 */
import { env, runDurableObjectAlarm } from "cloudflare:test";
import type OpenAI from "openai";
import { describe, expect, it } from "vitest";
import type { LedgerInfo } from "../../src/ledger/durable/key-ledger";
import { admin, createKey, engineRequestsSince, gw, lastEngineId, readSse, sdkClient, waitFor } from "../support/gateway";
import { ledger } from "../support/ledger";

interface ErrorBody {
	error: { message: string; type: string; param: string | null; code: string | null };
}

interface UsageRow {
	model: string;
	prompt_tokens: number;
	completion_tokens: number;
	cost_nanos: number;
	status: string;
	estimated: boolean;
}

function post(path: string, key: string, body: Record<string, unknown>): Promise<Response> {
	return gw(path, {
		method: "POST",
		headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
		body: JSON.stringify(body),
	});
}

async function settled(keyId: string, records: number): Promise<{ info: LedgerInfo; rows: UsageRow[] }> {
	const info = await waitFor(async () => {
		const i = await ledger(keyId).info();
		if (i.openHolds !== 0) return null;
		if (i.outboxSize > 0) {
			await runDurableObjectAlarm(ledger(keyId));
			return null;
		}
		const n = await env.DB.prepare("SELECT COUNT(*) AS n FROM usage_records WHERE key_id = ?").bind(keyId).first<{ n: number }>();
		return n && n.n >= records ? i : null;
	}, 10_000);
	const rows = ((await (await admin(`/usage?key_id=${keyId}&limit=100`)).json()) as { data: UsageRow[] }).data;
	return { info, rows };
}

describe("POST /v1/completions", () => {
	it("answers through the official SDK with the gateway's model id, max_tokens defaulting to 16, billed from engine usage", async () => {
		const k = await createKey({ balance_usd: 1 });
		const since = await lastEngineId();
		const words = Array.from({ length: 30 }, (_, i) => `w${i}`).join(" ");
		const r = await sdkClient(k.key).completions.create({ model: "test/ok", prompt: words });
		expect(r.model).toBe("test/ok");
		expect(r.object).toBe("text_completion");
		expect(r.choices[0]?.text.split(" ")).toHaveLength(16);
		expect(r.choices[0]?.finish_reason).toBe("length");
		const [call] = await engineRequestsSince(since);
		expect(call?.path).toMatch(/\/v1\/completions$/);
		expect(call?.body).toMatchObject({ model: "engine-ok", max_tokens: 16, prompt: words });
		const { rows } = await settled(k.id, 1);
		expect(rows[0]).toMatchObject({
			model: "test/ok",
			prompt_tokens: r.usage?.prompt_tokens,
			completion_tokens: 16,
			estimated: false,
			status: "completed",
		});
		expect(rows[0]?.cost_nanos).toBe((r.usage?.prompt_tokens as number) * 1000 + 16 * 2000);
	});

	it("streams text_completion chunks with the gateway's model and exactly one usage chunk before [DONE]", async () => {
		const k = await createKey({ balance_usd: 1 });
		const stream = await sdkClient(k.key).completions.create({
			model: "test/ok",
			prompt: "one two three",
			max_tokens: 5,
			stream: true,
		});
		const chunks: OpenAI.Completions.Completion[] = [];
		for await (const c of stream) chunks.push(c);
		const text = chunks.map((c) => c.choices[0]?.text ?? "").join("");
		expect(text).toBe("Echo: one two three");
		expect(chunks.every((c) => c.model === "test/ok")).toBe(true);
		const usage = chunks.filter((c) => c.usage);
		expect(usage).toHaveLength(1);
		expect(usage[0]?.choices).toEqual([]);
		expect(usage[0]?.object).toBe("text_completion");
		const { rows } = await settled(k.id, 1);
		expect(rows[0]).toMatchObject({ completion_tokens: 4, status: "completed" });
	});

	it("holds every prompt × best_of, and refuses best_of below n", async () => {
		const k = await createKey({ balance_usd: 1 });
		const bad = await post("/v1/completions", k.key, { model: "test/ok", prompt: "x", n: 3, best_of: 2 });
		expect(bad.status).toBe(400);
		expect(((await bad.json()) as ErrorBody).error.param).toBe("best_of");
		// Two prompts × best_of 3 × 10 tokens: 60 output tokens held; 3 extra… the reserve needs 5 × 10 × 2_000.
		const poor = await createKey({ balance_usd: 0.00005 });
		const refused = await post("/v1/completions", poor.key, { model: "test/ok", prompt: ["a", "b"], best_of: 3, max_tokens: 10 });
		expect(refused.status).toBe(402);
		const ok = await post("/v1/completions", k.key, { model: "test/ok", prompt: ["a b", "c d"], n: 2, max_tokens: 10 });
		expect(ok.status).toBe(200);
		const body = (await ok.json()) as { choices: Array<{ text: string }> };
		expect(body.choices).toHaveLength(4);
	});

	it("validates prompt and refuses embeddings models and web search", async () => {
		const k = await createKey({ balance_usd: 1 });
		const noPrompt = await post("/v1/completions", k.key, { model: "test/ok" });
		expect(noPrompt.status).toBe(400);
		expect(((await noPrompt.json()) as ErrorBody).error.param).toBe("prompt");
		const wrongType = await post("/v1/completions", k.key, { model: "test/ok", prompt: [1, "a"] });
		expect(wrongType.status).toBe(400);
		const embed = await post("/v1/completions", k.key, { model: "test/embed", prompt: "x" });
		expect(embed.status).toBe(400);
		expect(((await embed.json()) as ErrorBody).error).toMatchObject({ param: "model", code: "unsupported_model" });
		const online = await post("/v1/completions", k.key, { model: "test/ok:online", prompt: "x" });
		expect(online.status).toBe(400);
		expect((await ledger(k.id).info()).openHolds).toBe(0);
	});

	it("ends a stalled engine's stream with the timeout error frame, like chat", async () => {
		const k = await createKey({ balance_usd: 1 });
		const res = await post("/v1/completions", k.key, { model: "test/trickle", prompt: "x", stream: true });
		const frames = await readSse(res);
		expect((JSON.parse(frames.at(-1) as string) as ErrorBody).error.code).toBe("upstream_timeout");
		const { rows } = await settled(k.id, 1);
		expect(rows[0]?.status).toBe("engine_error");
	});
});

describe("POST /v1/embeddings", () => {
	it("embeds through the official SDK, billed for input tokens only", async () => {
		const k = await createKey({ balance_usd: 1 });
		const since = await lastEngineId();
		const r = await sdkClient(k.key).embeddings.create({ model: "test/embed", input: ["hello world", "second input"] });
		expect(r.model).toBe("test/embed");
		expect(r.data).toHaveLength(2);
		expect(r.data[0]?.embedding.length).toBe(8);
		const [call] = await engineRequestsSince(since);
		expect(call?.path).toMatch(/\/v1\/embeddings$/);
		expect(call?.body?.model).toBe("engine-embed");
		const { rows } = await settled(k.id, 1);
		expect(rows[0]).toMatchObject({ model: "test/embed", completion_tokens: 0, status: "completed", estimated: false });
		expect(rows[0]?.prompt_tokens).toBe(r.usage.prompt_tokens);
		expect(rows[0]?.cost_nanos).toBe(r.usage.prompt_tokens * 1000);
	});

	it("passes dimensions and base64 through", async () => {
		const k = await createKey({ balance_usd: 1 });
		const res = await post("/v1/embeddings", k.key, {
			model: "test/embed",
			input: "x",
			dimensions: 4,
			encoding_format: "base64",
		});
		expect(res.status).toBe(200);
		const body = (await res.json()) as { data: Array<{ embedding: string }> };
		expect(typeof body.data[0]?.embedding).toBe("string");
		expect(Buffer.from(body.data[0]?.embedding as string, "base64").byteLength).toBe(16);
	});

	it("validates input and refuses chat models, and chat refuses embeddings models", async () => {
		const k = await createKey({ balance_usd: 1 });
		const cases: Array<[Record<string, unknown>, string]> = [
			[{ model: "test/embed" }, "input"],
			[{ model: "test/embed", input: [] }, "input"],
			[{ model: "test/embed", input: Array.from({ length: 2049 }, () => "x") }, "input"],
			[{ model: "test/embed", input: "x", encoding_format: "hex" }, "encoding_format"],
			[{ model: "test/ok", input: "x" }, "model"],
		];
		for (const [body, param] of cases) {
			const res = await post("/v1/embeddings", k.key, body);
			expect(res.status, JSON.stringify(body).slice(0, 80)).toBe(400);
			expect(((await res.json()) as ErrorBody).error.param).toBe(param);
		}
		const tooLong = await post("/v1/embeddings", k.key, { model: "test/embed", input: "x".repeat(4000) });
		expect(((await tooLong.json()) as ErrorBody).error.code).toBe("context_length_exceeded");
		const chatRes = await gw("/v1/chat/completions", {
			method: "POST",
			headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
			body: JSON.stringify({ model: "test/embed", messages: [{ role: "user", content: "hi" }] }),
		});
		expect(chatRes.status).toBe(400);
		expect(((await chatRes.json()) as ErrorBody).error).toMatchObject({ param: "model", code: "unsupported_model" });
		expect((await ledger(k.id).info()).openHolds).toBe(0);
	});

	it("answers 402 on an empty key and lists the model with its capability", async () => {
		const k = await createKey({ balance_usd: 0 });
		expect((await post("/v1/embeddings", k.key, { model: "test/embed", input: "x" })).status).toBe(402);
		const models = (await (await gw("/v1/models", { headers: { authorization: `Bearer ${k.key}` } })).json()) as {
			data: Array<{ id: string; capabilities?: string[] }>;
		};
		expect(models.data.find((m) => m.id === "test/embed")?.capabilities).toContain("embeddings");
	});
});
