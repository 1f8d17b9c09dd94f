/**
 * The engine receives only what the gateway understands: every request field llama.cpp's, vLLM's
 * and SGLang's OpenAI servers read (test/fixtures/engine-request-fields.ts), sent on every lane.
 * On chat, legacy completions and embeddings a field the lane does not list is refused with 400
 * `unsupported_parameter` naming it before anything is held, and the ones it lists reach the
 * engine only as the gateway understands them; on Responses and Gemini an unknown field is refused;
 * on Messages it is ignored (or refused, for an engine's own name). On no lane does one reach the
 * engine unless the model's config lets it through. llama.cpp's `n_cmpl` (its `n`) is held and
 * billed for nothing: it never runs.
 */
import { env } from "cloudflare:test";
import { beforeAll, describe, expect, it } from "vitest";
import { GEMINI_FIELDS } from "../../../src/gemini/request-schema";
import { CHAT_FIELDS, COMPLETION_FIELDS, EMBEDDING_FIELDS, FIELD_HINTS, type LaneFields } from "../../../src/http/engine-fields";
import { MessagesRequestSchema } from "../../../src/messages/request-schema";
import { ResponsesRequestSchema } from "../../../src/responses/request-schema";
import { ENGINE_FIELD_NAMES } from "../../fixtures/engine-request-fields";
import { info, settledInfo } from "../../support/billing";
import { createKey, engineRequests, gw, waitFor } from "../../support/gateway";

type Json = Record<string, unknown>;

let markers = 0;
/** A text unique to one request, to find it (or not) among the engine's requests. */
function marker(): string {
	return `fields-probe-${Date.now()}-${++markers}`;
}

function post(path: string, key: string, body: Json): Promise<Response> {
	const auth: Record<string, string> = path.startsWith("/v1/messages")
		? { "x-api-key": key, "anthropic-version": "2023-06-01" }
		: { authorization: `Bearer ${key}` };
	return gw(path, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body: JSON.stringify(body) });
}

interface Lane {
	path: string;
	model: string;
	body: (text: string, model: string) => Json;
	fields: LaneFields;
	/** Valid values for the fields the lane lists, to send them all at once. */
	samples: Json;
	/** What the gateway writes into the engine's body whatever the client sent. */
	rewritten: string[];
}

const SAMPLING: Json = {
	temperature: 0.5,
	top_p: 0.9,
	frequency_penalty: 0.1,
	presence_penalty: 0.1,
	seed: 7,
	stop: ["zzz-never"],
	logit_bias: { "11": 1 },
	top_k: 5,
	min_p: 0.05,
	repetition_penalty: 1.05,
	cache_salt: "client-salt",
	user: "end-user-1",
	stream: false,
	stream_options: { include_usage: false },
	max_tokens: 8,
	n: 1,
};

const LANES: Record<"chat" | "completions" | "embeddings", Lane> = {
	chat: {
		path: "/v1/chat/completions",
		model: "test/ok",
		body: (text, model) => ({ model, messages: [{ role: "user", content: text }] }),
		fields: CHAT_FIELDS,
		samples: {
			...SAMPLING,
			max_completion_tokens: 8,
			logprobs: true,
			top_logprobs: 1,
			tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: {} } } }],
			tool_choice: "none",
			parallel_tool_calls: false,
			response_format: { type: "text" },
			reasoning_effort: "low",
			chat_template_kwargs: { enable_thinking: false },
			documents: [{ title: "t", text: "d" }],
		},
		rewritten: ["model", "stream", "stream_options", "max_tokens", "max_completion_tokens"],
	},
	completions: {
		path: "/v1/completions",
		model: "test/ok",
		body: (text, model) => ({ model, prompt: text }),
		fields: COMPLETION_FIELDS,
		samples: { ...SAMPLING, best_of: 1, echo: false, suffix: "end", logprobs: 1 },
		rewritten: ["model", "stream", "stream_options", "max_tokens"],
	},
	embeddings: {
		path: "/v1/embeddings",
		model: "test/embed",
		body: (text, model) => ({ model, input: text }),
		fields: EMBEDDING_FIELDS,
		samples: { encoding_format: "float", dimensions: 8, user: "end-user-1" },
		rewritten: ["model"],
	},
};

const k = { key: "", keyId: "" };
beforeAll(async () => {
	const created = await createKey({ balance_usd: 5 });
	k.key = created.key;
	k.keyId = created.id;
});

