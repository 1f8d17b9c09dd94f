/**
 * The ResponseStore keeps what it must: megabyte inputs and outputs, long previous_response_id
 * chains, deleted and expired turns a live response continues from, the old storage layout, and
 * the conversation size limit.
 */
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { ResponseInputItem } from "../../../src/responses/item-schema";
import type { ResponseObject } from "../../../src/responses/response-object";
import type { ResponseStore } from "../../../src/responses/response-store";
import { createKey, engineRequestsSince, gw, lastEngineId, readSse, waitFor } from "../../support/gateway";
import { created, get, post, type ResponseJson, retrieved, settled } from "../../support/responses";

function outputText(r: ResponseJson): string {
	return r.output
		.filter((o) => o.type === "message")
		.flatMap((o) => o.content ?? [])
		.map((p) => p.text)
		.join("");
}

async function tagged(since: number, tag: string) {
	return (await engineRequestsSince(since)).filter((r) => JSON.stringify(r.body).includes(tag));
}

/** `bytes` of UTF-8 without spaces (one "word"): emoji and accents make sure no character is cut in two. */
function bigWord(bytes: number, seed: string): string {
	const unit = `${seed}é😀abc`;
	const unitBytes = new TextEncoder().encode(unit).length;
	return unit.repeat(Math.ceil(bytes / unitBytes));
}

/** `bytes` of words: the fake engine echoes at most max_output_tokens of them, so the output stays small. */
function bigWords(bytes: number, seed: string): string {
	return `${seed} ${"lorem ipsum dolor sit amet ".repeat(Math.ceil(bytes / 27))}`;
}

async function inputItems(key: string, id: string) {
	const res = await get(key, `${id}/input_items?order=asc`);
	expect(res.status).toBe(200);
	return (await res.json()) as { data: Array<{ type: string; content: Array<{ type: string; text: string }> }> };
}

