/** The prompt's estimate and its size (src/estimate.ts): the UTF-8 byte count the billing bound rests on. */
import { describe, expect, it } from "vitest";
import { estimatePromptTokens, inputSize, measureChatPrompt, utf8Bytes } from "../../src/estimate";

const bytes = (s: string) => new TextEncoder().encode(s).length;

describe("utf8Bytes", () => {
	it.each([
		["ASCII", "hello, world"],
		["two-byte", "ÀéØ".repeat(5)],
		["three-byte CJK", "中文文本"],
		["rare three-byte", "\uA000\uA001\uA002"],
		["a surrogate pair", "a😀b"],
		["long mixed text", "abc 中 😀 é ".repeat(20_000)],
		["long CJK past the scratch buffer", "中".repeat(100_000)],
		["a pair across the scratch buffer's edge", `${"a".repeat(65_535)}😀${"b".repeat(10)}`],
	])("counts %s as TextEncoder does", (_what, s) => {
		expect(utf8Bytes(s)).toBe(bytes(s));
	});

	it("counts a lone surrogate as U+FFFD's three bytes, short or long", () => {
		expect(utf8Bytes("a\uD800b")).toBe(5);
		expect(utf8Bytes(`${"a".repeat(100)}\uDC00`)).toBe(103);
	});
});

describe("measureChatPrompt", () => {
	it("sizes the text in UTF-8 bytes, counts images and each message's template tokens", () => {
		const body = {
			messages: [
				{ role: "system", content: "中文" },
				{
					role: "user",
					content: [
						{ type: "text", text: "é!" },
						{ type: "image_url", image_url: { url: "data:," } },
						{ type: "image_url", image_url: { url: "data:," } },
					],
				},
				{ role: "assistant", content: null, tool_calls: [{ function: { name: "f", arguments: "{}" } }] },
			],
		};
		const { estimate, size } = measureChatPrompt(body);
		expect(size).toEqual({ bytes: 6 + 3 + 3, images: 2, tokens: 12 });
		expect(estimate).toBe(estimatePromptTokens(body));
	});

	it("sizes a text or token-id prompt", () => {
		expect(inputSize("中文")).toEqual({ bytes: 6, images: 0, tokens: 0 });
		expect(inputSize([1, 2, 3])).toEqual({ bytes: 0, images: 0, tokens: 3 });
	});
});
