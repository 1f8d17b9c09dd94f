import { describe, expect, it, vi } from "vitest";
import {
	MAX_SEAL_CHARS,
	MAX_SEALED_REASONING_CHARS,
	openReasoning,
	sealReasoning,
	sealSecret,
} from "../../../src/responses/reasoning-seal";

const SECRET = "a-deployment-secret-of-32-chars!";
const OTHER = "another-deployments-secret-value";

describe("sealed reasoning", () => {
	it("opens what it sealed, for the same key, and each seal differs", async () => {
		const a = await sealReasoning(SECRET, "key_1", "I plan the next step. 世界");
		const b = await sealReasoning(SECRET, "key_1", "I plan the next step. 世界");
		expect(a).toMatch(/^v1\.[A-Za-z0-9_-]+$/);
		expect(a).not.toBe(b);
		expect(a).not.toContain("plan");
		expect(await openReasoning(SECRET, "key_1", a)).toBe("I plan the next step. 世界");
	});

	it("does not open under another secret, for another key, or when tampered with", async () => {
		const sealed = (await sealReasoning(SECRET, "key_1", "secret thoughts")) as string;
		expect(await openReasoning(OTHER, "key_1", sealed)).toBeUndefined();
		expect(await openReasoning(SECRET, "key_2", sealed)).toBeUndefined();
		const last = sealed.at(-2) === "A" ? "B" : "A";
		const tampered = `${sealed.slice(0, -2)}${last}${sealed.at(-1)}`;
		expect(await openReasoning(SECRET, "key_1", tampered)).toBeUndefined();
		for (const bad of ["", "v1.", "v1.!!!", "v2.abc", sealed.slice(0, 20), 42, null, { sealed }]) {
			expect(await openReasoning(SECRET, "key_1", bad)).toBeUndefined();
		}
	});

	it("seals and opens nothing without a secret (or one too short to be a secret)", async () => {
		expect(await sealReasoning(undefined, "key_1", "thoughts")).toBeUndefined();
		const sealed = await sealReasoning(SECRET, "key_1", "thoughts");
		expect(await openReasoning(undefined, "key_1", sealed)).toBeUndefined();
		expect(sealSecret({})).toBeUndefined();
		expect(sealSecret({ REASONING_SEAL_SECRET: "short" })).toBeUndefined();
		expect(sealSecret({ REASONING_SEAL_SECRET: SECRET })).toBe(SECRET);
	});

	it("says once, in the log, that a secret too short to use leaves sealing off", async () => {
		const log = vi.spyOn(console, "warn").mockImplementation(() => {});
		try {
			// A fresh module: the warning is once per isolate, and earlier tests used a short secret.
			vi.resetModules();
			const fresh = await import("../../../src/responses/reasoning-seal");
			expect(fresh.sealSecret({ REASONING_SEAL_SECRET: "tooshort" })).toBeUndefined();
			expect(fresh.sealSecret({ REASONING_SEAL_SECRET: "tooshort" })).toBeUndefined();
			const lines = log.mock.calls.map((c) => String(c[0])).filter((l) => l.includes("REASONING_SEAL_SECRET"));
			expect(lines).toHaveLength(1);
			expect(lines.join("")).not.toContain("tooshort");
		} finally {
			log.mockRestore();
		}
	});

	it("is bounded: reasoning over the limit is not sealed, and a seal over its limit is not opened", async () => {
		const most = "é".repeat(MAX_SEALED_REASONING_CHARS);
		const sealed = (await sealReasoning(SECRET, "key_1", most)) as string;
		expect(sealed.length).toBeLessThanOrEqual(MAX_SEAL_CHARS);
		expect(await openReasoning(SECRET, "key_1", sealed)).toBe(most);
		expect(await sealReasoning(SECRET, "key_1", `${most}x`)).toBeUndefined();
		expect(await openReasoning(SECRET, "key_1", `v1.${"A".repeat(MAX_SEAL_CHARS)}`)).toBeUndefined();
	});
});