describe("large responses stay retrievable", () => {
	it("stores a 1.5 MB input and its 1.5 MB output (GET and input_items)", async () => {
		const { key } = await createKey({ balance_usd: 100 });
		// 500 words of 3 kB: the engine streams the echo a word an event (each well under the event
		// limit) and within test/big's 1,000-token cap, so the output is the whole 1.5 MB.
		const input = Array.from({ length: 500 }, (_, i) => bigWord(3_000, `w${i}`)).join(" ");
		const r = await created(key, { model: "test/big", input });
		expect(r.status).toBe("completed");
		expect(outputText(r)).toBe(`Echo: ${input}`);
		const got = await retrieved(key, r.id);
		expect(got.status).toBe("completed");
		expect(outputText(got)).toBe(`Echo: ${input}`);
		const items = await inputItems(key, r.id);
		expect(items.data).toHaveLength(1);
		expect(items.data[0]?.content[0]?.text).toBe(input);
	});

	it("stores a streamed 1.5 MB response once the stream ends", async () => {
		const { key } = await createKey({ balance_usd: 100 });
		// Words: one 1.5 MB word would be one SSE event, over the chat stream's event limit.
		const input = bigWords(1_500_000, "streamed");
		const res = await post(key, { model: "test/big", input, stream: true, max_output_tokens: 8 });
		expect(res.status).toBe(200);
		const frames = await readSse(res);
		const done = JSON.parse(frames.at(-1) ?? "{}") as { type: string; response: ResponseJson };
		expect(done.type).toBe("response.incomplete");
		const got = await settled(key, done.response.id);
		expect(got.status).toBe("incomplete");
		expect(outputText(got)).toBe(outputText(done.response));
		expect((await inputItems(key, got.id)).data[0]?.content[0]?.text).toBe(input);
	});

	it("runs a background response with an input over one row and keeps it", async () => {
		const { key } = await createKey({ balance_usd: 100 });
		const input = bigWords(700_000, "background-big");
		const r = await created(key, { model: "test/big", input, background: true, max_output_tokens: 4 });
		const done = await settled(key, r.id);
		expect(done.status).toBe("incomplete");
		expect((await inputItems(key, r.id)).data[0]?.content[0]?.text).toBe(input);
	});

	it("chains 8 turns of 300 KB with previous_response_id, every turn retrievable", async () => {
		const { key } = await createKey({ balance_usd: 100 });
		const turns: Array<{ id: string; input: string }> = [];
		let previous: string | undefined;
		let last: ResponseJson | undefined;
		for (let i = 0; i < 8; i++) {
			const input = bigWords(300_000, `turn-${i}`);
			last = await created(key, { model: "test/big", input, max_output_tokens: 4, previous_response_id: previous });
			turns.push({ id: last.id, input });
			previous = last.id;
		}
		// The engine saw the whole conversation: eight inputs of 300 KB, about 75,000 tokens each.
		expect(last?.usage?.input_tokens).toBeGreaterThan(8 * 70_000);
		for (const t of turns) {
			expect((await retrieved(key, t.id)).status).toBe("incomplete");
			const items = await inputItems(key, t.id);
			expect(items.data).toHaveLength(1);
			expect(items.data[0]?.content[0]?.text).toBe(t.input);
		}
	});

	it("keeps a conversation going from a deleted response", async () => {
		const { key } = await createKey();
		const since = await lastEngineId();
		const first = await created(key, { model: "test/ok", input: "remember tangerine" });
		const second = await created(key, { model: "test/ok", input: "second turn", previous_response_id: first.id });
		const del = await gw(`/v1/responses/${first.id}`, { method: "DELETE", headers: { authorization: `Bearer ${key}` } });
		expect(del.status).toBe(200);
		expect((await get(key, first.id)).status).toBe(404);
		const third = await created(key, { model: "test/ok", input: "third turn", previous_response_id: second.id });
		expect(third.status).toBe("completed");
		const sent = (await tagged(since, "third turn")).at(-1)?.body?.messages as Array<{ content: unknown }>;
		expect(JSON.stringify(sent)).toContain("remember tangerine");
		// The deleted one cannot be continued from directly.
		expect((await post(key, { model: "test/ok", input: "x", previous_response_id: first.id })).status).toBe(404);
	});

	it("keeps expired responses a live one continues from, and removes them with it", async () => {
		const { key, id } = await createKey();
		const stub = env.RESPONSES.get(env.RESPONSES.idFromName(id)) as DurableObjectStub<ResponseStore>;
		const since = await lastEngineId();
		const first = await created(key, { model: "test/ok", input: "expiring apricot" });
		const second = await created(key, { model: "test/ok", input: "expiring two", previous_response_id: first.id });
		const third = await created(key, { model: "test/ok", input: "live three", previous_response_id: second.id });
		const old = Date.now() - 31 * 24 * 60 * 60 * 1000;
		await runInDurableObject(stub, (_i, state) => {
			state.storage.sql.exec("UPDATE turns SET created_at = ? WHERE id IN (?, ?)", old, first.id, second.id);
		});
		await runDurableObjectAlarm(stub);
		expect((await get(key, first.id)).status).toBe(404);
		expect((await get(key, second.id)).status).toBe(404);
		const fourth = await created(key, { model: "test/ok", input: "live four", previous_response_id: third.id });
		expect(fourth.status).toBe("completed");
		const sent = (await tagged(since, "live four")).at(-1)?.body?.messages;
		expect(JSON.stringify(sent)).toContain("expiring apricot");
		const count = () =>
			runInDurableObject(stub, (_i, state) => ({
				turns: state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM turns").one().n,
				docs: state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM docs").one().n,
			}));
		expect((await count()).turns).toBe(4);
		for (const r of [fourth, third]) {
			await gw(`/v1/responses/${r.id}`, { method: "DELETE", headers: { authorization: `Bearer ${key}` } });
		}
		expect(await count()).toEqual({ turns: 0, docs: 0 });
	});

	it("reads responses stored in the old layout and continues from them", async () => {
		const { key, id } = await createKey();
		const stub = env.RESPONSES.get(env.RESPONSES.idFromName(id)) as DurableObjectStub<ResponseStore>;
		const legacyId = "resp_legacy0000000000000000";
		const input = [
			{
				type: "message",
				id: "msg_l1",
				role: "user",
				status: "completed",
				content: [{ type: "input_text", text: "old question" }],
			},
		];
		const output = [
			{
				type: "message",
				id: "msg_l2",
				role: "assistant",
				status: "completed",
				content: [{ type: "output_text", text: "old answer", annotations: [], logprobs: [] }],
			},
		];
		const prior = [
			{
				type: "message",
				id: "msg_l0",
				role: "user",
				status: "completed",
				content: [{ type: "input_text", text: "older context" }],
			},
		];
		const createdAt = Date.now() - 1000;
		const record = {
			id: legacyId,
			response: { id: legacyId, object: "response", status: "completed", model: "test/ok", output, background: false },
			inputItems: input,
			contextItems: [...prior, ...input, ...output],
			createdAt,
		};
		await runInDurableObject(stub, (_i, state) => {
			state.storage.sql.exec(
				"CREATE TABLE IF NOT EXISTS responses (id TEXT PRIMARY KEY, record TEXT NOT NULL, created_at INTEGER NOT NULL)",
			);
			state.storage.sql.exec(
				"INSERT INTO responses (id, record, created_at) VALUES (?, ?, ?)",
				legacyId,
				JSON.stringify(record),
				createdAt,
			);
		});
		const got = await retrieved(key, legacyId);
		expect(got.status).toBe("completed");
		expect(outputText(got)).toBe("old answer");
		expect((await inputItems(key, legacyId)).data.map((i) => i.content[0]?.text)).toEqual(["old question"]);
		const since = await lastEngineId();
		const next = await created(key, { model: "test/ok", input: "new question", previous_response_id: legacyId });
		expect(next.status).toBe("completed");
		const sent = (await tagged(since, "new question")).at(-1)?.body?.messages as Array<{ role: string; content: unknown }>;
		expect(sent.map((m) => m.content)).toEqual(["older context", "old question", "old answer", "new question"]);
	});

	it("shows a response whose output could not be stored as failed, with an error", async () => {
		const { key, id } = await createKey();
		const stub = env.RESPONSES.get(env.RESPONSES.idFromName(id)) as DurableObjectStub<ResponseStore>;
		await runInDurableObject(stub, (instance) => {
			(instance as unknown as { finish: () => never }).finish = () => {
				throw new Error("simulated storage failure");
			};
		});
		const res = await post(key, { model: "test/ok", input: "will not be stored", stream: true });
		expect(res.status).toBe(200);
		const frames = await readSse(res);
		const done = JSON.parse(frames.at(-1) ?? "{}") as { type: string; response: ResponseJson };
		expect(done.type).toBe("response.completed");
		const got = await waitFor(async () => {
			const r = await retrieved(key, done.response.id);
			return r.status === "failed" ? r : null;
		});
		expect(got.error?.code).toBe("storage_failed");
	});
});

