// openai-node's Files and Batch APIs against the gateway as `npm start` runs it (workerd through
// Miniflare, local R2, D1 and Durable Objects): files.create (a streamed multipart upload) →
// batches.create → poll batches.retrieve → files.content; and a cancel.
import { toFile } from "openai";
import { describe, expect, it } from "vitest";
import { createKey, engineRequestsWith, engineUrl, marker, openaiClient, waitFor } from "./support";

const line = (customId: string, text: string, model = "test/ok") => ({
	custom_id: customId,
	method: "POST",
	url: "/v1/chat/completions",
	body: { model, max_tokens: 20, messages: [{ role: "user", content: text }] },
});

const jsonl = (lines: unknown[]) => new TextEncoder().encode(`${lines.map((l) => JSON.stringify(l)).join("\n")}\n`);

describe("openai-node batches against the gateway", () => {
	it("files.create → batches.create → retrieve → files.content; cancel", async () => {
		const openai = openaiClient((await createKey({ name: "openai-batches", balance_usd: 10 })).key);
		const text = marker("obatch");
		const file = await openai.files.create({
			file: await toFile(jsonl([line("a", `${text} a`), line("b", `${text} b`)]), "in.jsonl"),
			purpose: "batch",
		});
		const created = await openai.batches.create({
			input_file_id: file.id,
			endpoint: "/v1/chat/completions",
			completion_window: "24h",
		});
		const done = await waitFor(
			async () => {
				const b = await openai.batches.retrieve(created.id);
				return b.status === "completed" && b;
			},
			30_000,
			"batch completed",
		);
		expect(done.request_counts).toEqual({ total: 2, completed: 2, failed: 0 });
		const out = (await (await openai.files.content(done.output_file_id ?? "none")).text())
			.split("\n")
			.filter(Boolean)
			.map((l) => JSON.parse(l));
		expect(out.map((l: { custom_id: string }) => l.custom_id)).toEqual(["a", "b"]);
		expect(out[0].response.body.choices[0].message.content).toBe(`Echo: ${text} a`);

		const gate = marker("ogate");
		const gated = await openai.files.create({
			file: await toFile(jsonl(Array.from({ length: 6 }, (_, i) => line(`g${i}`, `${gate} ${i}`, "test/gated"))), "g.jsonl"),
			purpose: "batch",
		});
		const b = await openai.batches.create({
			input_file_id: gated.id,
			endpoint: "/v1/chat/completions",
			completion_window: "24h",
		});
		await waitFor(async () => (await engineRequestsWith(gate)).length === 4, 15_000, "four lines running");
		expect((await openai.batches.cancel(b.id)).status).toBe("cancelling");
		await fetch(`${engineUrl()}/_engine/release`, { method: "POST", body: JSON.stringify({ contains: gate }) });
		const cancelled = await waitFor(
			async () => {
				const x = await openai.batches.retrieve(b.id);
				return x.status === "cancelled" && x;
			},
			30_000,
			"batch cancelled",
		);
		expect(cancelled.request_counts).toEqual({ total: 6, completed: 4, failed: 2 });
	});
});
