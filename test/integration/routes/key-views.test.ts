/** The money a key sees of itself (GET /v1/key) and the operator sees of it (GET /admin/keys/{id}). */
import { describe, expect, it } from "vitest";
import { info, keyView, ping, usd } from "../../support/billing";
import { admin, chat, createKey, gw } from "../../support/gateway";

type Json = Record<string, unknown>;

describe("key views", () => {
	it("GET /admin/keys/{id} shows balance_usd and spent; GET /v1/key shows the caller's own key without the secret", async () => {
		const k = await createKey({ name: "views", balance_usd: 2.5 });
		const res = await chat(k.key, { model: "test/ok", messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(200);

		const view = await keyView(k.id);
		expect(view).toMatchObject({ id: k.id, name: "views", balance_usd: 2.499991, spent_usd: 0.000009, open_holds: 0 });
		expect(view).not.toHaveProperty("key");

		const own = await gw("/v1/key", { headers: { authorization: `Bearer ${k.key}` } });
		expect(own.status).toBe(200);
		const text = await own.text();
		expect(text).not.toContain(k.key);
		const body = JSON.parse(text) as Record<string, unknown>;
		expect(body).toMatchObject({ id: k.id, name: "views", balance_usd: 2.499991, spent_usd: 0.000009 });
		expect(body).not.toHaveProperty("key");
		expect(body).not.toHaveProperty("hash");
		expect(String(body.prefix).length).toBeLessThan(k.key.length);
		const ledgerNow = await info(k.id);
		expect(body.balance_usd).toBe(usd(ledgerNow.balanceNanos));
		expect(body.spent_usd).toBe(usd(ledgerNow.spentNanos));
	});

	it("GET /v1/key groups the key's limits", async () => {
		const k = await createKey({
			name: "limited",
			rpm: 60,
			spend_limit_usd: 5,
			spend_limit_period: "daily",
			allowed_models: ["test/ok"],
			max_concurrent: 4,
		});
		const body = (await (await gw("/v1/key", { headers: { authorization: `Bearer ${k.key}` } })).json()) as Record<
			string,
			unknown
		>;
		expect(body.limits).toEqual({
			rpm: 60,
			tpm: null,
			max_concurrent: 4,
			per_user_rpm: null,
			per_user_daily_usd: null,
			spend_limit_usd: 5,
			spend_limit_period: "daily",
			max_tokens: null,
			allowed_models: ["test/ok"],
			allowed_origins: null,
			expires_at: null,
		});
	});
});

describe("GET /v1/key", () => {
	it("does not show the operator's metadata to the key holder", async () => {
		const k = await createKey({ name: "meta", metadata: { customer: "acme", plan: "internal-note" } });
		expect(await (await admin(`/keys/${k.id}`)).json()).toMatchObject({ metadata: { customer: "acme" } });
		const res = await gw("/v1/key", { headers: { authorization: `Bearer ${k.key}` } });
		expect(res.status).toBe(200);
		const text = await res.text();
		const body = JSON.parse(text) as Json;
		expect(body).not.toHaveProperty("metadata");
		expect(text).not.toContain("internal-note");
		expect(body).toMatchObject({ id: k.id, name: "meta", object: "api_key", balance_usd: 10, parent_key_id: null });
		expect(body.limits).toMatchObject({ rpm: null, allowed_models: null });
	});
});
