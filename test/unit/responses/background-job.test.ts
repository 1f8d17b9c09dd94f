import { describe, expect, it } from "vitest";
import { readHold, readJob } from "../../../src/responses/background-job";

const model = {
	id: "m",
	engine_model: "m",
	nodes: ["http://n/v1"],
	max_output_tokens: 16,
	pricing: { input_usd_per_mtok: 1, output_usd_per_mtok: 2 },
};

describe("stored background jobs and holds", () => {
	it("reads a hold written before the payer key id was named", () => {
		const legacy = JSON.stringify({ keyId: "key_payer", requestId: "req_1", model, requestedModel: "m" });
		expect(readHold(legacy)).toEqual({ payerKeyId: "key_payer", requestId: "req_1", model, requestedModel: "m" });
	});

	it("reads today's hold unchanged, and no hold as null", () => {
		const hold = { payerKeyId: "key_p", requestId: "req_2", model, requestedModel: "m" };
		expect(readHold(JSON.stringify(hold))).toEqual(hold);
		expect(readHold(null)).toBeNull();
	});

	it("reads a job written before the caller key id was named", () => {
		const job = readJob({ id: "resp_1", requestId: "req_1", keyId: "key_caller", payload: { a: 1 } } as never);
		expect(job).toEqual({ id: "resp_1", requestId: "req_1", callerKeyId: "key_caller", payload: { a: 1 } });
		expect(job).not.toHaveProperty("keyId");
	});

	it("reads today's job unchanged, and a missing job as null", () => {
		const stored = { id: "resp_2", requestId: "req_2", callerKeyId: "key_c", payload: {} };
		expect(readJob(stored)).toEqual(stored);
		expect(readJob(null)).toBeNull();
	});
});
