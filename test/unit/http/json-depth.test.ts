/** The JSON nesting bound (src/http/json-depth.ts): the first field past it, named by its path. */
import { describe, expect, it } from "vitest";
import { depthParam, tooDeep } from "../../../src/http/json-depth";

describe("tooDeep", () => {
	const nested = (levels: number): unknown => {
		let v: unknown = 1;
		for (let i = 0; i < levels; i++) v = i % 2 ? [v] : { k: v };
		return v;
	};

	it("accepts fields nested up to the bound and names the path of the first one past it", () => {
		expect(tooDeep({ a: nested(64), b: "x" })).toBeNull();
		const path = tooDeep({ a: "x", b: nested(65) });
		expect(path?.[0]).toBe("b");
		expect(path).toHaveLength(65);
	});

	it("handles thousands of levels without overflowing the stack", () => {
		const text = `{"t":${"[".repeat(7000)}${"]".repeat(7000)}}`;
		expect(tooDeep(JSON.parse(text))?.[0]).toBe("t");
	});

	it("names a schema by its path down to the schema", () => {
		expect(depthParam(["tools", 0, "function", "parameters", "properties", "a"])).toBe("tools[0].function.parameters");
		expect(depthParam(["text", "format", "schema", "properties"])).toBe("text.format.schema");
		expect(depthParam(["x", "a", "a", "a", "a", "a"])).toBe("x.a.a.a");
	});
});
