/**
 * The pure input checks every lane shares: the lanes' field allowlists (http/engine-fields.ts),
 * lone surrogates found when a body is parsed (http/lone-surrogate.ts via parseJsonText), and the
 * sampling ranges (http/sampling-params.ts).
 */
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { GatewayError, type OpenAIErrorBody, toErrorResponse } from "../../../src/errors";
import {
	CHAT_FIELDS,
	COMPLETION_FIELDS,
	checkFields,
	EMBEDDING_FIELDS,
	engineFields,
	FIELD_HINTS,
	refuseEngineNames,
} from "../../../src/http/engine-fields";
import { loneSurrogatePath } from "../../../src/http/lone-surrogate";
import { parseJsonText } from "../../../src/http/read-json";
import { COMPLETION_LOGPROBS, SAMPLING_FIELDS, TOP_LOGPROBS } from "../../../src/http/sampling-params";
import { validateMessagesRequest } from "../../../src/messages/request-schema";
import { messagesToChat } from "../../../src/messages/to-chat";
import { OUTPUT_FIELDS } from "../../../src/money/output-fields";
import { validateResponsesRequest } from "../../../src/responses/request-schema";
import { responsesToChat } from "../../../src/responses/to-chat";

/** The error `fn` throws, as the client sees it. */
function thrown(fn: () => unknown): OpenAIErrorBody["error"] & { status: number } {
	try {
		fn();
	} catch (err) {
		if (!(err instanceof GatewayError)) throw err;
		const { status, body } = toErrorResponse(err);
		return { status, ...body.error };
	}
	throw new Error("expected a GatewayError");
}

describe("checkFields", () => {
	it.each(Object.keys(FIELD_HINTS))("refuses %s on chat as unsupported_parameter naming it, with its hint", (field) => {
		const err = thrown(() => checkFields({ model: "m", [field]: null }, CHAT_FIELDS));
		expect(err.status).toBe(400);
		expect(err.param).toBe(field);
		expect(err.code).toBe("unsupported_parameter");
		expect(err.message).toBe(`'${field}' is not supported by this gateway: ${FIELD_HINTS[field]}.`);
	});

	it("refuses a name no list knows, with the generic hint", () => {
		const err = thrown(() => checkFields({ model: "m", n_cmpl_v2: 8 }, CHAT_FIELDS));
		expect(err.param).toBe("n_cmpl_v2");
		expect(err.message).toContain("'n_cmpl_v2' is not supported by this gateway");
		expect(err.message).toContain("openapi.json");
	});

	it("takes what the lane lists, and what the model lets through", () => {
		expect(() => checkFields({ model: "m", best_of: 3 }, COMPLETION_FIELDS)).not.toThrow();
		expect(thrown(() => checkFields({ model: "m", best_of: 3 }, CHAT_FIELDS)).param).toBe("best_of");
		expect(() => checkFields({ model: "m", guided_regex: "a+" }, CHAT_FIELDS, ["guided_regex"])).not.toThrow();
		expect(thrown(() => checkFields({ guided_regex: "a+", id_slot: 1 }, CHAT_FIELDS, ["guided_regex"])).param).toBe("id_slot");
	});

	it("refuses chat_template inside chat_template_kwargs and passes the other kwargs", () => {
		expect(thrown(() => checkFields({ chat_template_kwargs: { chat_template: "x" } }, CHAT_FIELDS)).param).toBe(
			"chat_template_kwargs.chat_template",
		);
		expect(thrown(() => checkFields({ chat_template_kwargs: "x" }, CHAT_FIELDS)).param).toBe("chat_template_kwargs");
		expect(() => checkFields({ chat_template_kwargs: { enable_thinking: false } }, CHAT_FIELDS)).not.toThrow();
		expect(() => checkFields({ chat_template_kwargs: null }, CHAT_FIELDS)).not.toThrow();
		// Let through on a lane that does not know it, it is checked the same.
		const through = thrown(() =>
			checkFields({ chat_template_kwargs: { chat_template: "x" } }, COMPLETION_FIELDS, ["chat_template_kwargs"]),
		);
		expect(through.param).toBe("chat_template_kwargs.chat_template");
	});

	it("looks at own fields only (an inherited name is not a field of the body)", () => {
		const body = Object.create({ n_predict: 5 }) as object;
		expect(() => checkFields(body, CHAT_FIELDS)).not.toThrow();
	});

	it("refuses __proto__ sent as a JSON key", () => {
		expect(thrown(() => checkFields(JSON.parse('{"model":"m","__proto__":{"n":8}}'), CHAT_FIELDS)).param).toBe("__proto__");
	});
});

