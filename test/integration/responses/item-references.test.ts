/**
 * Responses input `item_reference`: an earlier stored input or output item, named by id, is
 * resolved from the key's ResponseStore (through an index of item ids) and replaces the
 * reference in what the engine receives and in what this turn stores. Another key's item, an
 * unknown id and a deleted or expired response's items are a 404 that costs nothing.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ResponseStore } from "../../../src/responses/response-store";
import { splitText } from "../../../src/responses/stored-docs";
import { admin, createKey, engineRequests, gw, lastEngineId, readSse, waitFor } from "../../support/gateway";

interface OutputItem {
	type: string;
	id: string;
	role?: string;
	call_id?: string;
	name?: string;
	content?: Array<{ type: string; text: string }>;
}

interface ResponseJson {
	id: string;
	status: string;
	output: OutputItem[];
}

interface ErrorJson {
	error: { code: string | null; message: string; type: string; param: string | null };
}

type ChatMessage = { role: string; content: unknown; tool_calls?: Array<{ id: string; function: { name: string } }> };

function post(key: string, body: Record<string, unknown>): Promise<Response> {
	return gw("/v1/responses", {
		method: "POST",
		headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
		body: JSON.stringify(body),
	});
}

async function created(key: string, body: Record<string, unknown>): Promise<ResponseJson> {
	const res = await post(key, body);
	if (res.status !== 200) throw new Error(`POST /v1/responses: ${res.status} ${await res.text()}`);
	return (await res.json()) as ResponseJson;
}

async function retrieved(key: string, id: string): Promise<ResponseJson> {
	const res = await gw(`/v1/responses/${id}`, { headers: { authorization: `Bearer ${key}` } });
	if (res.status !== 200) throw new Error(`GET ${id}: ${res.status} ${await res.text()}`);
	return (await res.json()) as ResponseJson;
}

async function inputItems(key: string, id: string): Promise<OutputItem[]> {
	const res = await gw(`/v1/responses/${id}/input_items?order=asc`, { headers: { authorization: `Bearer ${key}` } });
	if (res.status !== 200) throw new Error(`GET ${id}/input_items: ${res.status} ${await res.text()}`);
	return ((await res.json()) as { data: OutputItem[] }).data;
}

/** The chat messages of the engine's latest request containing `marker`, made after `since`. */
async function sentWith(since: number, marker: string): Promise<ChatMessage[]> {
	const [last] = (await engineRequests({ since, contains: marker })).slice(-1);
	if (!last) throw new Error(`the engine received nothing with ${marker}`);
	return last.body?.messages as ChatMessage[];
}

function ref(id: string) {
	return { type: "item_reference", id };
}

function itemOf(r: ResponseJson, type: string): OutputItem {
	const item = r.output.find((o) => o.type === type);
	if (!item) throw new Error(`no ${type} item in ${JSON.stringify(r.output)}`);
	return item;
}

function store(keyId: string): DurableObjectStub<ResponseStore> {
	return env.RESPONSES.get(env.RESPONSES.idFromName(keyId)) as DurableObjectStub<ResponseStore>;
}

const TOOLS = [
	{
		type: "function",
		name: "lookup",
		description: "look up",
		parameters: { type: "object", properties: { query: { type: "string" } } },
	},
];

async function money(keyId: string): Promise<{ spent_usd: number; held_usd: number }> {
	const { spent_usd, held_usd } = (await (await admin(`/keys/${keyId}`)).json()) as { spent_usd: number; held_usd: number };
	return { spent_usd, held_usd };
}

/** The key's spend once earlier requests have settled (in waitUntil, after their answers). */
function settledMoney(keyId: string): Promise<{ spent_usd: number; held_usd: number }> {
	return waitFor(async () => {
		const m = await money(keyId);
		return m.held_usd === 0 ? m : null;
	});
}

