import { describe, expect, it } from "vitest";
import { messageBatchInput } from "../../../src/batches/anthropic-input";
import { archivedAt, messageBatchObject, requestCounts, resultOf, storeBatchId } from "../../../src/batches/anthropic-objects";
import type { BatchRow } from "../../../src/db/schema";
import { GatewayError } from "../../../src/errors";

const limits = { maxLineBytes: 4096, maxFileBytes: 1 << 20 };
const req = (id: string, model = "m") => ({ custom_id: id, params: { model, max_tokens: 5, messages: [] } });

function refusal(body: unknown, l = limits): GatewayError {
	try {
		messageBatchInput(body, l);
	} catch (err) {
		if (err instanceof GatewayError) return err;
		throw err;
	}
	throw new Error("not refused");
}

describe("messageBatchInput", () => {
	it("turns requests into the store's /v1/messages lines, one model", () => {
		const input = messageBatchInput({ requests: [req("a"), req("b-2_X")] }, limits);
		expect(input.model).toBe("m");
		expect(input.count).toBe(2);
		const lines = new TextDecoder()
			.decode(input.bytes)
			.trimEnd()
			.split("\n")
			.map((l) => JSON.parse(l));
		expect(lines).toEqual([
			{ custom_id: "a", method: "POST", url: "/v1/messages", body: req("a").params },
			{ custom_id: "b-2_X", method: "POST", url: "/v1/messages", body: req("b-2_X").params },
		]);
	});

	it("holds custom_id to Anthropic's rule: 1-64 of [a-zA-Z0-9_-], unique", () => {
		expect(messageBatchInput({ requests: [req("x".repeat(64))] }, limits).count).toBe(1);
		for (const id of ["", "x".repeat(65), "a b", "é", "a.b"]) {
			expect(refusal({ requests: [req(id)] }).options.param).toBe("requests.0.custom_id");
		}
		expect(refusal({ requests: [req("a"), req("a")] }).message).toMatch(/Duplicate custom_id 'a'/);
	});

	it("refuses mixed models, streaming, missing params and unknown fields, naming the place", () => {
		expect(refusal({ requests: [req("a"), req("b", "n")] }).options.param).toBe("requests.1.params.model");
		expect(refusal({ requests: [{ custom_id: "a", params: { model: "m", stream: true } }] }).options.param).toBe(
			"requests.0.params.stream",
		);
		expect(refusal({ requests: [{ custom_id: "a" }] }).options.param).toBe("requests.0.params");
		expect(refusal({ requests: [{ ...req("a"), extra: 1 }] }).options.param).toBe("requests.0.extra");
		expect(refusal({ requests: [req("a")], metadata: {} }).options.param).toBe("metadata");
		expect(refusal({ requests: [] }).options.param).toBe("requests");
		expect(refusal([]).kind).toBe("invalid_request");
	});

	it("bounds a line, the whole batch and the request count before anything is stored", () => {
		const long = { custom_id: "a", params: { model: "m", messages: [{ role: "user", content: "x".repeat(5000) }] } };
		expect(refusal({ requests: [long] }).kind).toBe("request_too_large");
		const many = Array.from({ length: 40 }, (_, i) => req(`r${i}`));
		expect(refusal({ requests: many }, { maxLineBytes: 4096, maxFileBytes: 1000 })).toMatchObject({ kind: "request_too_large" });
		const tooMany = Array.from({ length: 50_001 }, (_, i) => req(`r${i}`));
		expect(refusal({ requests: tooMany }).message).toMatch(/at most 50000 requests/);
	});
});

const row = (over: Partial<BatchRow> = {}): BatchRow => ({
	id: "batch_abc123",
	keyId: "k",
	model: "m",
	endpoint: "/v1/messages",
	inputFileId: "file-1",
	status: "in_progress",
	completionWindow: "24h",
	metadata: null,
	errors: null,
	outputFileId: null,
	errorFileId: null,
	total: 10,
	completed: 3,
	failed: 1,
	costNanos: 0,
	createdAt: Date.UTC(2026, 0, 1),
	expiresAt: Date.UTC(2026, 0, 2),
	times: {},
	...over,
});

