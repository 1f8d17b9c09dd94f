/**
 * The pure input checks every lane shares: the refused engine fields (http/engine-fields.ts),
 * lone surrogates found when a body is parsed (http/lone-surrogate.ts via parseJsonText), and the
 * sampling ranges (http/sampling-params.ts).
 */
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { GatewayError, type OpenAIErrorBody, toErrorResponse } from "../../../src/errors";
import { REFUSED_ENGINE_FIELDS, refuseEngineFields } from "../../../src/http/engine-fields";
import { loneSurrogatePath } from "../../../src/http/lone-surrogate";
import { parseJsonText } from "../../../src/http/read-json";
import { COMPLETION_LOGPROBS, SAMPLING_FIELDS, TOP_LOGPROBS } from "../../../src/http/sampling-params";

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

describe("refuseEngineFields", () => {
	it.each(Object.keys(REFUSED_ENGINE_FIELDS))("refuses %s as unsupported_parameter naming it", (field) => {
		const err = thrown(() => refuseEngineFields({ model: "m", [field]: null }));
		expect(err.status).toBe(400);
		expect(err.param).toBe(field);
		expect(err.code).toBe("unsupported_parameter");
	});

	it("passes a field the lane names as its own, and refuses the rest", () => {
		expect(() => refuseEngineFields({ best_of: 3 }, ["best_of"])).not.toThrow();
		expect(thrown(() => refuseEngineFields({ best_of: 3, n_predict: 1 }, ["best_of"])).param).toBe("n_predict");
	});

	it("refuses chat_template inside chat_template_kwargs and passes the other kwargs", () => {
		expect(thrown(() => refuseEngineFields({ chat_template_kwargs: { chat_template: "x" } })).param).toBe(
			"chat_template_kwargs.chat_template",
		);
		expect(thrown(() => refuseEngineFields({ chat_template_kwargs: "x" })).param).toBe("chat_template_kwargs");
		expect(() => refuseEngineFields({ chat_template_kwargs: { enable_thinking: false } })).not.toThrow();
		expect(() => refuseEngineFields({ chat_template_kwargs: null })).not.toThrow();
	});

	it("looks at own fields only (an inherited name is not a field of the body)", () => {
		const body = Object.create({ n_predict: 5 }) as object;
		expect(() => refuseEngineFields(body)).not.toThrow();
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