/** The 400 naming `field`, in the lane's error shape (Messages: Anthropic's, with no `param` or `code`; Gemini: Google's). */
async function expectUnsupported(
	res: Response,
	field: string,
	shape: "openai" | "anthropic" | "google" = "openai",
): Promise<void> {
	const text = await res.text();
	expect(res.status, `${field}: ${text}`).toBe(400);
	if (shape === "google") {
		const { error } = JSON.parse(text) as { error: { code: number; status: string; message: string } };
		expect(error).toMatchObject({ code: 400, status: "INVALID_ARGUMENT" });
		expect(error.message).toContain(`'${field}' is not supported by this gateway`);
		return;
	}
	const { error } = JSON.parse(text) as { error: { type: string; param: string; code: string; message: string } };
	expect(error.type).toBe("invalid_request_error");
	expect(error.message).toContain(`'${field}' is not supported by this gateway`);
	if (shape === "anthropic") return;
	expect(error.code).toBe("unsupported_parameter");
	expect(error.param).toBe(field);
}

describe.each(Object.entries(LANES))("%s", (_name, lane) => {
	const unknown = ENGINE_FIELD_NAMES.filter((f) => !Object.hasOwn(lane.fields, f));
	const known = ENGINE_FIELD_NAMES.filter((f) => Object.hasOwn(lane.fields, f));

	it("refuses every engine field it does not list, naming it, before the engine", async () => {
		expect(unknown.length).toBeGreaterThan(100);
		const probe = marker();
		for (const field of unknown)
			await expectUnsupported(await post(lane.path, k.key, { ...lane.body(probe, lane.model), [field]: 1 }), field);
		expect(await engineRequests({ contains: probe })).toEqual([]);
	});

	it("sends the engine the fields it lists, as it understands them, and nothing else", async () => {
		const probe = marker();
		const sent: Json = { ...lane.body(probe, lane.model) };
		for (const field of known) if (field in lane.samples) sent[field] = lane.samples[field];
		// Every engine field the lane lists has a sample: none is left untried.
		for (const field of known) if (!(field in lane.body(probe, lane.model))) expect(lane.samples, field).toHaveProperty(field);
		const res = await post(lane.path, k.key, sent);
		expect(res.status, await res.clone().text()).toBe(200);
		await res.text();
		const [call] = await waitFor(async () => {
			const calls = await engineRequests({ contains: probe });
			return calls.length > 0 && calls;
		});
		const body = call?.body as Json;
		for (const field of Object.keys(body)) expect(lane.fields[field], field).toBe("engine");
		for (const [field, value] of Object.entries(sent)) {
			if (lane.rewritten.includes(field)) expect(body, field).toHaveProperty(field);
			else expect(body[field], field).toEqual(value);
		}
	});
});

describe("what a model lets through", () => {
	it("reaches the engine on chat and legacy completions; every other unknown field is still refused", async () => {
		for (const lane of [LANES.chat, LANES.completions]) {
			const probe = marker();
			const res = await post(lane.path, k.key, { ...lane.body(probe, "test/passthrough"), guided_regex: "a+", max_tokens: 4 });
			expect(res.status, await res.clone().text()).toBe(200);
			await res.text();
			const [call] = await engineRequests({ contains: probe });
			expect(call?.body?.guided_regex).toBe("a+");
			await expectUnsupported(
				await post(lane.path, k.key, { ...lane.body(probe, "test/passthrough"), guided_json: {} }),
				"guided_json",
			);
			// Another model does not let it through.
			await expectUnsupported(
				await post(lane.path, k.key, { ...lane.body(probe, "test/ok"), guided_regex: "a+" }),
				"guided_regex",
			);
		}
	});

	it("reaches the engine on embeddings", async () => {
		const probe = marker();
		const res = await post("/v1/embeddings", k.key, { model: "test/embed-passthrough", input: probe, normalize: false });
		expect(res.status, await res.clone().text()).toBe(200);
		const [call] = await engineRequests({ contains: probe });
		expect(call?.body?.normalize).toBe(false);
	});
});

/** A Gemini request for `text`. */
const geminiBody = (text: string) => ({
	contents: [{ role: "user", parts: [{ text }] }],
	generationConfig: { maxOutputTokens: 4 },
});

