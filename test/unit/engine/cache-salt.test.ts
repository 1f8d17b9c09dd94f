import { describe, expect, it } from "vitest";
import { cacheSaltFor, withCacheSalt } from "../../../src/engine/cache-salt";
import { GatewayError } from "../../../src/errors";

const SECRET = "s3cret-0123456789abcdef";

describe("cache_salt", () => {
	it("is a keyed hash of the payer: the same for a payer, different across payers and secrets, revealing no id", async () => {
		const a = await cacheSaltFor(SECRET, "key_parent");
		expect(a).toMatch(/^[A-Za-z0-9_-]{43}$/);
		expect(a).not.toContain("key_parent");
		expect(await cacheSaltFor(SECRET, "key_parent")).toBe(a);
		expect(await cacheSaltFor(SECRET, "key_other")).not.toBe(a);
		expect(await cacheSaltFor(`${SECRET}-rotated`, "key_parent")).not.toBe(a);
	});

	it("refuses with a config error when the secret is missing or short", async () => {
		for (const secret of [undefined, "", "short"]) {
			const err = await cacheSaltFor(secret, "key_1").catch((e) => e);
			expect(err).toBeInstanceOf(GatewayError);
			expect((err as GatewayError).kind).toBe("config_invalid");
			expect((err as GatewayError).message).toContain("CACHE_SALT_SECRET");
		}
	});

	it("replaces the client's own cache_salt in the body", () => {
		const body = JSON.stringify({ model: "m", cache_salt: "client-chosen", messages: [] });
		expect(JSON.parse(withCacheSalt(body, "ours"))).toEqual({ model: "m", cache_salt: "ours", messages: [] });
	});
});
