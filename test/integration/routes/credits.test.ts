/** Credits (POST /admin/keys/{id}/credits): top-ups that revive a key, idempotency, refusals. */

import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ledgerFor } from "../../../src/ledger/ledger-client";
import { balanceOf, credit, expect400, mint } from "../../support/admin-input";
import { COMPLETED, type ErrorBody, HOLD, info, keyView, ping, usageOf, usd } from "../../support/billing";
import { admin, chat, createKey } from "../../support/gateway";

describe("credits", () => {
	it("a top-up revives a key that got 402; credits are idempotent by Idempotency-Key", async () => {
		// Exactly one completed request's worth.
		const k = await createKey({ balance_usd: usd(COMPLETED) });
		expect(k.balance_usd).toBe(0.000009);
		const first = await chat(k.key, { model: "test/ok", messages: [{ role: "user", content: ping() }] });
		expect(first.status).toBe(200);
		expect(first.headers.get("x-venym-balance-usd")).toBe("0");

		const refused = await chat(k.key, { model: "test/ok", messages: [{ role: "user", content: ping() }] });
		expect(refused.status).toBe(402);
		const err = ((await refused.json()) as ErrorBody).error;
		expect(err).toMatchObject({ code: "insufficient_balance", available_usd: 0, required_usd: usd(HOLD) });
		expect(err.message).toContain("$0.000000");
		expect(err.message).toContain("$0.003039");

		const topUp = () =>
			admin(`/keys/${k.id}/credits`, {
				method: "POST",
				headers: { "idempotency-key": "topup-1" },
				body: JSON.stringify({ amount_usd: 0.01, note: "top-up" }),
			});
		const c1 = await topUp();
		expect(c1.status).toBe(200);
		expect(await c1.json()).toEqual({ id: k.id, balance_usd: 0.01, applied: true });
		const c2 = await topUp();
		expect(await c2.json()).toEqual({ id: k.id, balance_usd: 0.01, applied: false });
		const [c3, c4] = await Promise.all([topUp(), topUp()]);
		expect(((await c3.json()) as { applied: boolean }).applied).toBe(false);
		expect(((await c4.json()) as { applied: boolean }).applied).toBe(false);
		expect((await info(k.id)).balanceNanos).toBe(10_000_000);

		const revived = await chat(k.key, { model: "test/ok", messages: [{ role: "user", content: ping() }] });
		expect(revived.status).toBe(200);
		expect(revived.headers.get("x-venym-cost-usd")).toBe("0.000009");
		expect(revived.headers.get("x-venym-balance-usd")).toBe("0.009991");

		// A different key is a different credit.
		const other = await admin(`/keys/${k.id}/credits`, {
			method: "POST",
			headers: { "idempotency-key": "topup-2" },
			body: JSON.stringify({ amount_usd: 0.01 }),
		});
		expect(await other.json()).toEqual({ id: k.id, balance_usd: 0.019991, applied: true });

		const view = await keyView(k.id);
		expect(view.balance_usd).toBe(0.019991);
		expect(view.spent_usd).toBe(0.000018);
		await usageOf(k.id, 2);
	});

	it("concurrent top-ups with the same Idempotency-Key apply once", async () => {
		const k = await createKey({ balance_usd: 0 });
		const results = await Promise.all(
			Array.from({ length: 8 }, () =>
				admin(`/keys/${k.id}/credits`, {
					method: "POST",
					headers: { "idempotency-key": "burst" },
					body: JSON.stringify({ amount_usd: 1.5 }),
				}).then((r) => r.json() as Promise<{ balance_usd: number; applied: boolean }>),
			),
		);
		expect(results.filter((r) => r.applied)).toHaveLength(1);
		for (const r of results) expect(r.balance_usd).toBe(1.5);
		expect((await info(k.id)).balanceNanos).toBe(1_500_000_000);
	});

	it("refuses a credit of zero and an unknown key", async () => {
		const k = await createKey({ balance_usd: 0 });
		const zero = await admin(`/keys/${k.id}/credits`, { method: "POST", body: JSON.stringify({ amount_usd: 0 }) });
		expect(zero.status).toBe(400);
		const unknown = await admin("/keys/key_nope/credits", { method: "POST", body: JSON.stringify({ amount_usd: 1 }) });
		expect(unknown.status).toBe(404);
		expect((await info(k.id)).balanceNanos).toBe(0);
	});
});

describe("credits that would break the books", () => {
	it("refuses to top up a temporary token, naming its parent, and funds nothing", async () => {
		const parent = await createKey({ balance_usd: 1 });
		const res = await mint(parent.key, {});
		const token = (await res.json()) as { id: string };
		const json = await expect400(await credit(token.id, { amount_usd: 5 }), "id");
		expect(json.error.message).toContain(parent.id);
		expect(json.error.message).toMatch(/parent key's balance/);
		expect((await ledgerFor(env, token.id).info()).balanceNanos).toBe(0);
		expect(await balanceOf(parent.id)).toBe(1);
	});

	it("refuses a debit below zero with 400 and keeps the balance", async () => {
		const { id } = await createKey({ balance_usd: 1 });
		const json = await expect400(await credit(id, { amount_usd: -1.000000001 }), "amount_usd", "balance_below_zero");
		expect(json.error.message).toMatch(/below zero/);
		expect(await balanceOf(id)).toBe(1);
		const exact = await credit(id, { amount_usd: -1 });
		expect(exact.status).toBe(200);
		expect(await exact.json()).toMatchObject({ balance_usd: 0, applied: true });
		await expect400(await credit(id, { amount_usd: -1e-9 }), "amount_usd", "balance_below_zero");
	});

	it("still answers a replayed Idempotency-Key with the first result", async () => {
		const { id } = await createKey({ balance_usd: 1 });
		const headers = { "idempotency-key": "topup-1" };
		expect(await (await credit(id, { amount_usd: 2 }, headers)).json()).toMatchObject({ balance_usd: 3, applied: true });
		const again = await credit(id, { amount_usd: 2 }, headers);
		expect(again.status).toBe(200);
		expect(await again.json()).toMatchObject({ balance_usd: 3, applied: false });
	});

	it("refuses an Idempotency-Key reused with another amount with 409 and changes nothing", async () => {
		const { id } = await createKey({ balance_usd: 1 });
		const headers = { "idempotency-key": "topup-reused" };
		expect((await credit(id, { amount_usd: 2 }, headers)).status).toBe(200);
		const res = await credit(id, { amount_usd: 5 }, headers);
		const json = (await res.json()) as ErrorBody;
		expect(res.status, JSON.stringify(json)).toBe(409);
		expect(json.error).toMatchObject({ type: "invalid_request_error", code: "idempotency_key_reused", param: null });
		expect(json.error.message).toMatch(/Idempotency-Key/);
		expect(await balanceOf(id)).toBe(3);
		// The same amount is still a replay.
		expect(await (await credit(id, { amount_usd: 2 }, headers)).json()).toMatchObject({ balance_usd: 3, applied: false });
	});
});