describe("Responses, Messages and Gemini, which build the engine's body field by field", () => {
	it("Gemini refuses every engine field it does not know, naming it in Google's shape, before the engine", async () => {
		const probe = marker();
		for (const field of ENGINE_FIELD_NAMES.filter((f) => !Object.hasOwn(GEMINI_FIELDS, f))) {
			await expectUnsupported(
				await post("/v1beta/models/test/ok:generateContent", k.key, { ...geminiBody(probe), [field]: 1 }),
				field,
				"google",
			);
		}
		expect(await engineRequests({ contains: probe })).toEqual([]);
	});

	it("Gemini sends what a model lets through as sent, beside its translated body", async () => {
		const probe = marker();
		const path = "/v1beta/models/test/passthrough:generateContent";
		const res = await post(path, k.key, { ...geminiBody(probe), guided_regex: "a+" });
		expect(res.status, await res.clone().text()).toBe(200);
		const [call] = await engineRequests({ contains: probe });
		expect(call?.body).toMatchObject({ guided_regex: "a+", max_tokens: 4 });
		await expectUnsupported(await post(path, k.key, { ...geminiBody(probe), guided_json: {} }), "guided_json", "google");
	});

	it("Responses refuses every engine field it does not know, naming it, before the engine", async () => {
		const own = new Set(Object.keys(ResponsesRequestSchema.shape));
		const probe = marker();
		for (const field of ENGINE_FIELD_NAMES.filter((f) => !own.has(f))) {
			await expectUnsupported(
				await post("/v1/responses", k.key, { model: "test/ok", input: probe, store: false, [field]: 1 }),
				field,
			);
		}
		expect(await engineRequests({ contains: probe })).toEqual([]);
	});

	it("Messages refuses an engine's own field and ignores the others, none reaching the engine", async () => {
		const own = new Set([...Object.keys(MessagesRequestSchema.shape)]);
		const foreign = ENGINE_FIELD_NAMES.filter((f) => !own.has(f));
		const base = (text: string) => ({ model: "test/ok", max_tokens: 16, messages: [{ role: "user", content: text }] });
		const refusedProbe = marker();
		for (const field of foreign.filter((f) => Object.hasOwn(FIELD_HINTS, f))) {
			await expectUnsupported(await post("/v1/messages", k.key, { ...base(refusedProbe), [field]: 1 }), field, "anthropic");
		}
		expect(await engineRequests({ contains: refusedProbe })).toEqual([]);

		const probe = marker();
		const ignored = foreign.filter((f) => !Object.hasOwn(FIELD_HINTS, f));
		const sent: Json = base(probe);
		for (const field of ignored) sent[field] = 1;
		const res = await post("/v1/messages", k.key, sent);
		expect(res.status, await res.clone().text()).toBe(200);
		expect(res.headers.get("x-venym-ignored-fields")).toContain(ignored[0]);
		const [call] = await engineRequests({ contains: probe });
		for (const field of Object.keys(call?.body ?? {})) expect(CHAT_FIELDS[field], field).toBe("engine");
		// What the chat pipeline writes itself (the engine model, the messages, the capped limit, the stream with usage).
		const written = new Set(["model", "messages", "max_tokens", "stream", "stream_options"]);
		for (const field of ignored) if (!written.has(field)) expect(call?.body, field).not.toHaveProperty(field);
	});
});

describe("llama.cpp's n_cmpl, its own name for n", () => {
	it("is refused on every lane: nothing held, nothing billed, no record", async () => {
		const payer = await createKey({ balance_usd: 5 });
		const before = await info(payer.id);
		for (const lane of Object.values(LANES)) {
			const probe = marker();
			await expectUnsupported(
				await post(lane.path, payer.key, { ...lane.body(probe, lane.model), n_cmpl: 8, max_tokens: 4 }),
				"n_cmpl",
			);
			expect(await engineRequests({ contains: probe })).toEqual([]);
		}
		const probe = marker();
		const responses = { model: "test/ok", input: probe, store: false, n_cmpl: 8 };
		await expectUnsupported(await post("/v1/responses", payer.key, responses), "n_cmpl");
		const messages = { model: "test/ok", max_tokens: 4, messages: [{ role: "user", content: probe }], n_cmpl: 8 };
		await expectUnsupported(await post("/v1/messages", payer.key, messages), "n_cmpl", "anthropic");
		const gemini = { ...geminiBody(probe), n_cmpl: 8 };
		await expectUnsupported(await post("/v1beta/models/test/ok:generateContent", payer.key, gemini), "n_cmpl", "google");
		expect(await engineRequests({ contains: probe })).toEqual([]);
		const after = await info(payer.id);
		expect(after.heldNanos).toBe(0);
		expect(after.openHolds).toBe(0);
		expect(after.spentNanos).toBe(before.spentNanos);
		expect(after.balanceNanos).toBe(before.balanceNanos);
		const { n } = (await env.DB.prepare("SELECT COUNT(*) AS n FROM usage_records WHERE key_id = ?")
			.bind(payer.id)
			.first<{ n: number }>()) ?? { n: -1 };
		expect(n).toBe(0);

		// One request that runs: its record is what the ledger debited, and the refused ones added nothing.
		const res = await post("/v1/chat/completions", payer.key, { ...LANES.chat.body(marker(), "test/ok"), n: 2, max_tokens: 4 });
		expect(res.status).toBe(200);
		const body = (await res.json()) as { choices: unknown[] };
		expect(body.choices).toHaveLength(2);
		const settled = await settledInfo(payer.id, 1);
		const rows = await env.DB.prepare("SELECT cost_nanos FROM usage_records WHERE key_id = ?")
			.bind(payer.id)
			.all<{ cost_nanos: number }>();
		expect(rows.results).toHaveLength(1);
		expect(settled.spentNanos - before.spentNanos).toBe(rows.results[0]?.cost_nanos);
	});
});
