/**
 * Spend alerts end to end: a key's rules cross in its ledger under concurrent settlements, the
 * ledger's alarm posts one signed webhook per crossing to a real receiver (dev/engine-hooks.mjs),
 * retries after a 500 on the ledger's clock, a top-up re-arms, and the admin API lists deliveries.
 */
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { verifyAlertSignature } from "../../../src/alerts/signature";
import { hookName, hookUrl, planHook, received } from "../../support/alerts";
import { COMPLETED, ping, settledInfo, usd } from "../../support/billing";
import { at } from "../../support/clock";
import { gatewayWith } from "../../support/fleet";
import { admin, chat, createKey, gw, waitFor } from "../../support/gateway";
import { ledger } from "../../support/ledger";
import { TEST_ALERT_SECRET, testGatewayConfig } from "../../support/test-config";

const okChat = (key: string) => chat(key, { model: "test/ok", messages: [{ role: "user", content: ping() }] });

interface Delivery {
	id: string;
	event: string;
	key_id: string | null;
	status: string;
	attempts: number;
	last_status_code: number | null;
	target: string | null;
	payload: Record<string, unknown>;
}

async function deliveries(keyId: string): Promise<Delivery[]> {
	const res = await admin(`/keys/${keyId}/alert-deliveries`);
	expect(res.status).toBe(200);
	return ((await res.json()) as { data: Delivery[] }).data;
}

const nowS = () => Math.floor(Date.now() / 1000);

