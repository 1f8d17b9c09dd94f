// Anthropic's Message Batches (/v1/messages/batches) with the official @anthropic-ai/sdk, in workerd:
// create → retrieve (poll) → results() (the SDK's JSONL decoder), cancel, list, delete, another key's
// 404, the refusals made before anything is stored, and the money: each succeeded line billed once
// at the batch price, errored and canceled ones nothing, records = debits.

import { env, runInDurableObject, SELF } from "cloudflare:test";
import Anthropic from "@anthropic-ai/sdk";
import type { MessageBatch, MessageBatchIndividualResponse } from "@anthropic-ai/sdk/resources/messages/batches";
import { describe, expect, it } from "vitest";
import { dispatcherFor } from "../../../src/batches/create";
import { createKey, engineRequests, gw, releaseEngine, waitFor } from "../../support/gateway";
import { expectBooks } from "../../support/ledger";

function anthropic(apiKey: string): Anthropic {
	return new Anthropic({
		apiKey,
		baseURL: "http://gateway.test",
		maxRetries: 0,
		fetch: (input, init) => SELF.fetch(input instanceof Request ? input : String(input), init as RequestInit),
	});
}

const request = (customId: string, text: string, model = "test/ok") => ({
	custom_id: customId,
	params: { model, max_tokens: 20, system: "be brief", messages: [{ role: "user" as const, content: text }] },
});

async function ended(client: Anthropic, id: string): Promise<MessageBatch> {
	return waitFor(async () => {
		const b = await client.messages.batches.retrieve(id);
		return b.processing_status === "ended" ? b : null;
	}, 15_000);
}

async function results(client: Anthropic, id: string): Promise<MessageBatchIndividualResponse[]> {
	const out: MessageBatchIndividualResponse[] = [];
	for await (const r of await client.messages.batches.results(id)) out.push(r);
	return out.sort((a, b) => a.custom_id.localeCompare(b.custom_id));
}

