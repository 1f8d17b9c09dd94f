import { env, SELF } from "cloudflare:test";
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { admin, createKey, engineRequests, engineRequestsSince, gw, lastEngineId, waitFor } from "../../support/gateway";

function client(key: string): OpenAI {
	return new OpenAI({
		apiKey: key,
		baseURL: "http://gateway.test/v1",
		maxRetries: 0,
		fetch: (input, init) => SELF.fetch(input instanceof Request ? input : String(input), init as RequestInit),
	});
}

async function usageRows(keyId: string) {
	const ledger = env.LEDGER.get(env.LEDGER.idFromName(keyId));
	return waitFor(async () => {
		const info = await ledger.info();
		return info.openHolds === 0 ? info : null;
	});
}

describe("Responses API through the official SDK", () => {
	it("creates a response from a string input with output_text and usage", async () => {
		const { key, id } = await createKey();
		const since = await lastEngineId();
		const { data: r, response } = await client(key)
			.responses.create({ model: "test/ok", input: "hello responses", instructions: "Be terse." })
			.withResponse();
		expect(response.headers.get("x-venym-lane")).toBe("compat");
		expect(r.object).toBe("response");
		expect(r.id).toMatch(/^resp_/);
		expect(r.status).toBe("completed");
		expect(r.model).toBe("test/ok");
		expect(r.output_text).toBe("Echo: hello responses");
		expect(r.usage?.input_tokens).toBeGreaterThan(0);
		expect(r.usage?.output_tokens).toBe(3);
		expect(r.usage?.total_tokens).toBe((r.usage?.input_tokens ?? 0) + 3);
		const [sent] = await engineRequestsSince(since);
		const messages = sent?.body?.messages as Array<{ role: string; content: unknown }>;
		expect(messages[0]).toEqual({ role: "system", content: "Be terse." });
		expect(messages[1]?.role).toBe("user");
		const info = await usageRows(id);
		expect(info.spentNanos).toBeGreaterThan(0);
	});

	it("streams events in order with rising sequence numbers", async () => {
		const { key } = await createKey();
		const stream = await client(key).responses.create({ model: "test/ok", input: "one two three", stream: true });
		const types: string[] = [];
		const seqs: number[] = [];
		let text = "";
		let final: OpenAI.Responses.Response | undefined;
		for await (const e of stream) {
			types.push(e.type);
			seqs.push(e.sequence_number);
			if (e.type === "response.output_text.delta") text += e.delta;
			if (e.type === "response.completed") final = e.response;
		}
		expect(seqs).toEqual(seqs.map((_, i) => i));
		expect(types.slice(0, 4)).toEqual([
			"response.created",
			"response.in_progress",
			"response.output_item.added",
			"response.content_part.added",
		]);
		expect(types.slice(-4)).toEqual([
			"response.output_text.done",
			"response.content_part.done",
			"response.output_item.done",
			"response.completed",
		]);
		expect(text).toBe("Echo: one two three");
		expect(final?.usage?.output_tokens).toBe(4);
		expect(final?.status).toBe("completed");
	});

	it("chains turns with previous_response_id and keeps them per key", async () => {
		const a = await createKey();
		const b = await createKey();
		const since = await lastEngineId();
		const first = await client(a.key).responses.create({ model: "test/ok", input: "my name is Ada" });
		const second = await client(a.key).responses.create({
			model: "test/ok",
			input: "what is my name",
			previous_response_id: first.id,
		});
		expect(second.status).toBe("completed");
		const sent = (await engineRequestsSince(since)).at(-1)?.body?.messages as Array<{ role: string; content: unknown }>;
		expect(sent.map((m) => m.role)).toEqual(["user", "assistant", "user"]);
		expect(JSON.stringify(sent[0])).toContain("my name is Ada");
		expect(sent[1]?.content).toBe("Echo: my name is Ada");
		await expect(
			client(b.key).responses.create({ model: "test/ok", input: "x", previous_response_id: first.id }),
		).rejects.toMatchObject({ status: 404 });
		await expect(client(b.key).responses.retrieve(first.id)).rejects.toMatchObject({ status: 404 });
		const got = await client(a.key).responses.retrieve(first.id);
		expect(got.output_text).toBe("Echo: my name is Ada");
		const items = await client(a.key).responses.inputItems.list(second.id);
		expect(items.data).toHaveLength(1);
	});

	it("runs a background response to completion and polls it", async () => {
		const { key } = await createKey();
		const c = client(key);
		const queued = await c.responses.create({ model: "test/ok", input: "in the background", background: true });
		expect(queued.status).toBe("queued");
		const done = await waitFor(async () => {
			const r = await c.responses.retrieve(queued.id);
			return r.status === "completed" ? r : null;
		}, 10_000);
		expect(done.output_text).toBe("Echo: in the background");
	});

	it("cancels a running background response", async () => {
		const { key, id } = await createKey();
		const c = client(key);
		const since = await lastEngineId();
		const queued = await c.responses.create({ model: "test/slow", input: "slow one", background: true });
		// Cancel once the run is at the engine (the slow engine's answer takes 2 s).
		await waitFor(async () => (await c.responses.retrieve(queued.id)).status === "in_progress");
		await waitFor(async () => (await engineRequests({ since, contains: "slow one" })).length === 1);
		const cancelled = await c.responses.cancel(queued.id);
		expect(cancelled.status).toBe("cancelled");
		const seen = await waitFor(async () =>
			(await engineRequestsSince(since)).find((r) => JSON.stringify(r.body).includes("slow one") && r.aborted),
		);
		expect(seen.finished).toBe(false);
		expect((await c.responses.retrieve(queued.id)).status).toBe("cancelled");
		const rows = await waitFor(async () => {
			const body = (await (await admin(`/usage?key_id=${id}`)).json()) as { data: Array<{ status: string }> };
			return body.data.length ? body.data : null;
		}, 10_000);
		expect(rows.map((r) => r.status)).toEqual(["client_disconnected"]);
	});

	it("round-trips a function call", async () => {
		const { key } = await createKey();
		const c = client(key);
		const tools: OpenAI.Responses.Tool[] = [
			{
				type: "function",
				name: "lookup",
				description: "look up",
				parameters: { type: "object", properties: { query: { type: "string" } } },
				strict: false,
			},
		];
		const r1 = await c.responses.create({ model: "test/ok", input: "weather in Paris", tools });
		const call = r1.output.find((o) => o.type === "function_call");
		expect(call).toMatchObject({ type: "function_call", name: "lookup" });
		if (call?.type !== "function_call") throw new Error("no call");
		expect(JSON.parse(call.arguments)).toEqual({ query: "weather in Paris" });
		const r2 = await c.responses.create({
			model: "test/ok",
			previous_response_id: r1.id,
			tools,
			input: [{ type: "function_call_output", call_id: call.call_id, output: "sunny" }],
		});
		expect(r2.output_text).toBe("Tool said: sunny");
	});

	it("is incomplete when the output cap cuts it", async () => {
		const { key } = await createKey();
		const r = await client(key).responses.create({ model: "test/ok", input: "a b c d e f g h", max_output_tokens: 3 });
		expect(r.status).toBe("incomplete");
		expect(r.incomplete_details?.reason).toBe("max_output_tokens");
	});

	it("makes the SDK raise when the engine fails mid-stream", async () => {
		const { key } = await createKey();
		const stream = await client(key).responses.create({ model: "test/midstream", input: "x y z", stream: true });
		const types: string[] = [];
		await expect(
			(async () => {
				for await (const e of stream) types.push(e.type);
			})(),
		).rejects.toThrow();
		expect(types).toContain("response.output_text.delta");
	});

	it("sends the error event then response.failed with usage when the engine fails mid-stream", async () => {
		const { key } = await createKey();
		const res = await gw("/v1/responses", {
			method: "POST",
			headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
			body: JSON.stringify({ model: "test/midstream", input: "x y z", stream: true }),
		});
		const events = (await res.text())
			.split("\n\n")
			.filter((f) => f.trim())
			.map(
				(f) =>
					JSON.parse((f.split("\n").find((l) => l.startsWith("data:")) ?? "").slice(5)) as {
						type: string;
						response?: OpenAI.Responses.Response;
					},
			);
		const types = events.map((e) => e.type);
		expect(types.at(-2)).toBe("error");
		expect(types.at(-1)).toBe("response.failed");
		expect(types.filter((t) => t === "response.completed")).toHaveLength(0);
		const failed = events.at(-1)?.response;
		expect(failed?.status).toBe("failed");
		expect(failed?.error?.code).toBeTruthy();
	});

	it("refuses background with stream, unknown fields, and unknown previous ids with clear errors", async () => {
		const { key } = await createKey();
		const c = client(key);
		await expect(c.responses.create({ model: "test/ok", input: "x", background: true, stream: true })).rejects.toMatchObject({
			status: 400,
		});
		await expect(
			c.responses.create({
				model: "test/ok",
				input: "x",
				frobnicate: 1,
			} as unknown as OpenAI.Responses.ResponseCreateParamsNonStreaming),
		).rejects.toMatchObject({ status: 400, param: "frobnicate" });
		await expect(c.responses.create({ model: "test/ok", input: "x", previous_response_id: "resp_nope" })).rejects.toMatchObject({
			status: 404,
		});
		await expect(c.responses.create({ model: "nope/model", input: "x" })).rejects.toMatchObject({ status: 404 });
	});

	it("lists input items and deletes a response", async () => {
		const { key } = await createKey();
		const c = client(key);
		const r = await c.responses.create({
			model: "test/ok",
			input: [
				{ role: "user", content: [{ type: "input_text", text: "first" }] },
				{ role: "user", content: "second" },
			],
		});
		const items = await c.responses.inputItems.list(r.id, { order: "asc" });
		expect(items.data.map((i) => i.type)).toEqual(["message", "message"]);
		expect(items.data[0]?.id).toMatch(/^msg_/);
		await c.responses.delete(r.id);
		await expect(c.responses.retrieve(r.id)).rejects.toMatchObject({ status: 404 });
	});

	it("bills responses and background runs like chat completions", async () => {
		const { key, id } = await createKey();
		const c = client(key);
		await c.responses.create({ model: "test/ok", input: "billed" });
		const bg = await c.responses.create({ model: "test/ok", input: "billed in background", background: true });
		await waitFor(async () => ((await c.responses.retrieve(bg.id)).status === "completed" ? true : null), 10_000);
		const ledger = env.LEDGER.get(env.LEDGER.idFromName(id));
		const rows = await waitFor(async () => {
			const res = await admin(`/usage?key_id=${id}`);
			const body = (await res.json()) as { data: Array<{ status: string; cost_nanos: number; model: string }> };
			return body.data.length === 2 ? body.data : null;
		}, 10_000);
		expect(rows.every((r) => r.status === "completed" && r.model === "test/ok")).toBe(true);
		const info = await ledger.info();
		expect(info.spentNanos).toBe(rows.reduce((a, r) => a + r.cost_nanos, 0));
		expect(info.openHolds).toBe(0);
	});

	it("keeps what a stream produced, marked cancelled, when the client leaves mid-stream", async () => {
		const { key } = await createKey();
		const res = await gw("/v1/responses", {
			method: "POST",
			headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
			body: JSON.stringify({ model: "test/slow", input: "leave early", stream: true }),
		});
		const reader = (res.body as ReadableStream<Uint8Array>).getReader();
		let text = "";
		while (!text.includes("response.output_text.delta")) text += new TextDecoder().decode((await reader.read()).value);
		const id = /"id":"(resp_[0-9a-f]+)"/.exec(text)?.[1] as string;
		await reader.cancel();
		const stored = await waitFor(async () => {
			const r = await gw(`/v1/responses/${id}`, { headers: { authorization: `Bearer ${key}` } });
			return r.status === 200 ? ((await r.json()) as OpenAI.Responses.Response) : null;
		});
		expect(stored.status, JSON.stringify(stored)).toBe("cancelled");
		expect(stored.output.length).toBeGreaterThan(0);
	});
});