/** A refused reference costs nothing: no engine call, no hold, no spend. */
async function expectNothingSpent(keyId: string, since: number, spentBefore = 0): Promise<void> {
	// Health checks (GET) may reach the engine meanwhile; no call that runs a model may.
	expect((await engineRequests({ since })).filter((r) => r.method !== "GET")).toEqual([]);
	expect(await money(keyId)).toEqual({ spent_usd: spentBefore, held_usd: 0 });
}

describe("item_reference input items", () => {
	it("answers a second turn that replays the first turn's items as references", async () => {
		const { key } = await createKey();
		const first = await created(key, { model: "test/ok", input: "my name is Ada" });
		const [question] = await inputItems(key, first.id);
		const answer = itemOf(first, "message");
		expect(answer.id).toMatch(/^msg_/);
		const since = await lastEngineId();
		const second = await created(key, {
			model: "test/ok",
			input: [ref(question?.id as string), ref(answer.id), { role: "user", content: "ref-turn: what is my name" }],
		});
		expect(second.status).toBe("completed");
		const sent = await sentWith(since, "ref-turn");
		expect(sent).toEqual([
			{ role: "user", content: "my name is Ada" },
			{ role: "assistant", content: "Echo: my name is Ada" },
			{ role: "user", content: "ref-turn: what is my name" },
		]);
		// This turn stores the resolved items, not the references.
		const stored = await inputItems(key, second.id);
		expect(stored.map((i) => [i.type, i.id, i.role])).toEqual([
			["message", question?.id, "user"],
			["message", answer.id, "assistant"],
			["message", stored[2]?.id, "user"],
		]);
		expect(stored[1]?.content?.[0]).toMatchObject({ type: "output_text", text: "Echo: my name is Ada" });
	});

	it("streams a turn with references, storing the resolved items", async () => {
		const { key } = await createKey();
		const first = await created(key, { model: "test/ok", input: "stream base" });
		const answer = itemOf(first, "message");
		const since = await lastEngineId();
		const res = await post(key, {
			model: "test/ok",
			stream: true,
			input: [ref(answer.id), { role: "user", content: "stream-turn" }],
		});
		expect(res.status).toBe(200);
		const frames = await readSse(res);
		const done = JSON.parse(frames.at(-1) ?? "{}") as { type: string; response: ResponseJson };
		expect(done.type).toBe("response.completed");
		expect((await sentWith(since, "stream-turn"))[0]).toEqual({ role: "assistant", content: "Echo: stream base" });
		const stored = await waitFor(async () => {
			const items = await inputItems(key, done.response.id).catch(() => null);
			return items?.length ? items : null;
		});
		expect(stored[0]).toMatchObject({ type: "message", id: answer.id, role: "assistant" });
	});

	it("resolves a reasoning item as the chat translation treats reasoning (not sent) and keeps it stored", async () => {
		const { key } = await createKey();
		const first = await created(key, { model: "test/reasoning", input: "think first" });
		const reasoning = itemOf(first, "reasoning");
		const answer = itemOf(first, "message");
		expect(reasoning.id).toMatch(/^rs_/);
		const since = await lastEngineId();
		const second = await created(key, {
			model: "test/reasoning",
			input: [{ role: "user", content: "think first" }, ref(reasoning.id), ref(answer.id), { role: "user", content: "rs-turn" }],
		});
		expect(second.status).toBe("completed");
		const sent = await sentWith(since, "rs-turn");
		expect(sent.map((m) => m.role)).toEqual(["user", "assistant", "user"]);
		expect(sent[1]?.content).toBe("Echo: think first");
		const stored = await inputItems(key, second.id);
		expect(stored[1]).toEqual(reasoning);
	});

	it("runs step 2 of a tool loop on a reasoning model from referenced items", async () => {
		const { key } = await createKey();
		const first = await created(key, { model: "test/reasoning", input: "weather in Paris", tools: TOOLS });
		const reasoning = itemOf(first, "reasoning");
		const call = itemOf(first, "function_call");
		expect(call.id).toMatch(/^fc_/);
		const since = await lastEngineId();
		const second = await created(key, {
			model: "test/reasoning",
			tools: TOOLS,
			input: [
				{ role: "user", content: "weather in Paris" },
				ref(reasoning.id),
				ref(call.id),
				{ type: "function_call_output", call_id: call.call_id, output: "sunny-step-2" },
			],
		});
		expect(itemOf(second, "message").content?.[0]?.text).toBe("Tool said: sunny-step-2");
		const sent = await sentWith(since, "sunny-step-2");
		expect(sent.map((m) => m.role)).toEqual(["user", "assistant", "tool"]);
		expect(sent[1]?.tool_calls?.map((c) => [c.id, c.function.name])).toEqual([[call.call_id, "lookup"]]);
	});

	it("is a 404 naming the id and the input index for an unknown id, costing nothing", async () => {
		const { key, id } = await createKey();
		const since = await lastEngineId();
		const res = await post(key, { model: "test/ok", input: [{ role: "user", content: "hi" }, ref("msg_nope")] });
		expect(res.status).toBe(404);
		const body = (await res.json()) as ErrorJson;
		expect(body.error.param).toBe("input[1].id");
		expect(body.error.message).toContain("msg_nope");
		expect(body.error.type).toBe("invalid_request_error");
		await expectNothingSpent(id, since);
	});

	it("is a 404 for another key's item, never its content", async () => {
		const a = await createKey();
		const b = await createKey();
		const first = await created(a.key, { model: "test/ok", input: "secret of key a" });
		const answer = itemOf(first, "message");
		const since = await lastEngineId();
		const res = await post(b.key, { model: "test/ok", input: [ref(answer.id), { role: "user", content: "leak?" }] });
		expect(res.status).toBe(404);
		const text = await res.text();
		expect(text).not.toContain("secret");
		expect((JSON.parse(text) as ErrorJson).error.param).toBe("input[0].id");
		await expectNothingSpent(b.id, since);
	});

	it("resolves a reused id to the most recent response's item", async () => {
		const { key } = await createKey();
		const reused = `msg_reused_${crypto.randomUUID().slice(0, 8)}`;
		const assistant = (text: string) => ({ type: "message", id: reused, role: "assistant", content: text });
		const older = await created(key, { model: "test/ok", input: [{ role: "user", content: "q" }, assistant("older copy")] });
		const newer = await created(key, { model: "test/ok", input: [{ role: "user", content: "q" }, assistant("newer copy")] });
		let since = await lastEngineId();
		// Not stored, so its resolved copy (same id) does not become the most recent itself.
		await created(key, { model: "test/ok", store: false, input: [ref(reused), { role: "user", content: "reused-1" }] });
		expect((await sentWith(since, "reused-1"))[0]).toEqual({ role: "assistant", content: "newer copy" });
		// With the newer one deleted, the older response's item is the most recent left.
		const del = await gw(`/v1/responses/${newer.id}`, { method: "DELETE", headers: { authorization: `Bearer ${key}` } });
		expect(del.status).toBe(200);
		since = await lastEngineId();
		await created(key, { model: "test/ok", store: false, input: [ref(reused), { role: "user", content: "reused-2" }] });
		expect((await sentWith(since, "reused-2"))[0]).toEqual({ role: "assistant", content: "older copy" });
		expect((await retrieved(key, older.id)).status).toBe("completed");
	});

	it("resolves references in a background response, and refuses a bad one before queueing", async () => {
		const { key, id } = await createKey();
		const first = await created(key, { model: "test/ok", input: "background base" });
		const answer = itemOf(first, "message");
		const since = await lastEngineId();
		const queued = await created(key, {
			model: "test/ok",
			background: true,
			input: [{ role: "user", content: "background base" }, ref(answer.id), { role: "user", content: "bg-turn" }],
		});
		expect(queued.status).toBe("queued");
		const done = await waitFor(async () => {
			const r = await retrieved(key, queued.id);
			return r.status === "completed" ? r : null;
		}, 10_000);
		expect(itemOf(done, "message").content?.[0]?.text).toBe("Echo: bg-turn");
		const sent = await sentWith(since, "bg-turn");
		expect(sent[1]).toEqual({ role: "assistant", content: "Echo: background base" });
		expect((await inputItems(key, queued.id)).map((i) => i.id)[1]).toBe(answer.id);

		const before = await lastEngineId();
		const { spent_usd } = await settledMoney(id);
		const bad = await post(key, { model: "test/ok", background: true, input: [ref("rs_unknown")] });
		expect(bad.status).toBe(404);
		expect(((await bad.json()) as ErrorJson).error.param).toBe("input[0].id");
		await expectNothingSpent(id, before, spent_usd);
	});

	it("combines references with previous_response_id", async () => {
		const { key } = await createKey();
		const first = await created(key, { model: "test/ok", input: "chain one" });
		const second = await created(key, { model: "test/ok", input: "chain two", previous_response_id: first.id });
		const since = await lastEngineId();
		await created(key, {
			model: "test/ok",
			previous_response_id: second.id,
			input: [ref(itemOf(first, "message").id), { role: "user", content: "chain-three" }],
		});
		const sent = await sentWith(since, "chain-three");
		expect(sent.map((m) => m.content)).toEqual([
			"chain one",
			"Echo: chain one",
			"chain two",
			"Echo: chain two",
			"Echo: chain one",
			"chain-three",
		]);
	});

	it("is a 404 for the items of a deleted response, also one a later response continues from", async () => {
		const { key, id } = await createKey();
		const gone = await created(key, { model: "test/ok", input: "deleted outright" });
		const kept = await created(key, { model: "test/ok", input: "deleted but continued" });
		await created(key, { model: "test/ok", input: "continues", previous_response_id: kept.id });
		for (const r of [gone, kept]) {
			const del = await gw(`/v1/responses/${r.id}`, { method: "DELETE", headers: { authorization: `Bearer ${key}` } });
			expect(del.status).toBe(200);
		}
		const since = await lastEngineId();
		const { spent_usd } = await settledMoney(id);
		for (const r of [gone, kept]) {
			const res = await post(key, { model: "test/ok", input: [{ role: "user", content: "x" }, ref(itemOf(r, "message").id)] });
			expect(res.status).toBe(404);
			expect(((await res.json()) as ErrorJson).error.message).toContain(itemOf(r, "message").id);
		}
		await expectNothingSpent(id, since, spent_usd);
	});

	it("is a 404 for the items of an expired response", async () => {
		const { key, id } = await createKey();
		const old = await created(key, { model: "test/ok", input: "expires" });
		await runInDurableObject(store(id), (_i, state) => {
			state.storage.sql.exec("UPDATE turns SET created_at = created_at - ? WHERE id = ?", 31 * 24 * 3600 * 1000, old.id);
		});
		const res = await post(key, { model: "test/ok", input: [ref(itemOf(old, "message").id)] });
		expect(res.status).toBe(404);
	});

	it("looks items up through the index, one row per stored item, removed with the response", async () => {
		const { key, id } = await createKey();
		const r = await created(key, {
			model: "test/ok",
			input: [
				{ role: "user", content: "a" },
				{ role: "user", content: "b" },
			],
		});
		const rows = () =>
			runInDurableObject(store(id), (_i, state) =>
				state.storage.sql
					.exec<{ item_id: string; seq: number }>("SELECT item_id, seq FROM item_index WHERE response_id = ? ORDER BY seq", r.id)
					.toArray()
					.map((row) => ({ ...row })),
			);
		const ids = [...(await inputItems(key, r.id)).map((i) => i.id), itemOf(r, "message").id];
		expect((await rows()).map((row) => row.item_id)).toEqual(ids);
		await gw(`/v1/responses/${r.id}`, { method: "DELETE", headers: { authorization: `Bearer ${key}` } });
		expect(await rows()).toEqual([]);
	});
});

