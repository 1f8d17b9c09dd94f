import { env, SELF } from "cloudflare:test";
import OpenAI, { toFile } from "openai";
import { afterEach, describe, expect, it, vi } from "vitest";
import { batchesStore } from "../../../src/db/batches";
import { admin, createKey, waitFor } from "../../support/gateway";
import { expectBooks } from "../../support/ledger";

function client(key: string): OpenAI {
	return new OpenAI({
		apiKey: key,
		baseURL: "http://gateway.test/v1",
		maxRetries: 0,
		fetch: (input, init) => SELF.fetch(input instanceof Request ? input : String(input), init as RequestInit),
	});
}

function jsonl(lines: unknown[]): string {
	return `${lines.map((l) => JSON.stringify(l)).join("\n")}\n`;
}

function chatLine(customId: string, content: string, model = "test/ok") {
	return {
		custom_id: customId,
		method: "POST",
		url: "/v1/chat/completions",
		body: {
			model,
			max_tokens: 20,
			messages: [
				{ role: "system", content: "be brief" },
				{ role: "user", content },
			],
		},
	};
}

async function upload(openai: OpenAI, text: string) {
	return openai.files.create({ file: await toFile(new TextEncoder().encode(text), "input.jsonl"), purpose: "batch" });
}

/** Polls the batch as a client does until it reaches a final status. */
async function settled(openai: OpenAI, id: string) {
	return waitFor(async () => {
		const b = await openai.batches.retrieve(id);
		return ["completed", "failed", "expired", "cancelled"].includes(b.status) ? b : null;
	}, 15_000);
}

/** One line of an output or error file, as OpenAI writes it. */
interface ResultLine {
	id: string;
	custom_id: string;
	response: { status_code: number; request_id: string; body: Record<string, unknown> } | null;
	error: { code: string; message: string } | null;
}

async function lines(openai: OpenAI, fileId: string | null | undefined): Promise<ResultLine[]> {
	if (!fileId) return [];
	const text = await (await openai.files.content(fileId)).text();
	return text
		.split("\n")
		.filter(Boolean)
		.map((l) => JSON.parse(l));
}