/** A raw call, to read Anthropic's error body as it is on the wire. */
async function raw(key: string, path: string, init: RequestInit = {}) {
	const res = await gw(path, {
		...init,
		headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
	});
	return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function storedFor(keyId: string): Promise<number> {
	const b = await env.DB.prepare("SELECT COUNT(*) AS n FROM batches WHERE key_id = ?").bind(keyId).first<{ n: number }>();
	const f = await env.DB.prepare("SELECT COUNT(*) AS n FROM batch_files WHERE key_id = ?").bind(keyId).first<{ n: number }>();
	return (b?.n ?? 0) + (f?.n ?? 0);
}

describe("Anthropic Message Batches", () => {
	it("create → retrieve → results(): each succeeded line billed once at the batch price, an errored one nothing", async () => {
		const key = await createKey({ balance_usd: 10 });
		const client = anthropic(key.key);
		const created = await client.messages.batches.create({
			requests: [
				request("a", "hello one"),
				request("b", "hello two"),
				// The Messages lane refuses it when it runs: Anthropic validates params asynchronously.
				{ custom_id: "bad", params: { model: "test/ok", max_tokens: 20, messages: "not a list" as never } },
			],
		});
		expect(created).toMatchObject({
			type: "message_batch",
			processing_status: "in_progress",
			archived_at: null,
			cancel_initiated_at: null,
			ended_at: null,
			results_url: null,
		});
		expect(created.id).toMatch(/^msgbatch_[0-9a-f]+$/);
		expect(Date.parse(created.expires_at) - Date.parse(created.created_at)).toBe(24 * 3600 * 1000);
		const done = await ended(client, created.id);
		expect(done.request_counts).toEqual({ processing: 0, succeeded: 2, errored: 1, canceled: 0, expired: 0 });
		expect(done.ended_at).not.toBeNull();
		expect(done.results_url).toBe(`http://gateway.test/v1/messages/batches/${created.id}/results`);

		const out = await results(client, created.id);
		expect(out.map((r) => [r.custom_id, r.result.type])).toEqual([
			["a", "succeeded"],
			["b", "succeeded"],
			["bad", "errored"],
		]);
		const a = out[0]?.result;
		if (a?.type !== "succeeded") throw new Error("a did not succeed");
		expect(a.message).toMatchObject({ type: "message", role: "assistant", content: [{ type: "text", text: "Echo: hello one" }] });
		const bad = out[2]?.result;
		if (bad?.type !== "errored") throw new Error("bad did not error");
		expect(bad.error).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });

		// Records = debits; two records (the errored line none), with the store's batch id and each custom_id,
		// at half the interactive price (test/ok: $1 / $2 per Mtok, so 500 / 1000 nanos a token).
		const { rows, charged } = await expectBooks(key.id, 10e9);
		expect(rows).toHaveLength(2);
		const recs = await env.DB.prepare(
			"SELECT batch_id, custom_id, prompt_tokens, completion_tokens, cost_nanos FROM usage_records WHERE key_id = ? ORDER BY custom_id",
		)
			.bind(key.id)
			.all<{ batch_id: string; custom_id: string; prompt_tokens: number; completion_tokens: number; cost_nanos: number }>();
		expect(recs.results.map((r) => [r.batch_id, r.custom_id])).toEqual([
			[created.id.slice(3), "a"],
			[created.id.slice(3), "b"],
		]);
		for (const r of recs.results) expect(r.cost_nanos).toBe(r.prompt_tokens * 500 + r.completion_tokens * 1000);
		expect(charged).toBeGreaterThan(0);
		expect(a.message).toMatchObject({ usage: { input_tokens: recs.results[0]?.prompt_tokens } });
	});

	it("cancel: the queued lines end canceled and cost nothing, the running ones finish and are billed", async () => {
		const key = await createKey({ balance_usd: 10 });
		const client = anthropic(key.key);
		const marker = `cancel-${crypto.randomUUID()}`;
		const requests = Array.from({ length: 6 }, (_, i) => request(`r${i}`, `${marker} ${i}`, "test/gated"));
		const created = await client.messages.batches.create({ requests });
		// A node takes at most batches.max_in_flight_per_node (4) lines: the other two stay queued.
		await waitFor(async () => {
			const row = await env.DB.prepare("SELECT status FROM batches WHERE id = ?")
				.bind(created.id.slice(3))
				.first<{ status: string }>();
			return row?.status === "in_progress";
		});
		await waitFor(async () => (await engineRequests({ contains: marker })).length === 4);
		const canceling = await client.messages.batches.cancel(created.id);
		expect(canceling.processing_status).toBe("canceling");
		expect(canceling.cancel_initiated_at).not.toBeNull();
		// Cancelling again changes nothing.
		expect((await client.messages.batches.cancel(created.id)).processing_status).toBe("canceling");
		expect(await releaseEngine(marker)).toBe(4);
		const done = await ended(client, created.id);
		expect(done.request_counts).toEqual({ processing: 0, succeeded: 4, errored: 0, canceled: 2, expired: 0 });
		const out = await results(client, created.id);
		expect(out.filter((r) => r.result.type === "canceled")).toHaveLength(2);
		const { rows } = await expectBooks(key.id, 10e9);
		expect(rows).toHaveLength(4);
	});

	it("expiry: the requests not run within the window end expired and cost nothing", async () => {
		const key = await createKey({ balance_usd: 10 });
		const client = anthropic(key.key);
		const marker = `expire-${crypto.randomUUID()}`;
		const requests = Array.from({ length: 6 }, (_, i) => request(`e${i}`, `${marker} ${i}`, "test/gated"));
		const created = await client.messages.batches.create({ requests });
		await waitFor(async () => (await engineRequests({ contains: marker })).length === 4);
		// The window ends now: the dispatcher's stored deadline is moved back (its clock is the real one).
		await runInDurableObject(dispatcherFor(env, "test/gated"), async (_o, state) => {
			state.storage.sql.exec("UPDATE batch SET expires_at = 0 WHERE id = ?", created.id.slice(3));
		});
		expect(await releaseEngine(marker)).toBe(4);
		const done = await ended(client, created.id);
		expect(done.request_counts).toEqual({ processing: 0, succeeded: 4, errored: 0, canceled: 0, expired: 2 });
		const out = await results(client, created.id);
		expect(out.filter((r) => r.result.type === "expired")).toHaveLength(2);
		const { rows } = await expectBooks(key.id, 10e9);
		expect(rows).toHaveLength(4);
	});

	it("lists a key's Message Batches newest first with Anthropic's cursors, and deletes only an ended one", async () => {
		const key = await createKey({ balance_usd: 10 });
		const client = anthropic(key.key);
		const ids: string[] = [];
		for (const n of [1, 2, 3]) ids.push((await client.messages.batches.create({ requests: [request("x", `list ${n}`)] })).id);
		for (const id of ids) await ended(client, id);
		const newest = [...ids].reverse();

		const first = await raw(key.key, "/v1/messages/batches?limit=2");
		expect(first.status).toBe(200);
		expect(first.body).toMatchObject({ has_more: true, first_id: newest[0], last_id: newest[1] });
		const next = await raw(key.key, `/v1/messages/batches?limit=2&after_id=${newest[1]}`);
		expect(next.body).toMatchObject({ has_more: false, first_id: newest[2], last_id: newest[2] });
		const back = await raw(key.key, `/v1/messages/batches?limit=1&before_id=${newest[2]}`);
		expect(back.body).toMatchObject({ has_more: true, first_id: newest[1], last_id: newest[1] });
		// The SDK pages through them all (after_id = last_id).
		const all: string[] = [];
		for await (const b of client.messages.batches.list({ limit: 1 })) all.push(b.id);
		expect(all).toEqual(newest);

		// Deleting removes the batch and its files.
		const gone = await client.messages.batches.delete(ids[0] as string);
		expect(gone).toEqual({ id: ids[0], type: "message_batch_deleted" });
		await expect(client.messages.batches.retrieve(ids[0] as string)).rejects.toMatchObject({ status: 404 });
		// Each of the two left: its row, its input file, its results file.
		expect(await storedFor(key.id)).toBe(2 * 3);

		// A batch still processing cannot be deleted (cancel it first).
		const marker = `del-${crypto.randomUUID()}`;
		const running = await client.messages.batches.create({ requests: [request("g", marker, "test/gated")] });
		const refused = await raw(key.key, `/v1/messages/batches/${running.id}`, { method: "DELETE" });
		expect(refused).toMatchObject({ status: 400, body: { type: "error", error: { type: "invalid_request_error" } } });
		await waitFor(async () => (await releaseEngine(marker)) === 1);
		await ended(client, running.id);
		await client.messages.batches.delete(running.id);
	});

	it("a key whose balance cannot cover a request: that request errors billing_error, unbilled, and the batch goes on", async () => {
		const key = await createKey({ balance_usd: 0 });
		const client = anthropic(key.key);
		const created = await client.messages.batches.create({ requests: [request("p1", "poor one"), request("p2", "poor two")] });
		const done = await ended(client, created.id);
		expect(done.request_counts).toEqual({ processing: 0, succeeded: 0, errored: 2, canceled: 0, expired: 0 });
		for (const r of await results(client, created.id)) {
			expect(r.result).toMatchObject({ type: "errored", error: { type: "error", error: { type: "billing_error" } } });
		}
		const { rows } = await expectBooks(key.id, 0);
		expect(rows).toHaveLength(0);
	});

	it("keeps a batch to its key: another key gets 404 in Anthropic's shape", async () => {
		const owner = anthropic((await createKey()).key);
		const otherKey = await createKey();
		const other = anthropic(otherKey.key);
		const b = await owner.messages.batches.create({ requests: [request("mine", "private")] });
		await ended(owner, b.id);
		await expect(other.messages.batches.retrieve(b.id)).rejects.toMatchObject({ status: 404 });
		await expect(other.messages.batches.cancel(b.id)).rejects.toMatchObject({ status: 404 });
		await expect(other.messages.batches.delete(b.id)).rejects.toMatchObject({ status: 404 });
		for (const path of [`/v1/messages/batches/${b.id}`, `/v1/messages/batches/${b.id}/results`]) {
			const r = await raw(otherKey.key, path);
			expect(r).toMatchObject({ status: 404, body: { type: "error", error: { type: "not_found_error" } } });
		}
		expect((await other.messages.batches.list()).data).toEqual([]);
		// An OpenAI batch's id is no Message Batch.
		expect((await raw(otherKey.key, "/v1/messages/batches/batch_0123")).status).toBe(404);
	});

	it("refuses a bad batch before anything is stored, in Anthropic's error shape", async () => {
		const key = await createKey({ allowed_models: ["test/ok", "test/gated"] });
		const post = (body: unknown) => raw(key.key, "/v1/messages/batches", { method: "POST", body: JSON.stringify(body) });
		const cases: Array<[unknown, number, string, RegExp]> = [
			[{ requests: [request("a", "x"), request("b", "y", "test/gated")] }, 400, "invalid_request_error", /same model/],
			[{ requests: [request("a", "x"), request("a", "y")] }, 400, "invalid_request_error", /Duplicate custom_id/],
			[{ requests: [request("has space", "x")] }, 400, "invalid_request_error", /custom_id/],
			[{ requests: [request("x".repeat(65), "x")] }, 400, "invalid_request_error", /custom_id/],
			[{ requests: [] }, 400, "invalid_request_error", /at least 1/],
			[{}, 400, "invalid_request_error", /requests/],
			[
				{ requests: [{ custom_id: "s", params: { ...request("s", "x").params, stream: true } }] },
				400,
				"invalid_request_error",
				/stream/,
			],
			[{ requests: [request("a", "x", "test/nope")] }, 404, "not_found_error", /test\/nope/],
			[{ requests: [request("a", "x", "test/cached")] }, 403, "permission_error", /not allowed/],
		];
		for (const [body, status, type, message] of cases) {
			const r = await post(body);
			expect(r.status, JSON.stringify(body).slice(0, 80)).toBe(status);
			expect(r.body).toMatchObject({ type: "error", error: { type } });
			expect((r.body.error as { message: string }).message).toMatch(message);
		}
		// A line over max_body_bytes is a 413.
		const big = await post({ requests: [request("big", "x".repeat(5 * 1024 * 1024))] });
		expect(big).toMatchObject({ status: 413, body: { type: "error", error: { type: "request_too_large" } } });
		expect(await storedFor(key.id)).toBe(0);
		// An embeddings model answers no Messages.
		const open = await createKey();
		const embed = await raw(open.key, "/v1/messages/batches", {
			method: "POST",
			body: JSON.stringify({ requests: [request("a", "x", "test/embed")] }),
		});
		expect(embed).toMatchObject({ status: 400, body: { type: "error", error: { type: "invalid_request_error" } } });
		expect(await storedFor(open.id)).toBe(0);
	});
});
