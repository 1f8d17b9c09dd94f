/**
 * Attack round six: an end user named in a form the per-user caps could not read (`user` as an
 * object, a number, an array) must not slip past `per_user_rpm` to the engine. OpenAI refuses a
 * non-string `user` or `safety_identifier` with 400; so does every lane here, before any hold.
 */
import { describe, expect, it } from "vitest";
import { chat, createKey, gw } from "../../support/gateway";
import { ledger } from "../../support/ledger";

type ErrorBody = { error: { message: string; type: string; param: string | null } };

function body(extra: Record<string, unknown>) {
	return { model: "test/ok", messages: [{ role: "user", content: "hi" }], max_tokens: 5, ...extra };
}

describe("an end user that is not a string", () => {
	it("is refused with 400 naming the field on chat, completions and embeddings, holding nothing", async () => {
		const k = await createKey({ per_user_rpm: 1 });
		expect((await chat(k.key, body({ user: "alice" }))).status).toBe(200);
		for (const [field, value] of [
			["user", { id: "alice" }],
			["user", 123],
			["user", ["alice"]],
			["safety_identifier", { id: "alice" }],
			["safety_identifier", 7],
		] as const) {
			const res = await chat(k.key, body({ [field]: value }));
			const json = (await res.json()) as ErrorBody;
			expect(res.status, JSON.stringify({ field, value, json })).toBe(400);
			expect(json.error).toMatchObject({ type: "invalid_request_error", param: field });
		}
		const legacy = await gw("/v1/completions", {
			method: "POST",
			headers: { authorization: `Bearer ${k.key}`, "content-type": "application/json" },
			body: JSON.stringify({ model: "test/ok", prompt: "hi", max_tokens: 5, user: { id: "alice" } }),
		});
		expect(legacy.status).toBe(400);
		const info = await ledger(k.id).info();
		expect(info.openHolds).toBe(0);
	});

	it("accepts null as no end user", async () => {
		const k = await createKey({ per_user_rpm: 1 });
		expect((await chat(k.key, body({ user: null, safety_identifier: null }))).status).toBe(200);
	});
});
