/** The batch lane's memory bounds: a finalize paged into R2 parts and resumed after a restart; large results in R2; a streamed upload's limits. */
import { env, runDurableObjectAlarm, runInDurableObject, SELF } from "cloudflare:test";
import OpenAI, { toFile } from "openai";
import { describe, expect, it } from "vitest";
import { dispatcherFor } from "../../../src/batches/create";
import { type FinalizeOptions, finalizeBatch, resultKey } from "../../../src/batches/finalize";
import { LineStore } from "../../../src/batches/line-store";
import { batchesStore } from "../../../src/db/batches";
import { createKey } from "../../support/gateway";

const MIB = 1024 * 1024;

function client(key: string): OpenAI {
	return new OpenAI({
		apiKey: key,
		baseURL: "http://gateway.test/v1",
		maxRetries: 0,
		fetch: (input, init) => SELF.fetch(input instanceof Request ? input : String(input), init as RequestInit),
	});
}

/** A batch of `n` ended lines stored straight in a dispatcher (every 7th failed, line 5 a large result in R2), and its D1 row. */
async function endedBatch(keyId: string, n: number) {
	const id = `batch_mem${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;
	const now = Date.now();
	await batchesStore(env.DB).insert({
		id,
		keyId,
		model: "test/mem",
		endpoint: "/v1/chat/completions",
		inputFileId: "file-none",
		status: "in_progress",
		completionWindow: "24h",
		metadata: null,
		errors: null,
		outputFileId: null,
		errorFileId: null,
		total: n,
		completed: 0,
		failed: 0,
		costNanos: 0,
		createdAt: now,
		expiresAt: now + 86_400_000,
		times: {},
	});
	const pad = "x".repeat(4500);
	const big = `"response":{"status_code":200,"request_id":"r5","body":{"text":"${"y".repeat(2 * MIB)}"}},"error":null`;
	const stub = dispatcherFor(env, `test/mem-${id}`);
	await runInDurableObject(stub, async (_o, state) => {
		const lines = new LineStore(state.storage.sql, state.storage);
		lines.addBatch({
			id,
			endpoint: "/v1/chat/completions",
			principal: JSON.stringify({ key: { id: keyId } }),
			caller_key_id: keyId,
			expires_at: now + 86_400_000,
		});
		lines.addLines(
			id,
			Array.from({ length: n }, (_, i) => ({ idx: i, customId: `c${i}`, body: "{}", grp: "g" })),
		);
		await env.BATCH_FILES.put(resultKey(id, 5), big);
		state.storage.transactionSync(() => {
			for (let i = 0; i < n; i++) {
				if (i === 5) lines.finishStored(id, i, "ok", resultKey(id, 5), big.length, 1);
				else if (i % 7 === 0) lines.finish(id, i, "error", `"response":null,"error":{"code":"e${i}","message":"m"}`, 0);
				else
					lines.finish(id, i, "ok", `"response":{"status_code":200,"request_id":"r${i}","body":{"p":"${pad}"}},"error":null`, 1);
			}
		});
		await state.storage.setAlarm(Date.now() + 60_000);
	});
	return { id, stub, big };
}

async function fileLines(openai: OpenAI, id: string | null | undefined) {
	const text = await (await openai.files.content(id ?? "none")).text();
	return text
		.split("\n")
		.filter(Boolean)
		.map((l) => JSON.parse(l) as { id: string; custom_id: string; error: { code: string } | null });
}

function expected(n: number, failed: boolean): string[] {
	return Array.from({ length: n }, (_, i) => i)
		.filter((i) => (i !== 5 && i % 7 === 0) === failed)
		.map((i) => `c${i}`);
}

describe("batch memory bounds", () => {
	it("finalizes 2,400 lines a page at a time into fixed-size R2 parts, a large result streamed from R2", async () => {
		const key = await createKey();
		const n = 2400;
		const { id, stub } = await endedBatch(key.id, n);
		const pages: number[] = [];
		const parts: number[] = [];
		await runInDurableObject(stub, async (_o, state) => {
			const lines = new LineStore(state.storage.sql, state.storage);
			const page = lines.resultsPage.bind(lines);
			lines.resultsPage = (...a) => {
				const rows = page(...a);
				pages.push(rows.reduce((s, r) => s + (r.result?.length ?? 0), 0));
				return rows;
			};
			const opts: FinalizeOptions = {
				pageRows: 50,
				pageBytes: 64 * 1024,
				partBytes: 5 * MIB,
				afterPart: (_k, p) => parts.push(p),
			};
			await finalizeBatch(env, lines, { id, keyId: key.id }, "completed", opts);
			expect(lines.batch(id)).toBeNull();
		});
		// Each page at most its byte bound plus one line; the ~13 MB output went as two full parts and a last one.
		expect(pages.length).toBeGreaterThan(n / 50);
		expect(Math.max(...pages)).toBeLessThanOrEqual(64 * 1024 + 5000);
		expect(parts).toEqual([1, 2]);
		const row = await batchesStore(env.DB).get(key.id, id);
		expect(row?.status).toBe("completed");
		const openai = client(key.key);
		const out = await fileLines(openai, row?.outputFileId);
		expect(out.map((l) => l.custom_id)).toEqual(expected(n, false));
		expect((await fileLines(openai, row?.errorFileId)).map((l) => l.custom_id)).toEqual(expected(n, true));
		expect(await env.BATCH_FILES.head(resultKey(id, 5))).toBeNull();
	});

	it("a restart mid-finalize leaves no partial file and the watchdog alarm resumes it to a whole file", async () => {
		const key = await createKey();
		const n = 2400;
		const { id, stub } = await endedBatch(key.id, n);
		await runInDurableObject(stub, async (_o, state) => {
			const lines = new LineStore(state.storage.sql, state.storage);
			const crash: FinalizeOptions = {
				partBytes: 5 * MIB,
				afterPart: () => {
					throw new Error("killed mid-finalize");
				},
			};
			await expect(finalizeBatch(env, lines, { id, keyId: key.id }, "completed", crash)).rejects.toThrow("killed");
			expect(lines.finalizeState<{ upload: { parts: unknown[] } }>(id, "output")?.upload.parts).toHaveLength(1);
		});
		const mid = await batchesStore(env.DB).get(key.id, id);
		expect(mid).toMatchObject({ status: "finalizing", outputFileId: null });
		expect(await env.BATCH_FILES.head(`files/file-${id.replace(/^batch_/, "")}-output`)).toBeNull();
		await runInDurableObject(stub, (_o, state) => state.abort("restart")).catch(() => {});
		// A new stub: the aborted one is broken, as a client's would be.
		expect(await runDurableObjectAlarm(dispatcherFor(env, `test/mem-${id}`))).toBe(true);
		const row = await batchesStore(env.DB).get(key.id, id);
		expect(row?.status).toBe("completed");
		const out = await fileLines(client(key.key), row?.outputFileId);
		expect(out.map((l) => l.custom_id)).toEqual(expected(n, false));
	});

	it("streams an upload: openai-node and a curl -F shaped body both work; limits refuse before anything is stored", async () => {
		const key = await createKey();
		const openai = client(key.key);
		const line = (i: number) =>
			JSON.stringify({
				custom_id: `u${i}`,
				method: "POST",
				url: "/v1/chat/completions",
				body: { model: "test/ok", messages: [] },
			});
		const text = `${Array.from({ length: 3000 }, (_, i) => line(i)).join("\n")}\n`;
		const file = await openai.files.create({ file: await toFile(new TextEncoder().encode(text), "a.jsonl"), purpose: "batch" });
		expect(file.bytes).toBe(new TextEncoder().encode(text).length);
		expect(await (await openai.files.content(file.id)).text()).toBe(text);
		// curl -F purpose=batch -F file=@b.jsonl: purpose first, CRLF line ends.
		const boundary = "------------------------curlish";
		const body = `--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="b.jsonl"\r\nContent-Type: application/octet-stream\r\n\r\n${line(1)}\r\n${line(2)}\r\n\r\n--${boundary}--\r\n`;
		const res = await SELF.fetch("http://gateway.test/v1/files", {
			method: "POST",
			headers: { authorization: `Bearer ${key.key}`, "content-type": `multipart/form-data; boundary=${boundary}` },
			body,
		});
		expect(res.status).toBe(200);
		const curl = (await res.json()) as { id: string; filename: string };
		expect(curl.filename).toBe("b.jsonl");
		expect(await (await openai.files.content(curl.id)).text()).toBe(`${line(1)}\r\n${line(2)}\r\n`);
		// 50,001 lines: 400, nothing stored.
		const many = `${"{}\n".repeat(50_001)}`;
		const refused = await openai.files
			.create({ file: await toFile(new TextEncoder().encode(many), "m.jsonl"), purpose: "batch" })
			.catch((e: unknown) => e);
		expect(refused).toMatchObject({ status: 400 });
		// A wrong purpose after the file: 400.
		const wrong = await openai.files
			.create({ file: await toFile(new TextEncoder().encode(text), "w.jsonl"), purpose: "assistants" as "batch" })
			.catch((e: unknown) => e);
		expect(wrong).toMatchObject({ status: 400 });
		expect((await openai.files.list()).data.map((f) => f.id).sort()).toEqual([file.id, curl.id].sort());
		const listed = await env.BATCH_FILES.list({ prefix: "files/" });
		const ours = listed.objects.filter((o) => o.key === `files/${file.id}` || o.key === `files/${curl.id}`);
		expect(ours).toHaveLength(2);
	});
});
