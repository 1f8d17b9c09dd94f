import { describe, expect, it } from "vitest";
import { chat, createKey, gw } from "../support/gateway";

describe("smoke", () => {
	it("answers a chat completion", async () => {
		const { key } = await createKey();
		const res = await chat(key, { model: "test/ok", messages: [{ role: "user", content: "hello there" }] });
		const body = (await res.json()) as Record<string, unknown>;
		expect(res.status, JSON.stringify(body)).toBe(200);
		expect(body.model).toBe("test/ok");
	});
	it("lists models", async () => {
		const { key } = await createKey();
		const res = await gw("/v1/models", { headers: { authorization: `Bearer ${key}` } });
		expect(res.status).toBe(200);
	});
});
