import { describe, expect, it } from "vitest";
import { affinityKey } from "../../../src/chat/fallback-plans";
import { boundedText, PART_CHARS, prefixAffinityKey } from "../../../src/routing/prefix-affinity";

const tools = [{ type: "function", function: { name: "lookup", parameters: { type: "object" } } }];

/** Turn `n` of a conversation: its history grows, its start does not. */
function turn(n: number, first: string, system = "You are a helpful assistant.") {
	const messages: Array<Record<string, unknown>> = [
		{ role: "system", content: system },
		{ role: "user", content: first },
	];
	for (let i = 1; i < n; i++) {
		messages.push({ role: "assistant", content: `answer ${i}` });
		messages.push({ role: "user", content: [{ type: "text", text: `follow-up ${i}` }] });
	}
	return { model: "m", tools, messages };
}

describe("prefix affinity", () => {
	it("gives every turn of a conversation the same key", () => {
		const key = prefixAffinityKey(turn(1, "Plan a trip to Lisbon"));
		expect(key).toMatch(/^prefix:/);
		for (let n = 2; n <= 12; n++) expect(prefixAffinityKey(turn(n, "Plan a trip to Lisbon"))).toBe(key);
	});

	it("gives different conversations different keys: another first message, system prompt or tools", () => {
		const key = prefixAffinityKey(turn(3, "Plan a trip to Lisbon"));
		expect(prefixAffinityKey(turn(3, "Plan a trip to Porto"))).not.toBe(key);
		expect(prefixAffinityKey(turn(3, "Plan a trip to Lisbon", "You are terse."))).not.toBe(key);
		expect(prefixAffinityKey({ ...turn(3, "Plan a trip to Lisbon"), tools: [] })).not.toBe(key);
	});

	it("keys a legacy completion on its prompt's start, and the Messages lane's chat body like chat", () => {
		const long = `${"shared document ".repeat(400)}`;
		expect(prefixAffinityKey({ prompt: `${long} question 1` })).toBe(prefixAffinityKey({ prompt: `${long} question 2` }));
		expect(prefixAffinityKey({ prompt: "a" })).not.toBe(prefixAffinityKey({ prompt: "b" }));
		expect(prefixAffinityKey({ prompt: ["a", "x"] })).toBe(prefixAffinityKey({ prompt: "a" }));
		expect(prefixAffinityKey({ prompt: [1, 2, 3] })).toMatch(/^prefix:/);
		expect(prefixAffinityKey({ prompt: "" })).toBeUndefined();
		expect(prefixAffinityKey({ messages: [{ role: "assistant", content: "x" }] })).toBeUndefined();
	});

	it("reads at most PART_CHARS of a part: a huge image is never walked whole", () => {
		const huge = "A".repeat(5_000_000);
		const text = boundedText([{ type: "image_url", image_url: { url: `data:image/png;base64,${huge}` } }]);
		expect(text.length).toBe(PART_CHARS);
	});

	it("comes after prompt_cache_key and user", () => {
		const body = turn(2, "hello");
		expect(affinityKey({ ...body, prompt_cache_key: "pck", user: "u" })).toBe("pck");
		expect(affinityKey({ ...body, user: "u" })).toBe("u");
		expect(affinityKey(body)).toBe(prefixAffinityKey(body));
	});
});