describe("batches (OpenAI Batch API)", () => {
	it("runs chat lines at half price: files.create → batches.create → retrieve → files.content", async () => {
		const key = await createKey({ balance_usd: 10 });
		const openai = client(key.key);
		const file = await upload(
			openai,
			jsonl([chatLine("a", "hello one"), chatLine("b", "hello two"), chatLine("c", "hello three")]),
		);
		expect(file).toMatchObject({ object: "file", purpose: "batch", filename: "input.jsonl" });
		const created = await openai.batches.create({
			input_file_id: file.id,
			endpoint: "/v1/chat/completions",
			completion_window: "24h",
			metadata: { job: "nightly" },
		});
		expect(created).toMatchObject({ object: "batch", endpoint: "/v1/chat/completions", metadata: { job: "nightly" } });
		const done = await settled(openai, created.id);
		expect(done.status).toBe("completed");
		expect(done.request_counts).toEqual({ total: 3, completed: 3, failed: 0 });
		expect(done.error_file_id).toBeNull();
		const out = await lines(openai, done.output_file_id);
		expect(out.map((l) => l.custom_id)).toEqual(["a", "b", "c"]);
		for (const l of out) {
			expect(l.id).toMatch(/^batch_req_/);
			expect(l.error).toBeNull();
			expect(l.response?.status_code).toBe(200);
			expect(l.response?.body.object).toBe("chat.completion");
		}
		// Records = debits, each line once, at the batch price (half the interactive one), with batch_id and custom_id.
		const { rows, charged } = await expectBooks(key.id, 10e9);
		expect(rows).toHaveLength(3);
		const recs = await env.DB.prepare(
			"SELECT batch_id, custom_id, prompt_tokens, completion_tokens, cost_nanos FROM usage_records WHERE key_id = ? ORDER BY custom_id",
		)
			.bind(key.id)
			.all<{ batch_id: string; custom_id: string; prompt_tokens: number; completion_tokens: number; cost_nanos: number }>();
		expect(recs.results.map((r) => [r.batch_id, r.custom_id])).toEqual([
			[created.id, "a"],
			[created.id, "b"],
			[created.id, "c"],
		]);
		for (const r of recs.results) {
			// test/ok: $1 / $2 per Mtok, so 500 / 1000 nanos a token at half price.
			expect(r.cost_nanos).toBe(r.prompt_tokens * 500 + r.completion_tokens * 1000);
		}
		const row = await batchesStore(env.DB).get(key.id, created.id);
		expect(row?.costNanos).toBe(charged);
	});

	it("runs embeddings lines and Responses lines through their own lanes", async () => {
		const key = await createKey({ balance_usd: 10 });
		const openai = client(key.key);
		const embed = await upload(
			openai,
			jsonl([
				{ custom_id: "e1", method: "POST", url: "/v1/embeddings", body: { model: "test/embed", input: "first text" } },
				{ custom_id: "e2", method: "POST", url: "/v1/embeddings", body: { model: "test/embed", input: ["second", "third"] } },
			]),
		);
		const eb = await openai.batches.create({ input_file_id: embed.id, endpoint: "/v1/embeddings", completion_window: "24h" });
		const responses = await upload(
			openai,
			jsonl([
				{
					custom_id: "r1",
					method: "POST",
					url: "/v1/responses",
					body: { model: "test/ok", input: "say hi", max_output_tokens: 20, instructions: "be brief" },
				},
			]),
		);
		const rb = await openai.batches.create({ input_file_id: responses.id, endpoint: "/v1/responses", completion_window: "24h" });
		const [edone, rdone] = [await settled(openai, eb.id), await settled(openai, rb.id)];
		expect(edone.request_counts).toEqual({ total: 2, completed: 2, failed: 0 });
		const eout = await lines(openai, edone.output_file_id);
		expect(eout.map((l) => [l.custom_id, l.response?.body.object])).toEqual([
			["e1", "list"],
			["e2", "list"],
		]);
		expect(eout[1]?.response?.body.data).toHaveLength(2);
		expect(rdone.request_counts).toEqual({ total: 1, completed: 1, failed: 0 });
		const [r1] = await lines(openai, rdone.output_file_id);
		expect(r1?.response?.body).toMatchObject({ object: "response", status: "completed" });
		const { rows } = await expectBooks(key.id, 10e9);
		expect(rows).toHaveLength(3);
	});

	it("refuses lines a key's scopes forbid, and a model that does not serve the endpoint, before anything runs", async () => {
		const key = await createKey({ allowed_models: ["test/ok"] });
		const openai = client(key.key);
		const file = await upload(openai, jsonl([chatLine("a", "not allowed", "test/cached")]));
		const b = await openai.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
		expect(b.status).toBe("failed");
		expect(b.errors?.data?.[0]).toMatchObject({ code: "model_not_found" });
		const wrong = await upload(openai, jsonl([{ ...chatLine("a", "x"), url: "/v1/embeddings" }]));
		const w = await openai.batches.create({ input_file_id: wrong.id, endpoint: "/v1/embeddings", completion_window: "24h" });
		expect(w.errors?.data?.[0]).toMatchObject({ code: "invalid_model" });
	});

	it("fails a malformed file at validation, naming the line, billing nothing", async () => {
		const key = await createKey({ balance_usd: 1 });
		const openai = client(key.key);
		const file = await upload(openai, `${JSON.stringify(chatLine("a", "x"))}\n{not json\n`);
		const b = await openai.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
		expect(b.status).toBe("failed");
		expect(b.errors?.data).toEqual([expect.objectContaining({ code: "invalid_json_line", line: 2 })]);
		const { rows } = await expectBooks(key.id, 1e9);
		expect(rows).toHaveLength(0);
	});

	it("refuses metadata of more than 16 pairs, as OpenAI does, before a batch is made", async () => {
		const key = await createKey({ balance_usd: 1 });
		const openai = client(key.key);
		const file = await upload(openai, jsonl([chatLine("a", "x")]));
		const metadata = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"]));
		const err = await openai.batches
			.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h", metadata })
			.catch((e: unknown) => e);
		expect(err).toBeInstanceOf(OpenAI.BadRequestError);
		expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("metadata");
		expect((await openai.batches.list()).data).toHaveLength(0);
		// Sixteen are fine.
		const ok = await openai.batches.create({
			input_file_id: file.id,
			endpoint: "/v1/chat/completions",
			completion_window: "24h",
			metadata: Object.fromEntries(Object.entries(metadata).slice(0, 16)),
		});
		expect(Object.keys(ok.metadata ?? {})).toHaveLength(16);
	});

	it("keeps files and batches to their key: another key gets 404", async () => {
		const owner = client((await createKey()).key);
		const other = client((await createKey()).key);
		const file = await upload(owner, jsonl([chatLine("a", "mine")]));
		const b = await owner.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
		await expect(other.files.retrieve(file.id)).rejects.toMatchObject({ status: 404 });
		await expect(other.files.content(file.id)).rejects.toMatchObject({ status: 404 });
		await expect(other.batches.retrieve(b.id)).rejects.toMatchObject({ status: 404 });
		await expect(other.batches.cancel(b.id)).rejects.toMatchObject({ status: 404 });
		await expect(
			other.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" }),
		).rejects.toMatchObject({ status: 404 });
		await settled(owner, b.id);
	});
});

describe("batch files' retention", () => {
	afterEach(() => {
		vi.useRealTimers();
	});

	it("deletes files past batches.retention_days in the maintenance run", async () => {
		const openai = client((await createKey()).key);
		const file = await upload(openai, jsonl([chatLine("a", "kept for 30 days")]));
		const fresh = await admin("/maintenance/run", { method: "POST" });
		expect(((await fresh.json()) as { batch_files_deleted: number }).batch_files_deleted).toBe(0);
		expect((await openai.files.retrieve(file.id)).id).toBe(file.id);
		vi.useFakeTimers({ toFake: ["Date"] });
		vi.setSystemTime(Date.now() + 31 * 24 * 60 * 60 * 1000);
		const later = await admin("/maintenance/run", { method: "POST" });
		vi.useRealTimers();
		expect(((await later.json()) as { batch_files_deleted: number }).batch_files_deleted).toBeGreaterThanOrEqual(1);
		await expect(openai.files.retrieve(file.id)).rejects.toMatchObject({ status: 404 });
		expect(await env.BATCH_FILES.head(`files/${file.id}`)).toBeNull();
	});
});
