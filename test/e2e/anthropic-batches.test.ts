// The official Anthropic SDK's Message Batches (client.messages.batches) against the gateway under
// wrangler dev, unmodified but for the base URL: create → retrieve (poll) → results() through the
// SDK's own JSONL decoder; cancel; list; delete; another key's 404; each succeeded line billed once
// at the batch price, an errored one nothing, records = debits.
import Anthropic, { BadRequestError, NotFoundError } from "@anthropic-ai/sdk";
import type { MessageBatch, MessageBatchIndividualResponse } from "@anthropic-ai/sdk/resources/messages/batches";
import { describe, expect, it } from "vitest";
import { admin, createKey, engineRequestsWith, engineUrl, gatewayUrl, marker, usageFor, waitFor } from "./support";

function anthropic(apiKey: string): Anthropic {
	return new Anthropic({ baseURL: gatewayUrl(), apiKey, maxRetries: 0, timeout: 20_000 });
}

const request = (customId: string, text: string, model = "test/ok") => ({
	custom_id: customId,
	params: { model, max_tokens: 20, messages: [{ role: "user" as const, content: text }] },
});

function ended(client: Anthropic, id: string): Promise<MessageBatch> {
	return waitFor(
		async () => {
			const b = await client.messages.batches.retrieve(id);
			return b.processing_status === "ended" && b;
		},
		30_000,
		`${id} ended`,
	);
}

async function results(client: Anthropic, id: string): Promise<MessageBatchIndividualResponse[]> {
	const out: MessageBatchIndividualResponse[] = [];
	for await (const r of await client.messages.batches.results(id)) out.push(r);
	return out.sort((a, b) => a.custom_id.localeCompare(b.custom_id));
}

describe("@anthropic-ai/sdk messages.batches against the gateway", () => {
	it("create → retrieve → results(), billed once a succeeded line at the batch price; list; delete", async () => {
		const key = await createKey({ name: "anthropic-batches", balance_usd: 10 });
		const client = anthropic(key.key);
		const text = marker("batch");
		const created = await client.messages.batches.create({
			requests: [
				request("one", `${text} one`),
				request("two", `${text} two`),
				{ custom_id: "bad", params: { model: "test/ok", max_tokens: 20, messages: "no" as never } },
			],
		});
		expect(created).toMatchObject({ type: "message_batch", processing_status: "in_progress", results_url: null });
		const done = await ended(client, created.id);
		expect(done.request_counts).toEqual({ processing: 0, succeeded: 2, errored: 1, canceled: 0, expired: 0 });
		expect(done.results_url).toBe(`${gatewayUrl()}/v1/messages/batches/${created.id}/results`);
		const out = await results(client, created.id);
		expect(out.map((r) => [r.custom_id, r.result.type])).toEqual([
			["bad", "errored"],
			["one", "succeeded"],
			["two", "succeeded"],
		]);
		const one = out[1]?.result;
		expect(one?.type === "succeeded" && one.message.content).toEqual([{ type: "text", text: `Echo: ${text} one` }]);

		// Two records, each at half the interactive price; the key's spend is their sum (records = debits).
		const rows = await waitFor(async () => {
			const r = await usageFor(key.id);
			return r.length >= 2 && r;
		}, 15_000);
		expect(rows).toHaveLength(2);
		for (const r of rows) expect(r.cost_usd).toBeCloseTo((r.prompt_tokens * 0.5 + r.completion_tokens * 1) / 1e6, 12);
		const info = await admin<{ spent_usd: number; balance_usd: number }>(`/keys/${key.id}`);
		expect(info.spent_usd).toBeCloseTo(
			rows.reduce((s, r) => s + r.cost_usd, 0),
			12,
		);

		const listed: string[] = [];
		for await (const b of client.messages.batches.list({ limit: 1 })) listed.push(b.id);
		expect(listed).toEqual([created.id]);
		expect(await client.messages.batches.delete(created.id)).toEqual({ id: created.id, type: "message_batch_deleted" });
		await expect(client.messages.batches.retrieve(created.id)).rejects.toBeInstanceOf(NotFoundError);
	});

	it("cancel ends the batch canceled; another key gets 404; a mixed-model batch is refused", async () => {
		const key = await createKey({ name: "anthropic-batches-cancel" });
		const client = anthropic(key.key);
		const other = anthropic((await createKey({ name: "anthropic-batches-other" })).key);
		// test/gated answers once released: four lines run (batches.max_in_flight_per_node), two stay queued.
		const gate = marker("gate");
		const requests = Array.from({ length: 6 }, (_, i) => request(`r${i}`, `${gate} ${i}`, "test/gated"));
		const created = await client.messages.batches.create({ requests });
		await waitFor(async () => (await engineRequestsWith(gate)).length === 4, 15_000, "four lines running");
		await expect(other.messages.batches.retrieve(created.id)).rejects.toBeInstanceOf(NotFoundError);
		await expect(other.messages.batches.cancel(created.id)).rejects.toBeInstanceOf(NotFoundError);
		const canceling = await client.messages.batches.cancel(created.id);
		expect(canceling.processing_status).toBe("canceling");
		expect(canceling.cancel_initiated_at).not.toBeNull();
		await fetch(`${engineUrl()}/_engine/release`, { method: "POST", body: JSON.stringify({ contains: gate }) });
		const done = await ended(client, created.id);
		expect(done.request_counts).toEqual({ processing: 0, succeeded: 4, errored: 0, canceled: 2, expired: 0 });
		const out = await results(client, created.id);
		expect(out.filter((r) => r.result.type === "canceled").map((r) => r.custom_id)).toHaveLength(2);
		// The canceled lines cost nothing: one record a succeeded line.
		const rows = await waitFor(async () => {
			const r = await usageFor(key.id);
			return r.length >= 4 && r;
		}, 15_000);
		expect(rows).toHaveLength(4);

		await expect(
			client.messages.batches.create({ requests: [request("a", "x"), request("b", "y", "test/gated")] }),
		).rejects.toBeInstanceOf(BadRequestError);
	});
});