describe("the conversation size limit", () => {
	it("refuses a conversation that could never be stored (the store's own check)", async () => {
		const { id } = await createKey();
		const stub = env.RESPONSES.get(env.RESPONSES.idFromName(id)) as DurableObjectStub<ResponseStore>;
		const item = (text: string) =>
			({
				type: "message",
				id: `msg_${text.length}`,
				role: "user",
				status: "completed",
				content: [{ type: "input_text", text }],
			}) as ResponseInputItem;
		// The store keeps what it is given: a shell and items with only the fields this test reads.
		const shell = (rid: string) =>
			({ id: rid, object: "response", status: "completed", output: [] }) as unknown as ResponseObject;
		const result = await runInDurableObject(stub, (instance) => {
			const first = instance.begin({
				id: "resp_a",
				previousId: null,
				createdAt: Date.now(),
				response: shell("resp_a"),
				input: [item("x".repeat(600))],
				maxChars: 1000,
			});
			const second = instance.begin({
				id: "resp_b",
				previousId: "resp_a",
				createdAt: Date.now(),
				response: shell("resp_b"),
				input: [item("y".repeat(600))],
				maxChars: 1000,
			});
			return { first: first.ok, second, stored: instance.get("resp_b") };
		});
		expect(result.first).toBe(true);
		expect(result.second).toMatchObject({ ok: false, reason: "too_large" });
		expect(result.stored).toBeNull();
	});
});
