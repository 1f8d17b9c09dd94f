// The development engine in plain Node: the wire shapes the gateway's integration and e2e
// tests rely on. Uses only web-standard APIs so it type-checks with the Workers types.
import Ajv from "ajv";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { type Engine, type RecordedRequest, type ScenarioName, scenarioNames, startEngine } from "../../dev/engine.mjs";

let engine: Engine;

beforeAll(async () => {
	engine = await startEngine();
});
afterAll(() => engine.close());
beforeEach(() => engine.reset());

const messages = [{ role: "user", content: "hello there" }];

function chat(body: object, prefix = "", headers: Record<string, string> = {}, signal?: AbortSignal) {
	return fetch(`${engine.url}${prefix}/v1/chat/completions`, {
		method: "POST",
		headers: { "content-type": "application/json", ...headers },
		body: JSON.stringify({ model: "dev-model", messages, ...body }),
		signal,
	});
}

interface ToolCall {
	id: string;
	type: string;
	function: { name: string; arguments: string };
}
interface Completion {
	id: string;
	choices: Array<{
		message: { role: string; content: string | null; tool_calls?: ToolCall[] };
		finish_reason: string;
	}>;
}

// The Workers types make Response.json() return unknown; the engine's shape is known here.
async function completion(res: Response | Promise<Response>): Promise<Completion> {
	return (await (await res).json()) as Completion;
}

// Whole-body SSE split; fine here because the engine's default scenario sends clean frames.
function frames(text: string): string[] {
	return text
		.split("\n\n")
		.filter((frame) => frame.startsWith("data: "))
		.map((frame) => frame.slice("data: ".length));
}

function waitFor(check: () => boolean, timeout = 5000): Promise<boolean> {
	return vi.waitUntil(check, { timeout, interval: 10 });
}

function release(contains: string): Promise<{ released: number }> {
	return fetch(`${engine.url}/_engine/release`, { method: "POST", body: JSON.stringify({ contains }) }).then(
		(r) => r.json() as Promise<{ released: number }>,
	);
}