describe("the lanes' lists", () => {
	it("never send a field that changes how much is produced except the lane's own, which it caps", () => {
		const capped = new Set([
			"n",
			"best_of",
			"max_tokens",
			"max_completion_tokens",
			"logprobs",
			"top_logprobs",
			"echo",
			"stream",
			"stream_options",
		]);
		for (const lane of [CHAT_FIELDS, COMPLETION_FIELDS, EMBEDDING_FIELDS]) {
			for (const [field, use] of Object.entries(lane)) {
				if (use === "engine" && OUTPUT_FIELDS.has(field)) expect(capped, field).toContain(field);
			}
		}
	});

	it("hint only names no lane accepts", () => {
		for (const field of Object.keys(FIELD_HINTS)) {
			if (field === "best_of") continue;
			for (const lane of [CHAT_FIELDS, COMPLETION_FIELDS, EMBEDDING_FIELDS])
				expect(Object.hasOwn(lane, field), field).toBe(false);
		}
	});
});

describe("engineFields", () => {
	it("picks the fields the lane sends and the ones let through, sharing their values", () => {
		const messages = [{ role: "user", content: "hi" }];
		const body = { model: "m", messages, metadata: { a: "b" }, venym: { web_search: true }, guided_regex: "a+", store: true };
		const out = engineFields(body, CHAT_FIELDS, ["guided_regex"]);
		expect(out).toEqual({ model: "m", messages, guided_regex: "a+" });
		expect(out.messages).toBe(messages);
		expect(body).toHaveProperty("venym");
	});

	it("lets the lane decide a field it knows, whatever the model lists", () => {
		expect(engineFields({ venym: {}, metadata: {} }, CHAT_FIELDS, ["venym", "metadata"])).toEqual({});
	});
});

describe("refuseEngineNames", () => {
	it("refuses an engine's own field and ignores other unknown names", () => {
		expect(thrown(() => refuseEngineNames({ n_predict: 9 }, new Set())).param).toBe("n_predict");
		expect(() => refuseEngineNames({ newer_beta_field: true }, new Set())).not.toThrow();
		expect(() => refuseEngineNames({ priority: 1 }, new Set(["priority"]))).not.toThrow();
	});
});

describe("lone surrogates", () => {
	const parsedPath = (text: string) => loneSurrogatePath(text, JSON.parse(text));

	it("finds an escaped lone surrogate and names its path", () => {
		expect(parsedPath(String.raw`{"a":[{"b":"ok"},{"b":"x\ud800"}]}`)).toEqual(["a", 1, "b"]);
		expect(parsedPath(String.raw`{"a":"\udfff"}`)).toEqual(["a"]);
		expect(parsedPath(String.raw`{"a":"\uDC00\uD800"}`)).toEqual(["a"]);
		expect(parsedPath(String.raw`"\ud800"`)).toEqual([]);
	});

	it("names the key when the key holds one", () => {
		expect(parsedPath(String.raw`{"m":{"k\ud800":"v"}}`)).toEqual(["m", "k\ud800"]);
	});

	it("passes surrogate pairs, escaped or raw, and an escaped backslash before 'ud800'", () => {
		expect(parsedPath(String.raw`{"a":"\ud83d\ude80","b":"🚀"}`)).toBeNull();
		expect(parsedPath(String.raw`{"a":"\\ud800"}`)).toBeNull();
	});

	it("relies on UTF-8 decoding: a surrogate's bytes decode to U+FFFD, never to a lone surrogate", () => {
		const text = new TextDecoder().decode(new Uint8Array([0x22, 0xed, 0xa0, 0x80, 0x22]));
		expect(text).toContain("\ufffd");
		expect(text).not.toMatch(/\p{Cs}/u);
		expect(loneSurrogatePath(text, JSON.parse(text))).toBeNull();
	});

	it("parseJsonText answers 400 invalid_value with the param as OpenAI writes it", () => {
		const err = thrown(() => parseJsonText(String.raw`{"messages":[{"role":"user","content":"\ud800"}]}`));
		expect(err.status).toBe(400);
		expect(err.param).toBe("messages[0].content");
		expect(err.code).toBe("invalid_value");
		expect(thrown(() => parseJsonText(String.raw`"\ud800"`)).param).toBeNull();
	});
});

