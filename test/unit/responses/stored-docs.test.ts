import { describe, expect, it } from "vitest";
import { GatewayError } from "../../../src/errors";
import { failureOf } from "../../../src/responses/failure";
import { assemble, splitText } from "../../../src/responses/stored-docs";
import { ResponsesStreamEncoder } from "../../../src/responses/stream-encoder";
import { ResponsesEventBuilder } from "../../../src/responses/stream-events";
import { rewriteChatStream } from "../../../src/stream/chat-stream";
import { responseMeta } from "../../support/response-meta";

describe("splitText", () => {
	it("keeps short text in one part", () => {
		expect(splitText("abc", 3)).toEqual(["abc"]);
	});

	it("splits long text into parts of at most the limit that join back to the text", () => {
		const text = "abcdefghij";
		const parts = splitText(text, 3);
		expect(parts).toEqual(["abc", "def", "ghi", "j"]);
	});

	it("never cuts a surrogate pair in two", () => {
		const text = "ab😀cd😀😀e";
		for (let max = 2; max <= 5; max++) {
			const parts = splitText(text, max);
			expect(parts.join("")).toBe(text);
			for (const p of parts) {
				expect(p.length).toBeLessThanOrEqual(max);
				// A well-formed part survives UTF-8 (what SQLite stores) unchanged.
				expect(new TextDecoder().decode(new TextEncoder().encode(p))).toBe(p);
			}
		}
	});
});

describe("assemble", () => {
	it("joins the parts of each document and parses it, in row order", () => {
		const a = JSON.stringify({ text: "x".repeat(10) });
		const rows = [
			...splitText(a, 4).map((text) => ({ response_id: "r1", seq: 1, text })),
			{ response_id: "r1", seq: 2, text: "[1,2]" },
			{ response_id: "r2", seq: 1, text: '"last"' },
		];
		expect(assemble(rows)).toEqual([{ text: "x".repeat(10) }, [1, 2], "last"]);
	});
});

describe("failureOf", () => {
	it("uses the HTTP path's code for a gateway error", () => {
		expect(failureOf(new GatewayError("rate_limited", "Slow down."))).toEqual({
			code: "rate_limit_exceeded",
			message: "Slow down.",
		});
		expect(failureOf(new GatewayError("client_closed", "gone"))).toEqual({ code: "client_closed_request", message: "gone" });
		expect(failureOf(new GatewayError("upstream_unavailable", "No node."))).toEqual({
			code: "upstream_unavailable",
			message: "No node.",
		});
	});

	it("falls back to the error type when the HTTP path has no code, and hides unexpected errors", () => {
		expect(failureOf(new GatewayError("engine_refused", "bad temperature", { code: null }))).toEqual({
			code: "invalid_request_error",
			message: "bad temperature",
		});
		expect(failureOf(new Error("secret detail"))).toEqual({ code: "internal_error", message: "Internal error" });
	});
});

function sse(frames: string[], end: "close" | "hang" = "close"): ReadableStream<Uint8Array> {
	const bytes = new TextEncoder().encode(frames.map((f) => `data: ${f}\n\n`).join(""));
	return new ReadableStream({
		start(c) {
			c.enqueue(bytes);
			if (end === "close") c.close();
		},
	});
}

/** Engine SSE through the stream layers with the Responses encoder, as the Responses lane runs it. */
async function events(engine: ReadableStream<Uint8Array>) {
	const encoder = new ResponsesStreamEncoder(new ResponsesEventBuilder(responseMeta()));
	const { stream, done } = rewriteChatStream(engine, { model: "m", promptTokensEstimate: 3, idleTimeoutMs: 30, encoder });
	const text = await new Response(stream).text();
	const final = encoder.finalResponse(await done) as { status?: string; error: unknown };
	const parsed = text
		.split("\n\n")
		.filter((f) => f.trim())
		.map((f) => JSON.parse(f.slice(f.indexOf("data: ") + 6)) as { type: string; code?: string });
	return { parsed, final };
}

const CHUNK = JSON.stringify({
	id: "c",
	object: "chat.completion.chunk",
	choices: [{ index: 0, delta: { content: "Hi" }, finish_reason: null }],
});

describe("Responses stream errors", () => {
	it("gives an engine that goes quiet the HTTP path's upstream_timeout, in the error event and the failed response", async () => {
		const { parsed, final } = await events(sse([CHUNK], "hang"));
		const error = parsed.find((e) => e.type === "error");
		expect(error?.code).toBe("upstream_timeout");
		expect(final).toMatchObject({ status: "failed", error: { code: "upstream_timeout" } });
	});

	it("calls a stream that ends without [DONE] an upstream failure, as the HTTP path would", async () => {
		const { parsed, final } = await events(sse([CHUNK]));
		expect(parsed.find((e) => e.type === "error")?.code).toBe("upstream_unavailable");
		expect(final?.status).toBe("failed");
	});

	it("completes with the billed usage when the engine finishes", async () => {
		const usage = JSON.stringify({
			id: "c",
			object: "chat.completion.chunk",
			choices: [],
			usage: { prompt_tokens: 2, completion_tokens: 1 },
		});
		const { parsed, final } = await events(sse([CHUNK, usage, "[DONE]"]));
		expect(parsed.at(-1)?.type).toBe("response.completed");
		expect(final).toMatchObject({ status: "completed", usage: { input_tokens: 2, output_tokens: 1, total_tokens: 3 } });
	});
});