describe("dev engine", () => {
	it("answers a non-stream completion with echo text and usage", async () => {
		const res = await chat({});
		expect(res.status).toBe(200);
		expect(res.headers.get("content-type")).toBe("application/json");
		const body = await completion(res);
		expect(body).toMatchObject({
			object: "chat.completion",
			model: "dev-model",
			choices: [{ index: 0, message: { role: "assistant", content: "Echo: hello there" }, finish_reason: "stop" }],
			// "hello there" is 11 characters → ceil(11 / 4) = 3; the reply is 3 words.
			usage: { prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 },
		});
		expect(body.id).toMatch(/^chatcmpl-/);
	});

	it("cuts the reply at max_tokens and reports length", async () => {
		const [choice] = (await completion(chat({ max_tokens: 2 }))).choices;
		expect(choice?.message.content).toBe("Echo: hello");
		expect(choice?.finish_reason).toBe("length");
	});

	it("streams one chunk per word, then the finish, the usage chunk and [DONE]", async () => {
		const res = await chat({ stream: true, stream_options: { include_usage: true } });
		expect(res.headers.get("content-type")).toBe("text/event-stream");
		const data = frames(await res.text());
		expect(data.at(-1)).toBe("[DONE]");
		const chunks = data.slice(0, -1).map((frame) => JSON.parse(frame));
		expect(chunks[0].choices[0].delta).toEqual({ role: "assistant", content: "Echo:" });
		const text = chunks.map((chunk) => chunk.choices[0]?.delta.content ?? "").join("");
		expect(text).toBe("Echo: hello there");
		expect(chunks.at(-2).choices[0]).toMatchObject({ delta: {}, finish_reason: "stop" });
		expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 } });
	});

	it("sends no usage chunk unless include_usage is set", async () => {
		const chunks = frames(await (await chat({ stream: true })).text()).slice(0, -1);
		expect(chunks.some((frame) => JSON.parse(frame).usage)).toBe(false);
	});

	it("calls the first tool, then answers from the tool result", async () => {
		const tools = [{ type: "function", function: { name: "lookup", parameters: { type: "object" } } }];
		const [first] = (await completion(chat({ tools }))).choices;
		const call = first?.message.tool_calls?.[0];
		expect(first?.finish_reason).toBe("tool_calls");
		expect(call).toMatchObject({ type: "function", function: { name: "lookup" } });
		expect(JSON.parse(call?.function.arguments ?? "")).toEqual({ query: "hello there" });

		const followUp = [...messages, first?.message, { role: "tool", tool_call_id: call?.id, content: "42" }];
		const [second] = (await completion(chat({ tools, messages: followUp }))).choices;
		expect(second?.message.content).toBe("Tool said: 42");
	});

	it("answers plainly as the local catalog's dev-echo unless the user or tool_choice asks for a tool", async () => {
		const tools = [
			{ type: "function", function: { name: "Bash", parameters: { type: "object" } } },
			{ type: "function", function: { name: "lookup", parameters: { type: "object" } } },
		];
		const ask = (content: string, extra: object = {}) =>
			chat({ model: "dev-echo", tools, messages: [{ role: "user", content }], ...extra });
		const [plain] = (await completion(ask("What is 2+2?"))).choices;
		expect(plain?.finish_reason).toBe("stop");
		expect(plain?.message).toMatchObject({ content: "Echo: What is 2+2?" });
		expect(plain?.message.tool_calls).toBeUndefined();
		const named = async (content: string, extra: object = {}) =>
			(await completion(ask(content, extra))).choices[0]?.message.tool_calls?.[0]?.function.name;
		expect(await named("Please use the lookup tool for this")).toBe("lookup");
		expect(await named("use a tool")).toBe("Bash");
		expect(await named("use the missing tool")).toBe("Bash");
		expect(await named("hi", { tool_choice: "required" })).toBe("Bash");
		expect(await named("hi", { tool_choice: { type: "function", function: { name: "lookup" } } })).toBe("lookup");
		expect(await named("use the lookup tool", { tool_choice: "none" })).toBeUndefined();
	});

	it("calls the gateway's web_search only when asked to search, then cites its result", async () => {
		const search = { type: "function", function: { name: "web_search", parameters: { type: "object" } } };
		const lookup = { type: "function", function: { name: "lookup", parameters: { type: "object" } } };
		const ask = (content: string, tools: unknown[]) => chat({ tools, messages: [{ role: "user", content }] });
		// Not asked to search: as if not offered (the other tool is called, or none).
		const [plain] = (await completion(await ask("hello there", [search]))).choices;
		expect(plain?.message.content).toBe("Echo: hello there");
		const [other] = (await completion(await ask("hello there", [lookup, search]))).choices;
		expect(other?.message.tool_calls?.[0]?.function.name).toBe("lookup");
		// Asked: the gateway's search (offered last; `venym_web_search` beside a client's own `web_search`).
		const [searched] = (
			await completion(await ask("search the tides", [search, { ...search, function: { name: "venym_web_search" } }]))
		).choices;
		const call = searched?.message.tool_calls?.[0];
		expect(call?.function).toEqual({ name: "venym_web_search", arguments: '{"query":"search the tides"}' });
		const followUp = [
			{ role: "user", content: "search the tides" },
			searched?.message,
			{
				role: "tool",
				tool_call_id: call?.id,
				content: "Web search results (retrieved 2026-01-01):\n\n[1] T\nURL: https://t.example\nTides.",
			},
		];
		const [answer] = (await completion(await chat({ tools: [search], messages: followUp }))).choices;
		expect(answer?.message.content).toBe("According to [1], search the tides is covered in the results.");
	});

	it("answers fail500 with a nested server error", async () => {
		const res = await chat({}, "/s/fail500");
		expect(res.status).toBe(500);
		expect(await res.json()).toEqual({ error: { message: "engine exploded", type: "server_error" } });
	});

	it("records requests with their authorization header, also over HTTP", async () => {
		await chat({ max_tokens: 5 }, "/s/fail500", { authorization: "Bearer node-key" });
		const [recorded] = (await (await fetch(`${engine.url}/_engine/requests`)).json()) as RecordedRequest[];
		expect(recorded).toMatchObject({
			method: "POST",
			path: "/s/fail500/v1/chat/completions",
			scenario: "fail500",
			body: { max_tokens: 5 },
			aborted: false,
			finished: true,
		});
		expect(recorded?.headers.authorization).toBe("Bearer node-key");

		await fetch(`${engine.url}/_engine/reset`, { method: "POST" });
		expect(engine.requests).toEqual([]);
	});

	it("lists only the requests a test asks for: since an id, containing a text, the last n", async () => {
		for (const word of ["alpha", "beta", "alpha beta", "gamma"]) await chat({ messages: [{ role: "user", content: word }] });
		const list = async (query: string) =>
			((await (await fetch(`${engine.url}/_engine/requests${query}`)).json()) as RecordedRequest[]).map((r) => r.id);
		const ids = engine.requests.map((r) => r.id);
		expect(await list("")).toEqual(ids);
		expect(await list(`?since=${ids[1]}`)).toEqual(ids.slice(2));
		expect(await list("?contains=alpha")).toEqual([ids[0], ids[2]]);
		expect(await list(`?since=${ids[0]}&contains=alpha`)).toEqual([ids[2]]);
		expect(await list("?tail=1")).toEqual([ids[3]]);
		expect(await list("?contains=alpha&tail=1")).toEqual([ids[2]]);
		expect(await list("?contains=nowhere")).toEqual([]);
	});

	it("keeps a tenant's requests apart under /t/<tenant>, scenarios included", async () => {
		const post = (prefix: string) =>
			fetch(`${engine.url}${prefix}/v1/chat/completions`, {
				method: "POST",
				body: JSON.stringify({ messages }),
			});
		expect((await post("/t/a/s/fail500")).status).toBe(500);
		expect((await post("/t/b")).status).toBe(200);
		const list = async (prefix: string) =>
			(await (await fetch(`${engine.url}${prefix}/_engine/requests`)).json()) as RecordedRequest[];
		const a = await list("/t/a");
		expect(a.map((r) => [r.path, r.scenario])).toEqual([["/s/fail500/v1/chat/completions", "fail500"]]);
		expect((await list("/t/b")).map((r) => r.path)).toEqual(["/v1/chat/completions"]);
		expect(await list("")).toEqual([]);
		expect(engine.requests).toEqual([]);
		await fetch(`${engine.url}/t/a/_engine/reset`, { method: "POST" });
		expect(await list("/t/a")).toEqual([]);
		expect(await list("/t/b")).toHaveLength(1);
	});

	it("declares every scenario it serves in its types", () => {
		// A Record over the union: a scenario missing here, or one the types lack, fails the typecheck or this test.
		const declared: Record<ScenarioName, true> = {
			ok: true,
			fail500: true,
			poison: true,
			fail503: true,
			fail429: true,
			bad400: true,
			flat400: true,
			hang: true,
			stuck: true,
			drop: true,
			midstream: true,
			midflat: true,
			cut: true,
			error200: true,
			nousage: true,
			cumulative: true,
			finishusage: true,
			comments: true,
			slow: true,
			reasoning: true,
			stall: true,
			hugeusage: true,
			bigprompt: true,
			bytetok: true,
			onechoice: true,
			zerousage: true,
			negusage: true,
			noeol: true,
			echoauth: true,
			echoauthcontent: true,
			echoauthmid: true,
			echoauth200: true,
			echoauthescaped: true,
			mute: true,
			brokentool: true,
			cached: true,
			cachedllama: true,
			overcached: true,
			long: true,
			trickle: true,
			doneopen: true,
			slowheaders: true,
			slowprefill: true,
			slowbody: true,
			searchfail: true,
			searchslow: true,
			searchgated: true,
			"search-slow-answer": true,
			"search-failed-answer": true,
			"search-late": true,
			"search-mute-answer": true,
			"search-late-answer": true,
			"search-again": true,
			ctx4096: true,
			searchhuge: true,
			"tool-loop": true,
			"websearch-loop": true,
			"deferred-tool": true,
			"qwen-loop": true,
			codex: true,
			gated: true,
		};
		expect([...scenarioNames].sort()).toEqual(Object.keys(declared).sort());
	});

	it("marks a request aborted when the client goes away mid-stream", async () => {
		const controller = new AbortController();
		const res = await chat({ stream: true }, "/s/slow", {}, controller.signal);
		const reader = res.body!.getReader();
		await reader.read();
		controller.abort();
		await reader.read().catch(() => undefined);
		await waitFor(() => engine.requests[0]?.aborted === true);
		expect(engine.requests[0]?.finished).toBe(false);
	});
});

