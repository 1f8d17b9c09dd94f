/** Engine text relayed to a client or a log (src/engine/relay-text.ts): scrubbed and bounded. */
import { describe, expect, it } from "vitest";
import { readCapped, relayText } from "../../../src/engine/relay-text";

describe("relayText", () => {
	it("scrubs the node secrets and any bearer token, and cuts to 1,000 characters", () => {
		const out = relayText(`node said: key sk-node-123456 and Authorization: Bearer abc.def ${"z".repeat(5000)}`, [
			"sk-node-123456",
		]);
		expect(out).not.toContain("sk-node-123456");
		expect(out).not.toContain("abc.def");
		expect(out).toContain("[redacted]");
		expect(out.length).toBe(1001);
	});

	it("reads at most the cap of an error body", async () => {
		const text = await readCapped(new Response("x".repeat(200_000)), 1000);
		expect(text.length).toBe(1000);
	});
});
