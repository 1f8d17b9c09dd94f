import { describe, expect, it } from "vitest";
import { GatewayError } from "../../src/errors";
import { chatSseToResponseEvents, failureOf } from "../../src/responses/run-response";
import { assemble, splitText } from "../../src/responses/stored-docs";
import { ResponsesEventBuilder } from "../../src/responses/stream-events";
import { responseMeta } from "../support/response-meta";

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

function sse(...frames: string[]): ReadableStream<Uint8Array> {
	const bytes = new TextEncoder().encode(frames.map((f) => `data: ${f}\n\n`).join(""));
	return new ReadableStream({
		start(c) {
			c.enqueue(bytes);
			c.close();
		},
	});
}

async function events(chat: ReadableStream<Uint8Array>) {
	let final: { status?: string; error: unknown } | undefined;
	const text = await new Response(
		chatSseToResponseEvents(chat, new ResponsesEventBuilder(responseMeta()), (r) => {
			final = r;
		}),
	).text();
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

describe("chatSseToResponseEvents errors", () => {
	it("passes the chat error frame's own code to the error event and the failed response", async () => {
		const frame = JSON.stringify({
			error: { message: "The engine stopped sending.", type: "server_error", param: null, code: "upstream_timeout" },
		});
		const { parsed, final } = await events(sse(CHUNK, frame));
		expect(parsed.find((e) => e.type === "error")).toMatchObject({
			code: "upstream_timeout",
			message: "The engine stopped sending.",
		});
		expect(final).toMatchObject({
			status: "failed",
			error: { code: "upstream_timeout", message: "The engine stopped sending." },
		});
	});

	it("calls a stream that ends without [DONE] an upstream failure, as the HTTP path would", async () => {
		const { parsed, final } = await events(sse(CHUNK));
		expect(parsed.find((e) => e.type === "error")?.code).toBe("upstream_unavailable");
		expect(final?.status).toBe("failed");
	});
});