describe("dev engine: gated requests", () => {
	it("holds a stream after its first frame, sending empty chunks, until a test releases it", async () => {
		const res = await chat({ stream: true, messages: [{ role: "user", content: "gate-a" }] }, "/s/gated");
		const reader = res.body!.getReader();
		const decoder = new TextDecoder();
		let text = "";
		// The first frame and then empty chunks: more than one read while the gate is shut.
		for (let reads = 0; reads < 3; reads++) text += decoder.decode((await reader.read()).value, { stream: true });
		expect(text).toContain('"delta":{}');
		expect(text).not.toContain("[DONE]");
		expect(engine.requests[0]?.closedAt).toBeNull();
		// Another body's text releases nothing; this one's lets the answer finish.
		expect(await release("gate-b")).toEqual({ released: 0 });
		expect(await release("gate-a")).toEqual({ released: 1 });
		for (let r = await reader.read(); !r.done; r = await reader.read()) text += decoder.decode(r.value, { stream: true });
		expect(text).toContain("data: [DONE]");
		expect(await release("gate-a")).toEqual({ released: 0 });
	});

	it("holds a non-stream answer until released", async () => {
		let answered = false;
		const pending = chat({ messages: [{ role: "user", content: "gate-c" }] }, "/s/gated").then(async (res) => {
			answered = true;
			return completion(res);
		});
		await waitFor(() => engine.requests.length === 1);
		expect(answered).toBe(false);
		expect(await release("gate-c")).toEqual({ released: 1 });
		expect((await pending).choices[0]?.finish_reason).toBe("stop");
	});

	it("lets a gated request go when its client leaves", async () => {
		const controller = new AbortController();
		const res = await chat({ stream: true, messages: [{ role: "user", content: "gate-d" }] }, "/s/gated", {}, controller.signal);
		await res.body!.getReader().read();
		controller.abort();
		await waitFor(() => engine.requests[0]?.aborted === true);
		expect(await release("gate-d")).toEqual({ released: 0 });
	});
});