describe("the message_batch object", () => {
	it("maps the store's status and counts, with RFC 3339 times and results_url once ended", () => {
		const running = messageBatchObject(row(), requestCounts(row()), "https://gw.example");
		expect(running).toEqual({
			id: "msgbatch_abc123",
			type: "message_batch",
			processing_status: "in_progress",
			request_counts: { processing: 6, succeeded: 3, errored: 1, canceled: 0, expired: 0 },
			ended_at: null,
			created_at: "2026-01-01T00:00:00.000Z",
			expires_at: "2026-01-02T00:00:00.000Z",
			archived_at: null,
			cancel_initiated_at: null,
			results_url: null,
		});
		const at = Date.UTC(2026, 0, 1, 1);
		const cancelled = row({ status: "cancelled", times: { cancelling: at, cancelled: at + 1000 }, failed: 7 });
		const obj = messageBatchObject(
			cancelled,
			requestCounts(cancelled, { errored: 1, canceled: 6, expired: 0 }),
			"https://gw.example",
		);
		expect(obj).toMatchObject({
			processing_status: "ended",
			request_counts: { processing: 0, succeeded: 3, errored: 1, canceled: 6, expired: 0 },
			cancel_initiated_at: "2026-01-01T01:00:00.000Z",
			ended_at: "2026-01-01T01:00:01.000Z",
			results_url: "https://gw.example/v1/messages/batches/msgbatch_abc123/results",
		});
		expect(messageBatchObject(row({ status: "cancelling" }), requestCounts(row()), "x").processing_status).toBe("canceling");
		expect(messageBatchObject(row({ status: "finalizing" }), requestCounts(row()), "x").processing_status).toBe("in_progress");
	});

	it("is archived, its results_url gone, once batches.retention_days have passed since it ended", () => {
		const end = Date.UTC(2026, 0, 1, 2);
		const done = row({ status: "completed", times: { completed: end } });
		const day = 24 * 3600 * 1000;
		expect(archivedAt(row(), 30, end + 100 * day)).toBeNull();
		expect(archivedAt(done, 30, end + 30 * day - 1)).toBeNull();
		expect(archivedAt(done, 30, end + 30 * day)).toBe(end + 30 * day);
		const obj = messageBatchObject(done, requestCounts(done), "https://gw.example", end + 30 * day);
		expect(obj).toMatchObject({ archived_at: "2026-01-31T02:00:00.000Z", results_url: null, processing_status: "ended" });
	});

	it("takes only Message Batch ids", () => {
		expect(storeBatchId("msgbatch_abc123")).toBe("batch_abc123");
		for (const id of ["batch_abc123", "msgbatch_", "msgbatch_a/b", "msgbatch_a'"]) expect(storeBatchId(id)).toBeNull();
	});
});

describe("a result line", () => {
	const line = (v: unknown) => JSON.stringify({ id: "batch_req_1", custom_id: "c", ...(v as object) });
	it("is succeeded, errored (by status, or billing when unpaid), canceled or expired", () => {
		expect(resultOf(line({ response: { status_code: 200, request_id: "r", body: { type: "message" } }, error: null }))).toEqual({
			custom_id: "c",
			result: { type: "succeeded", message: { type: "message" } },
		});
		expect(
			resultOf(line({ response: { status_code: 400, request_id: "r", body: { error: { message: "bad" } } }, error: null })),
		).toEqual({
			custom_id: "c",
			result: {
				type: "errored",
				error: { type: "error", error: { type: "invalid_request_error", message: "bad" }, request_id: "r" },
			},
		});
		expect(resultOf(line({ response: { status_code: 503, request_id: "r", body: null }, error: null })).result).toMatchObject({
			error: { error: { type: "api_error" } },
		});
		expect(resultOf(line({ response: null, error: { code: "insufficient_quota", message: "m" } })).result).toMatchObject({
			type: "errored",
			error: { error: { type: "billing_error", message: "m" } },
		});
		expect(resultOf(line({ response: null, error: { code: "batch_cancelled", message: "m" } })).result).toEqual({
			type: "canceled",
		});
		expect(resultOf(line({ response: null, error: { code: "batch_expired", message: "m" } })).result).toEqual({
			type: "expired",
		});
	});
});
