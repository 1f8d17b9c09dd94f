import { describe, expect, it } from "vitest";
import { buildDocument } from "../../../src/openapi/document";
import { gw } from "../../support/gateway";

describe("GET /openapi.json", () => {
	it("serves the OpenAPI document without a key, cacheable for five minutes", async () => {
		const res = await gw("/openapi.json");
		expect(res.status).toBe(200);
		expect(res.headers.get("content-type")).toMatch(/^application\/json/);
		expect(res.headers.get("cache-control")).toBe("public, max-age=300");
		expect(res.headers.get("x-request-id")).toMatch(/^req_/);
		const doc = (await res.json()) as { openapi: string; paths: Record<string, unknown> };
		expect(doc.openapi).toBe("3.1.1");
		expect(Object.keys(doc.paths)).toEqual(expect.arrayContaining(["/v1/chat/completions", "/v1/responses", "/admin/keys"]));
	});

	it("answers the same document inside workerd as the builder makes, whatever Authorization is sent", async () => {
		const res = await gw("/openapi.json", { headers: { authorization: "Bearer vk-not-a-key" } });
		expect(res.status).toBe(200);
		expect(await res.json()).toEqual(JSON.parse(JSON.stringify(buildDocument())));
	});
});
