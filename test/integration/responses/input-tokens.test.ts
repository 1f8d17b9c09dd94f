/**
 * `POST /v1/responses/input_tokens`: a Responses request's input tokens, earlier turns included,
 * counted by the model's tokenizing node (the development engine's vLLM-style `/tokenize`), else
 * estimated; free and unrecorded.
 */
import { describe, expect, it } from "vitest";
import { createKey, engineRequests, gw } from "../../support/gateway";
import { ledger } from "../../support/ledger";

function post(key: string, path: string, body: Record<string, unknown>): Promise<Response> {
	return gw(path, {
		method: "POST",
		headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
		body: JSON.stringify(body),
	});
}

const marker = () => `it-${crypto.randomUUID().slice(0, 8)}`;

describe("POST /v1/responses/input_tokens", () => {
	it("counts with the node's tokenizer, the earlier turns included, free and unrecorded", async () => {
		const key = await createKey({ name: "resp-input-tokens", balance_usd: 10 });
		const m = marker();
		const res = await post(key.key, "/v1/responses/input_tokens", { model: "test/ok", input: `count ${m}` });
		const body = (await res.json()) as { object: string; input_tokens: number };
		expect(res.status, JSON.stringify(body)).toBe(200);
		expect(res.headers.get("x-venym-token-count")).toBe("engine");
		// The development engine counts ceil(chars / 4) + 3 a message.
		expect(body).toEqual({ object: "response.input_tokens", input_tokens: Math.ceil(`count ${m}`.length / 4) + 3 });
		const tokenized = (await engineRequests({ contains: m })).filter((r) => r.path === "/tokenize");
		expect(tokenized).toHaveLength(1);

		// A stored turn, then the count of a follow-up: both turns' messages are counted.
		const first = (await (await post(key.key, "/v1/responses", { model: "test/ok", input: `first ${m}` })).json()) as {
			id: string;
		};
		const follow = await post(key.key, "/v1/responses/input_tokens", {
			model: "test/ok",
			input: "and then?",
			previous_response_id: first.id,
		});
		const counted = (await follow.json()) as { input_tokens: number };
		expect(counted.input_tokens).toBeGreaterThan(body.input_tokens);
		const sent = (await engineRequests({ contains: m })).filter((r) => r.path === "/tokenize").at(-1);
		expect(JSON.stringify(sent?.body)).toContain("and then?");

		// Only the one stored response was billed.
		const info = await ledger(key.id).info();
		expect(info.heldNanos).toBe(0);
	});

	it("falls back to the estimate, said so, when no node counts", async () => {
		const key = await createKey({ name: "resp-input-tokens-est", balance_usd: 10 });
		const res = await post(key.key, "/v1/responses/input_tokens", { model: "test/all-down", input: "12345678" });
		expect(res.status).toBe(200);
		expect(res.headers.get("x-venym-token-count")).toBe("estimate");
		expect(await res.json()).toEqual({ object: "response.input_tokens", input_tokens: 6 });
	});

	it("refuses an unknown model as /v1/responses does", async () => {
		const key = await createKey({ name: "resp-input-tokens-404", balance_usd: 10 });
		const res = await post(key.key, "/v1/responses/input_tokens", { model: "test/nope", input: "hi" });
		expect(res.status).toBe(404);
	});
});