describe("dev engine: response_format and reasoning models", () => {
	const schema = {
		type: "object",
		properties: {
			city: { type: "string" },
			population: { type: "integer", minimum: 0 },
			coastal: { type: "boolean" },
			tags: { type: "array", items: { type: "string" } },
			mayor: { $ref: "#/$defs/person" },
			kind: { type: "string", enum: ["capital", "town"] },
			area: { type: ["number", "null"] },
		},
		required: ["city", "population", "coastal", "tags", "mayor", "kind", "area"],
		additionalProperties: false,
		$defs: {
			person: { type: "object", properties: { name: { type: "string" } }, required: ["name"], additionalProperties: false },
		},
	};
	const jsonSchema = { type: "json_schema", json_schema: { name: "city", strict: true, schema } };
	const matches = new Ajv({ strict: false }).compile(schema);

	function streamedText(text: string, field = "content"): string {
		return frames(text)
			.filter((frame) => frame !== "[DONE]")
			.map((frame) => JSON.parse(frame).choices[0]?.delta?.[field] ?? "")
			.join("");
	}

	it("answers json_schema with JSON that parses and matches the schema, streamed or not", async () => {
		const [choice] = (await completion(chat({ response_format: jsonSchema }))).choices;
		const answer = JSON.parse(choice?.message.content ?? "");
		expect(matches(answer), JSON.stringify(matches.errors)).toBe(true);
		expect(choice?.finish_reason).toBe("stop");

		const streamed = JSON.parse(streamedText(await (await chat({ response_format: jsonSchema, stream: true })).text()));
		expect(streamed).toEqual(answer);
	});

	it("answers json_object with a JSON object", async () => {
		const [choice] = (await completion(chat({ response_format: { type: "json_object" } }))).choices;
		const answer = JSON.parse(choice?.message.content ?? "");
		expect(typeof answer).toBe("object");
		expect(Array.isArray(answer)).toBe(false);
	});

	it("honours response_format on legacy completions too", async () => {
		const res = await fetch(`${engine.url}/v1/completions`, {
			method: "POST",
			body: JSON.stringify({ model: "dev-model", prompt: "a city", max_tokens: 200, response_format: jsonSchema }),
		});
		const body = (await res.json()) as { choices: Array<{ text: string }> };
		expect(matches(JSON.parse(body.choices[0]?.text ?? ""))).toBe(true);
	});

	it("streams reasoning_content before the answer for a model named for reasoning, with no extra flag", async () => {
		const text = await (await chat({ model: "dev-reasoner", stream: true })).text();
		const reasoning = streamedText(text, "reasoning_content");
		expect(reasoning.length).toBeGreaterThan(0);
		expect(streamedText(text)).toBe("Echo: hello there");
		// Not for a model that is not named for it.
		expect(streamedText(await (await chat({ model: "dev-echo", stream: true })).text(), "reasoning_content")).toBe("");
	});
});