describe("sampling ranges", () => {
	const Sampling = z.object({ ...SAMPLING_FIELDS, top_logprobs: TOP_LOGPROBS, logprobs: COMPLETION_LOGPROBS });
	const ok = (v: Record<string, unknown>) => Sampling.safeParse(v).success;

	it("accepts the edges of OpenAI's ranges, and null as the default", () => {
		expect(ok({ temperature: 0, top_p: 1, frequency_penalty: -2, presence_penalty: 2 })).toBe(true);
		expect(ok({ seed: Number.MIN_SAFE_INTEGER, logit_bias: { "1": -100, "2": 100 }, stop: ["a", "b", "c", "d"] })).toBe(true);
		expect(ok({ top_logprobs: 20, logprobs: 5, temperature: null, stop: null, seed: null })).toBe(true);
	});

	it.each([
		{ temperature: 2.0001 },
		{ temperature: Number.POSITIVE_INFINITY },
		{ temperature: Number.NaN },
		{ top_p: -0.01 },
		{ frequency_penalty: -2.5 },
		{ presence_penalty: 2.5 },
		{ seed: Number.MAX_SAFE_INTEGER + 1 },
		{ seed: 0.5 },
		{ logit_bias: { "1": 100.5 } },
		{ stop: ["a", "b", "c", "d", "e"] },
		{ top_logprobs: 21 },
		{ logprobs: 6 },
	])("refuses %j", (v) => {
		expect(ok(v)).toBe(false);
	});
});

describe("the chat bodies Responses and Messages build", () => {
	it("carry only fields chat's allowlist knows, and no client field they do not translate", () => {
		const { req } = validateMessagesRequest({
			model: "m",
			max_tokens: 64,
			system: "be brief",
			messages: [{ role: "user", content: "hi" }],
			stop_sequences: ["x"],
			stream: true,
			temperature: 0.2,
			top_p: 0.9,
			top_k: 5,
			tools: [{ name: "f", input_schema: { type: "object" } }],
			tool_choice: { type: "any", disable_parallel_tool_use: true },
			thinking: { type: "enabled", budget_tokens: 1024 },
			metadata: { user_id: "u" },
			models: ["b"],
			venym: { tool_call_repair: false },
			newer_beta_field: { n: 8 },
		});
		const fromMessages = messagesToChat(req, { reasoning: true, webSearch: false });
		expect(() => checkFields(fromMessages, CHAT_FIELDS)).not.toThrow();
		expect(fromMessages).not.toHaveProperty("newer_beta_field");

		const responses = validateResponsesRequest({
			model: "m",
			input: "hi",
			instructions: "be brief",
			max_output_tokens: 64,
			temperature: 0.2,
			top_p: 0.9,
			tools: [{ type: "function", name: "f", parameters: { type: "object" } }],
			tool_choice: "auto",
			parallel_tool_calls: false,
			text: { format: { type: "json_object" }, verbosity: "low" },
			reasoning: { effort: "low", summary: "auto" },
			metadata: { a: "b" },
			user: "u",
			prompt_cache_key: "k",
			stream: true,
			service_tier: "auto",
			models: ["b"],
		});
		const fromResponses = responsesToChat(responses, []);
		expect(() => checkFields(fromResponses, CHAT_FIELDS)).not.toThrow();
		for (const field of Object.keys(fromResponses)) expect(CHAT_FIELDS[field], field).not.toBe("dropped");
	});
});
