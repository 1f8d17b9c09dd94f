import { Validator } from "@seriousme/openapi-schema-validator";
import Ajv2020 from "ajv/dist/2020.js";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { CreateKey, PatchKey } from "../../../src/api/key-input";
import { usageSummaryQuery } from "../../../src/api/usage-query";
import { app } from "../../../src/app";
import { ChatRequestSchema } from "../../../src/chat/validate";
import { CHAT_FIELDS, COMPLETION_FIELDS, EMBEDDING_FIELDS, FIELD_HINTS } from "../../../src/http/engine-fields";
import { buildDocument, openApiJson } from "../../../src/openapi/document";
import { errorKindStatuses } from "../../../src/openapi/error-responses";
import { ResponsesRequestSchema } from "../../../src/responses/request-schema";

type Json = Record<string, unknown>;

const doc = buildDocument();
const METHODS = ["get", "put", "post", "delete", "patch", "head", "options"];

/** The object at `keys` under `value` (a test failure, not a crash, when it is missing). */
function at(value: unknown, ...keys: string[]): Json {
	let v = value;
	for (const k of keys) v = (v as Json | undefined)?.[k];
	return (v ?? {}) as Json;
}

function operations(): Array<{ path: string; method: string; op: Json }> {
	const out = [];
	for (const [path, item] of Object.entries(at(doc, "paths"))) {
		for (const method of METHODS) if (at(item, method).responses) out.push({ path, method, op: at(item, method) });
	}
	return out;
}

