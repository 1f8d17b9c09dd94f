// The catalog `npm start` serves (wrangler.toml's GATEWAY_CONFIG) against the development engine:
// what a newcomer tries first works out of the box: two chat models with a fallback between them,
// an embeddings model, reasoning on a reasoning model with no extra flag, structured output.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Engine, startEngine } from "../../dev/engine.mjs";
import { readLocalCatalog } from "../../dev/local-catalog.mjs";

interface CatalogModel {
	id: string;
	engine_model: string;
	nodes: Array<string | { url: string }>;
	capabilities?: string[];
	fallbacks?: string[];
}

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const catalog = readLocalCatalog() as { models: CatalogModel[] };
const isEmbeddings = (m: CatalogModel) => m.capabilities?.includes("embeddings") === true;
const chatModels = catalog.models.filter((m) => !isEmbeddings(m));
const embeddingModels = catalog.models.filter(isEmbeddings);

let engine: Engine;
beforeAll(async () => {
	engine = await startEngine();
});
afterAll(() => engine.close());

/** A model's first node, on this test's engine instead of :8788 (as `npm start` does for ENGINE_PORT). */
function nodeUrl(model: CatalogModel): string {
	const first = model.nodes[0];
	const url = typeof first === "string" ? first : (first?.url ?? "");
	expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\//);
	return url.replace(/^http:\/\/127\.0\.0\.1:\d+/, engine.url);
}

function post(model: CatalogModel, path: string, body: object): Promise<Response> {
	return fetch(`${nodeUrl(model)}${path}`, { method: "POST", body: JSON.stringify({ model: model.engine_model, ...body }) });
}

const messages = [{ role: "user", content: "hello" }];

describe("the local catalog (wrangler.toml, npm start)", () => {
	it("is a valid GATEWAY_CONFIG (npm run check-config)", () => {
		const r = spawnSync(process.execPath, ["scripts/check-config.mjs"], { cwd: ROOT, encoding: "utf8", timeout: 60_000 });
		expect(r.status, r.stderr).toBe(0);
	}, 70_000);

	it("has two chat models, one falling back to the other, and an embeddings model", () => {
		expect(chatModels.length).toBeGreaterThanOrEqual(2);
		const ids = new Set(chatModels.map((m) => m.id));
		expect(chatModels.some((m) => m.fallbacks?.some((id) => id !== m.id && ids.has(id)))).toBe(true);
		expect(embeddingModels.length).toBeGreaterThanOrEqual(1);
	});

	it("every chat model answers on the development engine, with JSON when asked for it", async () => {
		const response_format = {
			type: "json_schema",
			json_schema: {
				name: "answer",
				schema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
			},
		};
		for (const model of chatModels) {
			const res = await post(model, "/chat/completions", { messages, response_format });
			expect(res.status).toBe(200);
			const body = (await res.json()) as { choices: Array<{ message: { content: string } }> };
			expect(JSON.parse(body.choices[0]?.message.content ?? "")).toEqual({ text: expect.any(String) });
		}
	});

	it("a reasoning model streams reasoning_content with no extra flag", async () => {
		const reasoners = [];
		for (const model of chatModels) {
			const text = await (await post(model, "/chat/completions", { messages, stream: true })).text();
			if (text.includes('"reasoning_content":')) reasoners.push(model);
		}
		expect(reasoners.length).toBeGreaterThanOrEqual(1);
		for (const model of reasoners) expect(model.capabilities).toContain("reasoning");
	});

	it("the embeddings model answers /v1/embeddings", async () => {
		expect(embeddingModels.length).toBeGreaterThanOrEqual(1);
		for (const model of embeddingModels) {
			const res = await post(model, "/embeddings", { input: ["one", "two"] });
			expect(res.status).toBe(200);
			const body = (await res.json()) as { data: Array<{ embedding: number[] }> };
			expect(body.data).toHaveLength(2);
		}
	});

	it("venym/dev-echo answers a coding agent's plain question with text, tools offered", async () => {
		const echo = chatModels.find((m) => m.id === "venym/dev-echo");
		expect(echo).toBeDefined();
		if (!echo) return;
		const tools = [{ type: "function", function: { name: "Bash", parameters: { type: "object" } } }];
		const res = await post(echo, "/chat/completions", { messages: [{ role: "user", content: "What is 2+2?" }], tools });
		const body = (await res.json()) as { choices: Array<{ finish_reason: string; message: { content: string } }> };
		expect(body.choices[0]).toMatchObject({ finish_reason: "stop", message: { content: "Echo: What is 2+2?" } });
	});

	it("each agent model calls its agent's tool once, then answers with its output", async () => {
		const agents: Record<string, string> = {
			"venym/dev-tools": "Bash",
			"venym/dev-qwen": "run_shell_command",
			"venym/dev-codex": "exec_command",
		};
		for (const [id, tool] of Object.entries(agents)) {
			const model = chatModels.find((m) => m.id === id);
			expect(model, id).toBeDefined();
			if (!model) continue;
			const tools = [{ type: "function", function: { name: tool, parameters: { type: "object" } } }];
			const ask = [{ role: "user", content: "Run echo hi in the shell" }];
			const first = (await (await post(model, "/chat/completions", { messages: ask, tools })).json()) as {
				choices: Array<{ message: { tool_calls?: Array<{ id: string; function: { name: string } }> } }>;
			};
			const call = first.choices[0]?.message.tool_calls?.[0];
			expect(call?.function.name, id).toBe(tool);
			const history = [...ask, first.choices[0]?.message, { role: "tool", tool_call_id: call?.id, content: "hi" }];
			const second = (await (await post(model, "/chat/completions", { messages: history, tools })).json()) as {
				choices: Array<{ message: { content: string } }>;
			};
			expect(second.choices[0]?.message.content, id).toMatch(/^Tool said: hi/);
		}
	});
});

describe("the docs list what npm start serves", () => {
	const read = (file: string) => readFileSync(join(ROOT, file), "utf8");

	it("README.md and docs/development.md name every local model, and the table has a row for each", () => {
		const readme = read("README.md");
		const development = read("docs/development.md");
		const rows = [...development.matchAll(/^\| `(venym\/[^`]+)` \|/gm)].map((m) => m[1]);
		const ids = catalog.models.map((m) => m.id);
		for (const id of ids) expect(readme, id).toContain(`\`${id}\``);
		expect(rows.sort()).toEqual([...ids].sort());
		const count = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine"][ids.length - 1];
		expect(development).toContain(`has ${count} models`);
		expect(readme).toContain(`has ${count} models`);
	});
});