describe("spend alerts", () => {
	it("sends exactly one signed alert per crossing under 100 concurrent requests", async () => {
		const below = hookName("below");
		const pct = hookName("pct");
		// $1, 100 requests of 9,000 nano$: the balance goes below $0.99955 with the 51st, and the
		// spend reaches 0.045% of the $1 limit with the 50th.
		const k = await createKey({
			name: "alerted",
			balance_usd: 1,
			spend_limit_usd: 1,
			alerts: [
				{ when: "balance_below_usd", at: 0.99955, webhook_url: hookUrl(below) },
				{ when: "spent_pct_of_cap", at: 0.045, webhook_url: hookUrl(pct) },
			],
		});
		// The shared config's 2 s first-token wait is short for 100 requests at once on a busy machine.
		const gw = gatewayWith({ ...testGatewayConfig(env.ENGINE_URL), first_byte_timeout_ms: 30_000 });
		const answers = await Promise.all(
			Array.from({ length: 100 }, () => gw.chat(k.key, { model: "test/ok", messages: [{ role: "user", content: ping() }] })),
		);
		const failed = answers.filter((a) => a.res.status !== 200).map((a) => a.text);
		expect(failed, JSON.stringify(failed)).toHaveLength(0);
		const info = await settledInfo(k.id, 100);
		expect(info.spentNanos).toBe(100 * COMPLETED);

		const [hook] = await waitFor(async () => {
			const got = await received(below);
			return got.length > 0 ? got : null;
		});
		const [pctHook] = await waitFor(async () => {
			const got = await received(pct);
			return got.length > 0 ? got : null;
		});
		// Every crossing was written when it happened: one each, all delivered, nothing left to send.
		const listed = await waitFor(async () => {
			const d = await deliveries(k.id);
			return d.length === 2 && d.every((x) => x.status === "delivered") ? d : null;
		});
		await runDurableObjectAlarm(ledger(k.id));
		expect(await received(below)).toHaveLength(1);
		expect(await received(pct)).toHaveLength(1);

		if (!hook || !pctHook) throw new Error("no hook");
		expect(hook.headers["content-type"]).toBe("application/json");
		expect(hook.headers["x-venym-event"]).toBe("balance_below_usd");
		expect(await verifyAlertSignature(TEST_ALERT_SECRET, hook.headers["x-venym-signature"] ?? null, hook.body, nowS())).toBe(
			true,
		);
		// Another secret, another body, or a stale timestamp: refused.
		expect(await verifyAlertSignature("wrong", hook.headers["x-venym-signature"] ?? null, hook.body, nowS())).toBe(false);
		expect(
			await verifyAlertSignature(TEST_ALERT_SECRET, hook.headers["x-venym-signature"] ?? null, `${hook.body} `, nowS()),
		).toBe(false);
		expect(
			await verifyAlertSignature(TEST_ALERT_SECRET, hook.headers["x-venym-signature"] ?? null, hook.body, nowS() + 3600),
		).toBe(false);
		const body = JSON.parse(hook.body) as Record<string, unknown>;
		expect(hook.headers["x-venym-delivery"]).toBe(body.id);
		expect(body).toMatchObject({
			type: "key.balance_below_usd",
			key: { id: k.id, name: "alerted" },
			alert: { when: "balance_below_usd", at: 0.99955, source: "key" },
		});
		// Crossed by the 51st settlement (whichever request that was): 0.99955 exactly is not below.
		expect(body.balance_usd).toBe(usd(1e9 - 51 * COMPLETED));
		expect(body.spent_usd).toBe(usd(51 * COMPLETED));
		expect(typeof body.time).toBe("string");
		const pctBody = JSON.parse(pctHook.body) as { cap: Record<string, unknown>; type: string };
		expect(pctBody.type).toBe("key.spent_pct_of_cap");
		expect(pctBody.cap).toMatchObject({ limit_usd: 1, period: null, spent_usd: usd(50 * COMPLETED), spent_pct: 0.045 });
		expect(
			await verifyAlertSignature(TEST_ALERT_SECRET, pctHook.headers["x-venym-signature"] ?? null, pctHook.body, nowS()),
		).toBe(true);

		const d = listed.find((x) => x.event === "balance_below_usd");
		expect(d).toMatchObject({ key_id: k.id, status: "delivered", attempts: 1, last_status_code: 200 });
		expect(d?.target).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
		expect(d?.payload).toEqual(body);
		// The operator-wide list (D1) has them too, filterable by key and event.
		const all = await admin(`/alert-deliveries?key_id=${k.id}&event=balance_below_usd`);
		const allBody = (await all.json()) as { data: Delivery[] };
		expect(allBody.data.map((x) => x.id)).toEqual([d?.id]);
	});

	it("retries after a 500 with backoff on the ledger's clock, then is delivered", async () => {
		const name = hookName("retry");
		await planHook(name, [500]);
		const k = await createKey({
			balance_usd: 0.00002,
			alerts: [{ when: "balance_below_usd", at: 0.000015, webhook_url: hookUrl(name) }],
		});
		expect((await okChat(k.key)).status).toBe(200);
		await waitFor(async () => (await received(name)).length === 1);
		const failed = await waitFor(async () => {
			const [d] = await deliveries(k.id);
			return d?.attempts === 1 && d.status === "pending" ? d : null;
		});
		expect(failed.last_status_code).toBe(500);
		// Not due yet: a run now sends nothing.
		await runDurableObjectAlarm(ledger(k.id));
		expect(await received(name)).toHaveLength(1);
		// 31 seconds later on the ledger's clock the retry is due (the first backoff is 30 s).
		const later = Date.now() + 31_000;
		await waitFor(async () => {
			await at(later, () => runDurableObjectAlarm(ledger(k.id)));
			return (await received(name)).length === 2;
		});
		const [retry] = (await received(name)).slice(1);
		const [first] = await received(name);
		// The same delivery (same id and body), signed again at its own time.
		expect(retry?.headers["x-venym-delivery"]).toBe(first?.headers["x-venym-delivery"]);
		expect(retry?.body).toBe(first?.body);
		expect(
			await verifyAlertSignature(TEST_ALERT_SECRET, retry?.headers["x-venym-signature"] ?? null, retry?.body ?? "", nowS()),
		).toBe(true);
		const [done] = await deliveries(k.id);
		expect(done).toMatchObject({ status: "delivered", attempts: 2, last_status_code: 200 });
	});

	it("fires once until a top-up re-arms it", async () => {
		const name = hookName("rearm");
		// $0.00002; each request costs $0.000009; the rule is below $0.000015.
		const k = await createKey({
			balance_usd: 0.00002,
			alerts: [{ when: "balance_below_usd", at: 0.000015, webhook_url: hookUrl(name) }],
		});
		expect((await okChat(k.key)).status).toBe(200); // 11,000: crosses
		await waitFor(async () => (await received(name)).length === 1);
		const credit = await admin(`/keys/${k.id}/credits`, { method: "POST", body: JSON.stringify({ amount_usd: 0.00001 }) });
		expect(credit.status).toBe(200); // 21,000: re-armed
		expect((await okChat(k.key)).status).toBe(200); // 12,000: crosses again
		await waitFor(async () => (await received(name)).length === 2);
		expect((await okChat(k.key)).status).toBe(200); // 3,000: still below, no new crossing
		await settledInfo(k.id, 3);
		await runDurableObjectAlarm(ledger(k.id));
		expect(await received(name)).toHaveLength(2);
		const balances = (await received(name)).map((h) => (JSON.parse(h.body) as { balance_usd: number }).balance_usd);
		expect(balances).toEqual([0.000011, 0.000012]);

		// The operator-wide list, a page at a time (D1 has them once their alarm run is over).
		const page = async (q: string) => {
			const res = await admin(`/alert-deliveries?key_id=${k.id}&limit=1${q}`);
			expect(res.status).toBe(200);
			return (await res.json()) as { data: Delivery[]; next_cursor: string | null };
		};
		const first = await waitFor(async () => {
			const p = await page("&status=delivered");
			return p.next_cursor ? p : null;
		});
		const second = await page(`&status=delivered&cursor=${encodeURIComponent(first.next_cursor ?? "")}`);
		expect(second.next_cursor).toBeNull();
		expect([...first.data, ...second.data].map((d) => (d.payload as { balance_usd: number }).balance_usd)).toEqual([
			0.000012, 0.000011,
		]);
		for (const bad of ["&status=sent", "&event=sometimes", "&cursor=nope"]) {
			const res = await admin(`/alert-deliveries?limit=1${bad}`);
			expect(res.status, bad).toBe(400);
			await res.body?.cancel();
		}
	});

	it("sends exhausted when the balance reaches zero, to ALERT_WEBHOOK_URL without a webhook_url", async () => {
		const k = await createKey({ name: "drained", balance_usd: usd(COMPLETED), alerts: [{ when: "exhausted" }] });
		expect((await okChat(k.key)).status).toBe(200);
		await settledInfo(k.id, 1);
		const hook = await waitFor(async () =>
			(await received("operator")).find((h) => (JSON.parse(h.body) as { key?: { id: string } }).key?.id === k.id),
		);
		expect(JSON.parse(hook.body)).toMatchObject({ type: "key.exhausted", balance_usd: 0, key: { id: k.id, name: "drained" } });
		expect((await okChat(k.key)).status).toBe(402);
	});

	it("applies the config's operator-wide rules to every key, each crossing once", async () => {
		const name = hookName("operator-wide");
		const keys = [await createKey({ name: "op-a", balance_usd: 1 }), await createKey({ name: "op-b", balance_usd: 1 })];
		// The ledgers read the config from their own env: this test's ledgers get one with an
		// operator-wide rule (below $0.99999: the second request of each key crosses it).
		const rule = { when: "balance_below_usd", at: 0.99999, webhook_url: hookUrl(name) };
		const restore: Array<() => void> = [];
		for (const k of keys) {
			await runInDurableObject(ledger(k.id), (instance) => {
				const ledgerEnv = (instance as unknown as { env: { GATEWAY_CONFIG: string } }).env;
				const before = ledgerEnv.GATEWAY_CONFIG;
				ledgerEnv.GATEWAY_CONFIG = JSON.stringify({ ...JSON.parse(before), alerts: [rule] });
				restore.push(() => {
					ledgerEnv.GATEWAY_CONFIG = before;
				});
			});
		}
		try {
			for (const k of keys) for (let i = 0; i < 3; i++) expect((await okChat(k.key)).status).toBe(200);
			for (const k of keys) await settledInfo(k.id, 3);
			const got = await waitFor(async () => {
				const h = await received(name);
				return h.length >= 2 ? h : null;
			});
			for (const k of keys) await runDurableObjectAlarm(ledger(k.id));
			expect(await received(name)).toHaveLength(2);
			const bodies = got.map((h) => JSON.parse(h.body) as { key: { id: string; name: string }; alert: { source: string } });
			expect(bodies.map((b) => b.key.name).sort()).toEqual(["op-a", "op-b"]);
			for (const b of bodies) expect(b.alert.source).toBe("operator");
		} finally {
			for (const r of restore) r();
		}
	});

	it("refuses invalid rules and webhook URLs", async () => {
		const bad = [
			{ when: "balance_below_usd" },
			{ when: "spent_pct_of_cap", at: 0 },
			{ when: "exhausted", at: 3 },
			{ when: "balance_below_usd", at: 1, webhook_url: "http://example.com/hook" },
			{ when: "balance_below_usd", at: 1, webhook_url: "https://user:pw@example.com/hook" },
			{ when: "balance_below_usd", at: 1, webhook_url: `https://example.com/${"a".repeat(2100)}` },
			{ when: "sometimes", at: 1 },
		];
		for (const rule of bad) {
			const res = await admin("/keys", { method: "POST", body: JSON.stringify({ name: "x", alerts: [rule] }) });
			expect(res.status, JSON.stringify(rule)).toBe(400);
			await res.body?.cancel();
		}
		const ok = await createKey({
			alerts: [{ when: "balance_below_usd", at: 1, webhook_url: "https://hooks.example.com/a?token=t" }],
		});
		const view = (await (await admin(`/keys/${ok.id}`)).json()) as { alerts: unknown };
		expect(view.alerts).toEqual([{ when: "balance_below_usd", at: 1, webhook_url: "https://hooks.example.com/a?token=t" }]);
		// PATCH replaces them; null removes them; a token cannot have any.
		const patched = await admin(`/keys/${ok.id}`, { method: "PATCH", body: JSON.stringify({ alerts: [{ when: "exhausted" }] }) });
		expect(((await patched.json()) as { alerts: unknown }).alerts).toEqual([{ when: "exhausted" }]);
		const cleared = await admin(`/keys/${ok.id}`, { method: "PATCH", body: JSON.stringify({ alerts: null }) });
		expect(((await cleared.json()) as { alerts: unknown }).alerts).toBeNull();
		const minted = await gw("/v1/tokens", {
			method: "POST",
			headers: { authorization: `Bearer ${ok.key}`, "content-type": "application/json" },
			body: JSON.stringify({ allowed_origins: ["https://app.example"], ttl_seconds: 60 }),
		});
		expect(minted.status).toBe(201);
		const token = (await minted.json()) as { id: string };
		const onToken = await admin(`/keys/${token.id}`, {
			method: "PATCH",
			body: JSON.stringify({ alerts: [{ when: "exhausted" }] }),
		});
		expect(onToken.status).toBe(400);
		expect(((await onToken.json()) as { error: { param: string } }).error.param).toBe("alerts");
		// The key's holder does not see the operator's webhooks.
		const own = (await (await gw("/v1/key", { headers: { authorization: `Bearer ${ok.key}` } })).json()) as object;
		expect(own).not.toHaveProperty("alerts");
	});
});