describe("the store's resolution", () => {
	it("counts referenced items towards the conversation size, and names the first id it has no item for", async () => {
		const { key, id } = await createKey();
		const first = await created(key, { model: "test/ok", input: "z".repeat(600) });
		const [question] = await inputItems(key, first.id);
		const result = await runInDurableObject(store(id), (instance) => ({
			fits: instance.history(null, 100, 2000, [question?.id as string]).ok,
			over: instance.history(null, 100, 700, [question?.id as string]),
			twice: instance.history(null, 100, 1400, [question?.id as string, question?.id as string]),
			unknown: instance.history(first.id, 100, 5000, [question?.id as string, "msg_nope"]),
		}));
		expect(result.fits).toBe(true);
		expect(result.over).toMatchObject({ ok: false, reason: "too_large" });
		expect(result.twice).toMatchObject({ ok: false, reason: "too_large" });
		expect(result.unknown).toEqual({ ok: false, reason: "item_not_found", id: "msg_nope" });
	});
});

describe("the item index upgrade (schema 3)", () => {
	it("backfills the index from the documents of a store at schema 2", async () => {
		const { key, id } = await createKey();
		const createdAt = Date.now() - 1000;
		const big = "x".repeat(600_000);
		const result = await runInDurableObject(store(id), (_instance, state) => {
			const sql = state.storage.sql;
			// The store as schema 2 left it: no index, documents written without one.
			sql.exec("DROP TABLE IF EXISTS item_index");
			sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES ('schema_version', 2)");
			sql.exec("INSERT INTO turns (id, prev, created_at, status) VALUES ('resp_old', NULL, ?, 'completed')", createdAt);
			const doc = (seq: number, kind: string, value: unknown) => {
				splitText(JSON.stringify(value)).forEach((text, part) => {
					sql.exec(
						"INSERT INTO docs (response_id, seq, part, kind, chars, text) VALUES ('resp_old', ?, ?, ?, ?, ?)",
						seq,
						part,
						kind,
						text.length,
						text,
					);
				});
			};
			doc(0, "response", { id: "resp_old", object: "response", status: "completed", output: [] });
			doc(1, "input", {
				type: "message",
				id: "msg_old_in",
				role: "user",
				status: "completed",
				content: [{ type: "input_text", text: "old question" }],
			});
			// Over one row, its id after the text: read whole.
			doc(2, "input", { type: "reasoning", summary: [], content: [{ type: "reasoning_text", text: big }], id: "rs_old_big" });
			doc(3, "output", {
				type: "message",
				id: "msg_old_out",
				role: "assistant",
				status: "completed",
				content: [{ type: "output_text", text: "old answer", annotations: [], logprobs: [] }],
			});

			// The object as it loads next time: the constructor upgrades.
			new ResponseStore(state, env);
			return {
				version: sql.exec<{ v: number }>("SELECT v FROM meta WHERE k = 'schema_version'").one().v,
				index: sql
					.exec<{ item_id: string; response_id: string; seq: number; created_at: number }>(
						"SELECT item_id, response_id, seq, created_at FROM item_index ORDER BY seq",
					)
					.toArray()
					.map((row) => ({ ...row })),
			};
		});
		// Upgraded to the latest layout: the item index (3) and whatever came after it.
		expect(result.version).toBeGreaterThanOrEqual(3);
		expect(result.index).toEqual([
			{ item_id: "msg_old_in", response_id: "resp_old", seq: 1, created_at: createdAt },
			{ item_id: "rs_old_big", response_id: "resp_old", seq: 2, created_at: createdAt },
			{ item_id: "msg_old_out", response_id: "resp_old", seq: 3, created_at: createdAt },
		]);
		const since = await lastEngineId();
		await created(key, {
			model: "test/ok",
			input: [ref("msg_old_in"), ref("rs_old_big"), ref("msg_old_out"), { role: "user", content: "after-upgrade" }],
		});
		expect((await sentWith(since, "after-upgrade")).map((m) => m.content)).toEqual([
			"old question",
			"old answer",
			"after-upgrade",
		]);
	});
});
