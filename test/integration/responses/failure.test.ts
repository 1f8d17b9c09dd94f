/** A failed Responses request carries the HTTP path's error code, streamed or in the background (src/responses/failure.ts). */
import { describe, expect, it } from "vitest";
import { createKey, gw, readSse, waitFor } from "../../support/gateway";

interface ResponseJson {
	id: string;
	status: string;
	error: { code: string; message: string } | null;
	output: Array<{ type: string; content?: Array<{ text: string }> }>;
	usage: { input_tokens: number } | null;
}

interface ErrorJson {
	error: { code: string | null; message: string; type: string };
}

function post(key: string, body: Record<string, unknown>, headers: Record<string, string> = {}): Promise<Response> {
	return gw("/v1/responses", {
		method: "POST",
		headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
		body: JSON.stringify(body),
	});
}

async function created(key: string, body: Record<string, unknown>, headers: Record<string, string> = {}): Promise<ResponseJson> {
	const res = await post(key, body, headers);
	if (res.status !== 200) throw new Error(`POST /v1/responses: ${res.status} ${await res.text()}`);
	return (await res.json()) as ResponseJson;
}

function get(key: string, path: string, headers: Record<string, string> = {}): Promise<Response> {
	return gw(`/v1/responses/${path}`, { headers: { authorization: `Bearer ${key}`, ...headers } });
}

async function retrieved(key: string, id: string): Promise<ResponseJson> {
	const res = await get(key, id);
	if (res.status !== 200) throw new Error(`GET ${id}: ${res.status} ${await res.text()}`);
	return (await res.json()) as ResponseJson;
}

function settled(key: string, id: string, timeoutMs = 15_000): Promise<ResponseJson> {
	return waitFor(async () => {
		const r = await retrieved(key, id);
		return r.status === "queued" || r.status === "in_progress" ? null : r;
	}, timeoutMs);
}

describe("error codes match the HTTP path", () => {
	it("streams the chat error frame's own code in the error event and response.failed", async () => {
		const { key } = await createKey();
		const res = await post(key, { model: "test/midstream", input: "x y z", stream: true });
		const events = (await readSse(res)).map((f) => JSON.parse(f) as { type: string; code?: string; response?: ResponseJson });
		const error = events.find((e) => e.type === "error");
		expect(error?.code).toBe("upstream_unavailable");
		expect(events.at(-1)?.response?.error?.code).toBe("upstream_unavailable");
		const stored = await settled(key, events.at(-1)?.response?.id ?? "");
		expect(stored.error?.code).toBe("upstream_unavailable");
	});

	it("gives a failed background response the code the HTTP path gives the same cause", async () => {
		const { key } = await createKey();
		const sync = await post(key, { model: "test/flat400", input: "refused by the engine" });
		expect(sync.status).toBe(400);
		const httpError = ((await sync.json()) as ErrorJson).error;
		const bg = await created(key, { model: "test/flat400", input: "refused by the engine", background: true });
		const done = await settled(key, bg.id);
		expect(done.status).toBe("failed");
		expect(done.error?.code).toBe(httpError.code ?? httpError.type);
		expect(done.error?.message).toBe(httpError.message);
	});
});