/** `#/components/...` → the object it names. */
function deref(value: unknown): Json {
	const ref = at(value).$ref;
	if (typeof ref !== "string") return at(value);
	const target = at(doc, ...ref.replace(/^#\//, "").split("/"));
	if (Object.keys(target).length === 0) throw new Error(`unresolved ${ref}`);
	return deref(target);
}

const schemas = at(doc, "components", "schemas");
const ajv = new Ajv2020({ strict: true, validateFormats: false });
ajv.addVocabulary(["components"]);
ajv.addSchema({ $id: "urn:venym:openapi", components: { schemas } });

/** A validator for a component schema, with every `#/components/schemas/...` ref resolvable. */
function validatorFor(name: string) {
	const id = `urn:venym:openapi#/components/schemas/${name}`;
	return ajv.getSchema(id) ?? ajv.compile({ $ref: id });
}

/** The wildcard routes the app serves (`POST /v1beta/models/`), each as `METHOD prefix`. */
function wildcardRoutes(): string[] {
	return app.routes.filter((r) => r.method !== "ALL" && r.path.endsWith("/*")).map((r) => `${r.method} ${r.path.slice(0, -1)}`);
}

/** What the app serves: Hono's route table without middleware, `:param` (and `:param{regex}`) as `{param}`. */
function servedRoutes(): Set<string> {
	const out = new Set<string>();
	for (const r of app.routes) {
		if (r.method === "ALL" || r.path.endsWith("*")) continue;
		const path = r.path.replace(/:(\w+)(\{[^}]*\})?/g, "{$1}");
		out.add(`${r.method} ${path}`);
	}
	return out;
}

describe("the OpenAPI document", () => {
	it("is valid OpenAPI 3.1", async () => {
		const validator = new Validator();
		const result = await validator.validate(structuredClone(doc));
		expect(result.errors).toBeUndefined();
		expect(result.valid).toBe(true);
		expect(validator.version).toBe("3.1");
	});

	it("has schemas that compile as JSON Schema 2020-12 under a strict validator", () => {
		for (const name of Object.keys(schemas)) expect(() => validatorFor(name), name).not.toThrow();
		// A `$ref` into zod's `$defs` would point nowhere once embedded in the document.
		expect(openApiJson()).not.toContain("#/$defs");
	});

	it("documents every route the app serves, and serves every route it documents", () => {
		const documented = new Set(operations().map(({ path, method }) => `${method.toUpperCase()} ${path}`));
		const served = servedRoutes();
		expect([...served].filter((r) => !documented.has(r))).toEqual([]);
		// The Gemini lane's `{model}:method` paths are served by one wildcard route per method.
		const wild = wildcardRoutes();
		expect([...documented].filter((r) => !served.has(r) && !wild.some((w) => r.startsWith(w)))).toEqual([]);
		for (const method of ["generateContent", "streamGenerateContent", "countTokens"]) {
			expect(documented).toContain(`POST /v1beta/models/{model}:${method}`);
		}
		expect(documented).toContain("GET /v1beta/models");
		for (const route of ["GET /openapi.json", "GET /admin/usage/summary", "GET /admin", "POST /v1/responses/{id}/cancel"]) {
			expect(documented).toContain(route);
		}
	});

	it("documents 401, 429 and a 5xx with the error object on every /v1 route, and 413 on every route with a body", () => {
		const consoleFile = (path: string) => path === "/admin/" || path === "/admin/console.css" || path.startsWith("/admin/js/");
		for (const { path, method, op } of operations()) {
			const where = `${method} ${path}`;
			const responses = at(op, "responses");
			if (path.startsWith("/v1/")) {
				expect(op.security, where).toEqual([{ apiKey: [] }]);
				// The Messages lane answers errors in Anthropic's shape.
				const schema = path.startsWith("/v1/messages") ? "AnthropicError" : "Error";
				for (const status of ["401", "429", "500"]) {
					expect(at(deref(responses[status]), "content", "application/json").schema, `${where} ${status}`).toEqual({
						$ref: `#/components/schemas/${schema}`,
					});
				}
			}
			if (path.startsWith("/v1beta/")) {
				// The Gemini lane answers errors in Google's shape.
				for (const status of ["401", "429", "500"]) {
					expect(at(deref(responses[status]), "content", "application/json").schema, `${where} ${status}`).toEqual({
						$ref: "#/components/schemas/GoogleError",
					});
				}
			}
			if (path.startsWith("/admin/") && !consoleFile(path)) {
				expect(op.security, where).toEqual([{ adminToken: [] }]);
				expect(Object.keys(responses), where).toEqual(expect.arrayContaining(["401", "429", "500"]));
			}
			if (op.requestBody) expect(responses["413"], where).toBeDefined();
		}
		const chat = at(doc, "paths", "/v1/chat/completions", "post", "responses");
		expect(Object.keys(chat)).toEqual(
			expect.arrayContaining(["200", "400", "401", "402", "403", "404", "413", "429", "4XX", "500", "502", "503", "504"]),
		);
		expect(at(deref(chat["429"]), "headers")["Retry-After"]).toBeDefined();
		expect(at(deref(chat["503"]), "headers")["Retry-After"]).toBeDefined();
		for (const status of errorKindStatuses())
			expect(at(doc, "components", "responses")[`Error${status}`], String(status)).toBeDefined();
	});

	it("describes the error object with message, type, param and code", () => {
		expect(at(schemas, "Error", "properties", "error").required).toEqual(["message", "type", "param", "code"]);
		expect(validatorFor("Error")({ error: { message: "m", type: "invalid_request_error", param: null, code: null } })).toBe(true);
		expect(validatorFor("Error")({ error: { message: "m" } })).toBe(false);
	});

	it("generates the chat request from its zod schema and its allowlist, and refuses other parameters", () => {
		const chat = at(schemas, "ChatCompletionRequest");
		const props = at(chat, "properties");
		const common = ["model", "messages", "stream", "max_tokens", "max_completion_tokens", "n", "venym", "temperature", "tools"];
		for (const field of [...Object.keys(ChatRequestSchema.shape), ...common, ...Object.keys(CHAT_FIELDS)]) {
			expect(props).toHaveProperty(field);
		}
		expect(chat.required).toEqual(["model", "messages"]);
		expect(chat.additionalProperties).toBe(false);
		expect(Object.keys(at(schemas, "CompletionRequest", "properties")).sort()).toEqual(Object.keys(COMPLETION_FIELDS).sort());
		expect(Object.keys(at(schemas, "EmbeddingsRequest", "properties")).sort()).toEqual(Object.keys(EMBEDDING_FIELDS).sort());
		expect(at(props, "venym", "properties").search_results).toEqual({ type: "integer", minimum: 1, maximum: 10 });
		expect(at(props, "models").maxItems).toBe(8);
		for (const lane of ["CompletionRequest", "EmbeddingsRequest"])
			expect(at(schemas, lane, "properties")).toHaveProperty("fallbacks");
		expect(at(props, "model").description).toContain(":online");

		const validate = validatorFor("ChatCompletionRequest");
		const body = { model: "venym/dev-echo", messages: [{ role: "user", content: "hi" }] };
		expect(validate({ ...body, temperature: 0.2, top_k: 5, metadata: { a: "b" } })).toBe(true);
		expect(validate({ ...body, some_engine_option: { a: 1 } })).toBe(false);
		expect(validate({ ...body, models: ["a", "b"], venym: { web_search: true } })).toBe(true);
		expect(validate({ model: "m", messages: [] })).toBe(false);
		for (const refused of Object.keys(FIELD_HINTS)) expect(validate({ ...body, [refused]: 1 }), refused).toBe(false);
	});

	it("generates the Responses request from its zod schema: strict, with its enums", () => {
		const responses = at(schemas, "ResponsesRequest");
		const generated = z.toJSONSchema(ResponsesRequestSchema, { io: "input", unrepresentable: "any" });
		expect(Object.keys(at(responses, "properties"))).toEqual(Object.keys(ResponsesRequestSchema.shape));
		expect(at(responses, "properties", "truncation")).toEqual(at(generated, "properties", "truncation"));
		expect(JSON.stringify(at(responses, "properties", "truncation"))).toContain('["auto","disabled"]');
		expect(responses.additionalProperties).toBe(false);
		// A field zod leaves as unknown (checked by code) gets the shape that code checks.
		for (const [name, prop] of Object.entries(at(responses, "properties"))) expect(prop, name).not.toEqual({});

		const validate = validatorFor("ResponsesRequest");
		expect(validate({ model: "m", input: [{ role: "user", content: "hi" }] })).toBe(true);
		expect(validate({ model: "m", input: "hi", bogus: true })).toBe(false);
		expect(validate({ model: "m", input: "hi", truncation: "sometimes" })).toBe(false);
	});

	it("generates the admin bodies and the usage summary query from zod", () => {
		expect(Object.keys(at(schemas, "CreateKeyRequest", "properties")).sort()).toEqual(Object.keys(CreateKey.shape).sort());
		expect(Object.keys(at(schemas, "PatchKeyRequest", "properties")).sort()).toEqual(Object.keys(PatchKey.shape).sort());
		// io: "input": a field with a default is optional, a transformed one shows what is sent.
		expect(at(schemas, "CreateKeyRequest").required).toEqual(["name"]);
		expect(JSON.stringify(at(schemas, "CreateKeyRequest", "properties", "expires_at"))).toContain('"date-time"');
		const params = at(doc, "paths", "/admin/usage/summary", "get").parameters as Json[];
		expect(params.map((p) => p.name)).toEqual(Object.keys(usageSummaryQuery.shape));
		expect(
			at(
				params.find((p) => p.name === "granularity"),
				"schema",
			).enum,
		).toEqual(["hour", "day"]);
	});

	it("documents the venym answers: sources, cost and balance headers, request id", () => {
		const ok = at(doc, "paths", "/v1/chat/completions", "post", "responses", "200");
		for (const header of ["x-request-id", "x-venym-cost-usd", "x-venym-balance-usd", "x-venym-web-search"]) {
			expect(ok.headers).toHaveProperty(header);
		}
		expect(Object.keys(at(ok, "content"))).toEqual(["application/json", "text/event-stream"]);
		expect(at(schemas, "VenymSources", "properties").object).toEqual({ const: "venym.sources" });
		expect(at(schemas, "ChatCompletion", "properties", "venym", "properties").sources).toBeDefined();
		expect(at(doc, "paths", "/admin", "get", "responses", "200", "content")).toHaveProperty("text/html");
		expect(at(doc, "components", "securitySchemes", "apiKey")).toMatchObject({ type: "http", scheme: "bearer" });
		expect(at(doc, "components", "securitySchemes", "adminToken")).toMatchObject({ type: "http", scheme: "bearer" });
	});

	it("is built once and served as the same text", () => {
		expect(openApiJson()).toBe(openApiJson());
		expect(JSON.parse(openApiJson())).toEqual(doc);
	});
});