describe("dev engine: the codex scenario", () => {
	const tools = [{ type: "function", function: { name: "exec_command", parameters: { type: "object" } } }];

	it("reasons, then calls exec_command with echo hi when asked to run something", async () => {
		const body = await completion(chat({ tools, messages: [{ role: "user", content: "Run echo hi" }] }, "/s/codex"));
		const message = body.choices[0]?.message as Completion["choices"][number]["message"] & { reasoning_content?: string };
		expect(message.reasoning_content).toBe("I plan the next step.");
		expect(message.tool_calls?.[0]?.function).toEqual({
			name: "exec_command",
			arguments: '{"cmd":"echo hi","yield_time_ms":1000}',
		});
	});

	it("answers with the tool's output and says what earlier reasoning it was given", async () => {
		const history = [
			{ role: "user", content: "Run echo hi" },
			{
				role: "assistant",
				content: null,
				reasoning_content: "I plan.",
				tool_calls: [{ id: "c1", type: "function", function: { name: "exec_command", arguments: "{}" } }],
			},
			{ role: "tool", tool_call_id: "c1", content: "hi" },
		];
		const [withReasoning] = (await completion(chat({ tools, messages: history }, "/s/codex"))).choices;
		expect(withReasoning?.message.content).toBe("Tool said: hi. Reasoning received: I plan.");
		const without = history.map((m) => (m.role === "assistant" ? { ...m, reasoning_content: undefined } : m));
		const [plain] = (await completion(chat({ tools, messages: without }, "/s/codex"))).choices;
		expect(plain?.message.content).toBe("Tool said: hi.");
	});
});

describe("dev engine: the qwen-loop scenario", () => {
	const tools = [{ type: "function", function: { name: "run_shell_command", parameters: { type: "object" } } }];

	it("calls Qwen Code's run_shell_command with echo hi once, then says what it printed", async () => {
		const ask = [{ role: "user", content: "Run echo hi in the shell" }];
		const [call] = (await completion(chat({ tools, messages: ask }, "/s/qwen-loop"))).choices;
		expect(call?.finish_reason).toBe("tool_calls");
		const fn = call?.message.tool_calls?.[0]?.function;
		expect(fn?.name).toBe("run_shell_command");
		expect(JSON.parse(fn?.arguments ?? "")).toMatchObject({ command: "echo hi" });
		const history = [...ask, call?.message, { role: "tool", tool_call_id: call?.message.tool_calls?.[0]?.id, content: "hi\n" }];
		const [answer] = (await completion(chat({ tools, messages: history }, "/s/qwen-loop"))).choices;
		expect(answer?.message.content).toBe("Tool said: hi");
	});
});
