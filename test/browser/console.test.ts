/**
 * The operator console (`/admin/`) in a real browser: headless Chromium against the gateway
 * under `wrangler dev`. A wrong token is refused and shows no data; the right one finds a key
 * this test created (by name, with its balance), tops it up and sees the new balance, and opens
 * its usage: the SVG chart has bars with data, the breakdown names the model with its prompt-cache
 * hit rate, the recent requests are listed; the nodes view shows each node's cache hit rate. Trouble:
 * refused requests (401, 402, 400, 429) are listed with their reason and filtered, a node that just
 * failed reads failing or cooling with its last error in view, a drain and a re-enable from the
 * nodes view, a key's last use and requests today. Alerts:
 * rules set on a key in its edit dialog (a refused rule shown beside them), the deliveries a crossing
 * makes in the alerts view and the key's dialog, a webhook answering 500 flagged. At phone width the page does not overflow
 * sideways (tables scroll in their frame). Nothing is blocked by the page's Content-Security-Policy. Screenshots go to test/browser/screenshots/ (gitignored).
 */
import { mkdirSync } from "node:fs";
import { request } from "node:http";
import { fileURLToPath } from "node:url";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
// The console's own formatter: the test expects exactly what the page shows for a balance.
import { usd } from "../../src/console/js/format.js";
import { haveChromium, launchChromium } from "./chromium";

const SHOTS = fileURLToPath(new URL("./screenshots/", import.meta.url));

const gatewayUrl = () => inject("gatewayUrl");
/** expect.poll with room for a busy machine (its default gives up after one second). */
const poll = <T>(fn: () => T | Promise<T>) => expect.poll(fn, { timeout: 15_000, interval: 100 });

async function adminCall<T>(path: string, init: RequestInit = {}): Promise<T> {
	const res = await fetch(`${gatewayUrl()}/admin${path}`, {
		...init,
		headers: { authorization: `Bearer ${inject("adminToken")}`, "content-type": "application/json" },
	});
	if (!res.ok) throw new Error(`admin ${path}: ${res.status} ${await res.text()}`);
	return (await res.json()) as T;
}

async function until<T>(what: string, fn: () => Promise<T | null | undefined | false>, timeoutMs = 20_000): Promise<T> {
	const start = Date.now();
	for (;;) {
		const v = await fn();
		if (v) return v;
		if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
		await new Promise((r) => setTimeout(r, 200));
	}
}

interface Key {
	id: string;
	key: string;
	name: string;
	balance_usd: number;
}

/**
 * A POST on a connection of its own (no keep-alive): a reused connection that the local server
 * closed between two requests failed this setup now and then ("other side closed").
 */
function postOnNewConnection(url: string, secret: string, body: string): Promise<{ status: number; requestId: string }> {
	return new Promise((resolve, reject) => {
		const req = request(
			url,
			{
				method: "POST",
				agent: false,
				headers: { authorization: `Bearer ${secret}`, "content-type": "application/json", connection: "close" },
			},
			(res) => {
				res.resume();
				res.on("end", () => resolve({ status: res.statusCode ?? 0, requestId: String(res.headers["x-request-id"]) }));
				res.on("error", reject);
			},
		);
		req.on("error", reject);
		req.end(body);
	});
}

describe.skipIf(!haveChromium)("the operator console in a real browser", () => {
	const tag = crypto.randomUUID().slice(0, 8);
	const name = `console-${tag}`;
	// The other keys' names do not contain `name`: searching for it finds one row.
	const brokeName = `trouble-${tag}-broke`;
	let key: Key;
	let broke: Key;
	/** The request ids of the refusals this test caused, by status. */
	const refusedIds: Record<number, string> = {};
	let browser: Browser;
	let context: BrowserContext;
	let page: Page;
	/** Page errors and console errors (a CSP violation is reported as one). */
	const problems: string[] = [];

	async function newPage(viewport: { width: number; height: number }): Promise<[BrowserContext, Page]> {
		const ctx = await browser.newContext({ viewport });
		const p = await ctx.newPage();
		p.on("pageerror", (err) => problems.push(`pageerror: ${err.message}`));
		p.on("console", (msg) => {
			if (msg.type() === "error") problems.push(`console: ${msg.text()}`);
		});
		return [ctx, p];
	}

	async function signIn(p: Page, token: string) {
		await p.goto(`${gatewayUrl()}/admin/`);
		await p.locator("#token").fill(token);
		// Enter submits the login form.
		await p.locator("#token").press("Enter");
	}

	const row = () => page.locator(`#keys-table tr[data-key-id="${key.id}"]`);
	const balanceCell = () => row().locator('td[data-field="balance"]');

	beforeAll(async () => {
		mkdirSync(SHOTS, { recursive: true });
		key = await adminCall<Key>("/keys", { method: "POST", body: JSON.stringify({ name, balance_usd: 5 }) });
		// Two on test/ok (no cache hits) and one on test/cached (the engine reports half the prompt cached).
		const requests = [
			["test/ok", "first request from the console test"],
			["test/ok", "second one, a little longer than the first"],
			["test/cached", "a third, whose prefix the engine had cached, long enough to have some"],
		];
		for (const [model, content] of requests) {
			const res = await fetch(`${gatewayUrl()}/v1/chat/completions`, {
				method: "POST",
				headers: { authorization: `Bearer ${key.key}`, "content-type": "application/json" },
				body: JSON.stringify({ model, messages: [{ role: "user", content }] }),
			});
			expect(res.status).toBe(200);
			await res.text();
		}
		// Refusals: a bad key, an empty balance, a bad body, a rate limit; and a model whose two nodes fail
		// (a 500 and a dropped connection), so the nodes view has trouble to show.
		broke = await adminCall<Key>("/keys", { method: "POST", body: JSON.stringify({ name: brokeName, balance_usd: 0 }) });
		const limited = await adminCall<Key>("/keys", {
			method: "POST",
			body: JSON.stringify({ name: `trouble-${tag}-limited`, balance_usd: 1, rpm: 1 }),
		});
		const fleet = await adminCall<Key>("/keys", {
			method: "POST",
			body: JSON.stringify({ name: `trouble-${tag}-fleet`, balance_usd: 1 }),
		});
		const hi = { model: "test/ok", messages: [{ role: "user", content: "hi" }] };
		const refusals: [string, unknown][] = [
			["vk-console-not-a-real-key-0123456789", hi],
			[broke.key, hi],
			[broke.key, { model: "test/ok", messages: [] }],
			[limited.key, hi],
			[limited.key, hi],
			[fleet.key, { model: "test/all-down", messages: [{ role: "user", content: "fail" }] }],
		];
		for (const [secret, body] of refusals) {
			const res = await postOnNewConnection(`${gatewayUrl()}/v1/chat/completions`, secret, JSON.stringify(body));
			refusedIds[res.status] = res.requestId;
		}
		expect(Object.keys(refusedIds).map(Number).sort()).toEqual([200, 400, 401, 402, 429, 502]);
		// Settlement and the ledger's outbox flush to D1 run after the answers, on the ledger's alarm.
		await until("the usage records in D1", async () => {
			const usage = await adminCall<{ data: unknown[] }>(`/usage?key_id=${key.id}`);
			return usage.data.length >= 3;
		});
		browser = await launchChromium();
		[context, page] = await newPage({ width: 1400, height: 900 });
	});

	afterAll(async () => {
		await context?.close();
		await browser?.close();
	});

	it("refuses a wrong token with a message and shows no data", async () => {
		await signIn(page, "not-the-admin-token");
		await poll(() => page.locator("#message").textContent()).toBe("That admin token was refused.");
		expect(await page.locator("#keys-view").isHidden()).toBe(true);
		expect(await page.locator("#tabs").isHidden()).toBe(true);
		expect(await page.locator("main tbody tr").count()).toBe(0);
		expect(await page.evaluate(() => sessionStorage.length)).toBe(0);
		await page.screenshot({ path: `${SHOTS}wrong-token.png` });
	});

	it("finds the key by name with its balance", async () => {
		await page.locator("#token").fill(inject("adminToken"));
		await page.locator("#token").press("Enter");
		await page.locator("#keys-view").waitFor({ state: "visible" });
		// The token is kept for this tab only, and never in the URL.
		expect(await page.evaluate(() => sessionStorage.getItem("venym.adminToken"))).toBe(inject("adminToken"));
		expect(page.url()).not.toContain(inject("adminToken"));
		expect(await page.evaluate(() => document.cookie)).toBe("");

		await page.locator("#key-name").fill(name);
		await poll(() => page.locator("#keys-table tbody tr").count()).toBe(1);
		const current = await adminCall<Key>(`/keys/${key.id}`);
		expect(current.balance_usd).toBeLessThan(5);
		await poll(() => balanceCell().textContent()).toBe(usd(current.balance_usd));
		expect(Number(await balanceCell().getAttribute("data-usd"))).toBe(current.balance_usd);
		expect(await row().locator("td").first().textContent()).toBe(name);
		// Its use: the three requests (and the failed one, which billed nothing) today, and when.
		await poll(async () => {
			await page.locator("#key-name").press("Enter");
			return row().locator('td[data-field="last-used"]').textContent();
		}).toMatch(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC$/);
		expect(Number(await row().locator('td[data-field="requests-today"]').textContent())).toBeGreaterThanOrEqual(3);
		expect(await row().locator('td[data-field="status"]').textContent()).toBe("active");
		await page.screenshot({ path: `${SHOTS}keys.png` });
	});

	it("tops the key up and shows the new balance", async () => {
		const before = Number(await balanceCell().getAttribute("data-usd"));
		await row()
			.getByRole("button", { name: `Top up ${name}` })
			.click();
		await page.locator("#topup-amount").fill("2.5");
		await page.locator("#topup-note").fill("console test");
		await page.locator("#topup-note").press("Enter");
		await poll(async () => Number(await balanceCell().getAttribute("data-usd"))).not.toBe(before);
		const shown = Number(await balanceCell().getAttribute("data-usd"));
		expect(shown).toBeCloseTo(before + 2.5, 9);
		expect(await balanceCell().textContent()).toBe(usd(shown));
		expect(await page.locator("#topup-dialog").isVisible()).toBe(false);
		expect((await adminCall<Key>(`/keys/${key.id}`)).balance_usd).toBe(shown);
	});

	it("opens the key's usage: a chart drawn with data, the model breakdown, the recent requests", async () => {
		await row().getByRole("button", { name: name, exact: true }).click();
		await page.locator("#usage-view").waitFor({ state: "visible" });
		expect(await page.locator("#usage-scope").textContent()).toContain(key.id);
		const bars = page.locator("#usage-chart svg rect.bar-rect");
		await poll(() => bars.count()).toBeGreaterThanOrEqual(24);
		const drawn = await bars.evaluateAll(
			(rects) => rects.filter((r) => Number(r.getAttribute("height")) > 0 && Number((r as SVGElement).dataset.cost) > 0).length,
		);
		expect(drawn).toBeGreaterThanOrEqual(1);
		expect(await page.locator("#usage-chart svg polyline.tokens-line").count()).toBe(1);
		await poll(() => page.locator("#usage-models tbody").textContent()).toContain("test/ok");
		// Each model's prompt-cache hit rate, as the summary API counts it.
		const summary = await adminCall<{ data: { model: string; prompt_tokens: number; cached_tokens: number }[] }>(
			`/usage/summary?key_id=${key.id}&group_by=model&granularity=day&since=${Math.floor(Date.now() / 1000) - 86_400}`,
		);
		const cached = summary.data.filter((r) => r.model === "test/cached");
		const [prompt, hits] = cached.reduce(([p, c], r) => [p + r.prompt_tokens, c + r.cached_tokens], [0, 0]);
		expect(hits).toBeGreaterThan(0);
		const cell = (model: string, field: string) =>
			page.locator(`#usage-models tr[data-model="${model}"] td[data-field="${field}"]`).textContent();
		expect(await cell("test/cached", "cache-hit-rate")).toBe(`${((hits / prompt) * 100).toFixed(1)}%`);
		expect(await cell("test/cached", "cached")).toBe(String(hits));
		expect(await cell("test/ok", "cache-hit-rate")).toBe("0.0%");
		expect(await page.locator("#usage-recent tbody tr").count()).toBe(3);
		const cost = await page.locator("#usage-recent tbody tr td").nth(5).textContent();
		expect(cost).toMatch(/^\$0\.0000?[1-9]/);
		await page.screenshot({ path: `${SHOTS}usage-1400x900.png` });

		// Daily buckets over 7 days: the same spend in fewer, wider bars.
		await page.getByRole("radio", { name: "7 d", exact: true }).check();
		await page.getByRole("radio", { name: "day", exact: true }).check();
		await poll(() => bars.count()).toBe(8);
	});

	it("shows each node's prompt-cache hit rate in the nodes view", async () => {
		const nodes = await adminCall<{ data: { model: string; cache_hit_rate: number | null }[] }>("/nodes");
		const rate = nodes.data.find((n) => n.model === "test/cached")?.cache_hit_rate;
		expect(rate).toBeGreaterThan(0);
		await page.getByRole("button", { name: "Nodes", exact: true }).click();
		const cell = page.locator("#nodes-table tbody tr", { hasText: "test/cached" }).locator('td[data-field="cache-hit-rate"]');
		await poll(() => cell.first().textContent()).toBe(`${((rate as number) * 100).toFixed(1)}%`);
	});

	it("lists refused requests with their reason and key name, and filters them", async () => {
		await page.getByRole("button", { name: "Refused", exact: true }).click();
		await page.locator("#refused-view").waitFor({ state: "visible" });
		const refusedRow = (status: number) => page.locator(`#refused-table tr[data-request-id="${refusedIds[status]}"]`);
		for (const status of [401, 402, 400, 429]) await refusedRow(status).waitFor();
		expect(await refusedRow(401).locator('td[data-field="reason"]').textContent()).toBe("invalid_api_key");
		expect(await refusedRow(402).locator('td[data-field="reason"]').textContent()).toBe("insufficient_balance");
		expect(await refusedRow(402).locator('td[data-field="key"]').textContent()).toBe(`${brokeName} ${broke.id}`);
		expect(await refusedRow(429).locator('td[data-field="reason"]').textContent()).toBe("rate_limit_exceeded");
		// A served request and an engine failure (502) are not refusals.
		expect(await refusedRow(200).count()).toBe(0);
		expect(await refusedRow(502).count()).toBe(0);
		await page.locator("#refused-status").selectOption("402");
		const statuses = () =>
			page
				.locator("#refused-table tbody tr")
				.evaluateAll((rows) => [...new Set(rows.map((r) => (r as HTMLElement).dataset.status))].sort());
		await poll(statuses).toEqual(["402"]);
		await page.locator("#refused-status").selectOption("");
		await page.locator("#refused-key").fill(broke.id);
		await poll(() => page.locator("#refused-table tbody tr").count()).toBe(2);
		await page.screenshot({ path: `${SHOTS}refused-1400x900.png` });
	});

	it("sets a key's alert rules in its edit dialog, and lists the deliveries a crossing makes, a failing one flagged", async () => {
		const engine = inject("engineUrl");
		const okHook = `console-${tag}-ok`;
		const badHook = `console-${tag}-bad`;
		// The second webhook answers 500 at every attempt: its delivery stays pending, retried with backoff.
		await fetch(`${engine}/_engine/hooks/${badHook}`, {
			method: "POST",
			headers: { "content-type": "application/json" },
			body: JSON.stringify({ statuses: [500, 500, 500, 500] }),
		});
		const alertName = `alerting-${tag}`;
		const alerted = await adminCall<Key>("/keys", { method: "POST", body: JSON.stringify({ name: alertName, balance_usd: 1 }) });
		await page.getByRole("button", { name: "Keys", exact: true }).click();
		await page.locator("#key-name").fill(alertName);
		const keyRow = page.locator(`#keys-table tr[data-key-id="${alerted.id}"]`);
		await keyRow.getByRole("button", { name: `Edit ${alertName}` }).click();
		await page.locator("#scopes-dialog").waitFor({ state: "visible" });
		await poll(() => page.locator("#key-alerts-empty").textContent()).toBe("No alerts sent for this key.");
		const rules = page.locator("#alert-rules .rule");
		const addRule = async (when: string, at: string, url: string) => {
			await page.getByRole("button", { name: "Add rule" }).click();
			const rule = rules.last();
			await rule.locator(".rule-when").selectOption(when);
			if (at) await rule.locator(".rule-at").fill(at);
			if (url) await rule.locator(".rule-url").fill(url);
		};
		await addRule("balance_below_usd", "1", `${engine}/hook/${okHook}`);
		await addRule("balance_below_usd", "1", `${engine}/hook/${badHook}`);
		// A spent_pct_of_cap rule needs a threshold: the server's refusal is shown beside the rules, its row marked.
		await addRule("spent_pct_of_cap", "", "");
		await page.getByRole("button", { name: "Save" }).click();
		await poll(() => page.locator("#alert-rules-error").textContent()).toContain("spent_pct_of_cap needs 'at'");
		expect(await rules.nth(2).getAttribute("class")).toContain("invalid");
		expect(await page.locator("#scopes-dialog").isVisible()).toBe(true);
		await page.getByRole("button", { name: "Remove rule 3" }).click();
		expect(await page.locator("#alert-rules-error").isHidden()).toBe(true);
		await page.getByRole("button", { name: "Save" }).click();
		await page.locator("#scopes-dialog").waitFor({ state: "hidden" });
		const saved = await adminCall<{ alerts: unknown }>(`/keys/${alerted.id}`);
		expect(saved.alerts).toEqual([
			{ when: "balance_below_usd", at: 1, webhook_url: `${engine}/hook/${okHook}` },
			{ when: "balance_below_usd", at: 1, webhook_url: `${engine}/hook/${badHook}` },
		]);

		// One request takes the balance below $1: both rules cross once.
		const res = await fetch(`${gatewayUrl()}/v1/chat/completions`, {
			method: "POST",
			headers: { authorization: `Bearer ${alerted.key}`, "content-type": "application/json" },
			body: JSON.stringify({ model: "test/ok", messages: [{ role: "user", content: "spend a little" }] }),
		});
		expect(res.status).toBe(200);
		await res.text();
		interface Delivery {
			id: string;
			target: string;
			status: string;
			attempts: number;
			last_status_code: number | null;
		}
		const deliveries = await until("both deliveries attempted and copied to D1", async () => {
			const list = await adminCall<{ data: Delivery[] }>(`/alert-deliveries?key_id=${alerted.id}`);
			const ok = list.data.find((d) => d.status === "delivered");
			const bad = list.data.find((d) => d.last_status_code === 500);
			return list.data.length === 2 && ok && bad ? { ok, bad } : null;
		});
		expect(deliveries.bad.status).toBe("pending");
		const received = (await (await fetch(`${engine}/_engine/hooks/${okHook}`)).json()) as unknown[];
		expect(received.length).toBe(1);

		await page.getByRole("button", { name: "Alerts", exact: true }).click();
		await page.locator("#alerts-view").waitFor({ state: "visible" });
		await page.locator("#alerts-key").fill(alerted.id);
		const delivery = (id: string) => page.locator(`#alerts-table tr[data-delivery-id="${id}"]`);
		await poll(() => page.locator("#alerts-table tbody tr").count()).toBe(2);
		const okRow = delivery(deliveries.ok.id);
		expect(await okRow.locator('td[data-field="status"]').textContent()).toBe("delivered");
		expect(await okRow.locator('td[data-field="event"]').textContent()).toBe("balance_below_usd");
		expect(await okRow.locator('td[data-field="subject"]').textContent()).toBe(`${alertName} ${alerted.id}`);
		expect(await okRow.locator('td[data-field="target"]').textContent()).toBe(deliveries.ok.target);
		expect(await okRow.locator('td[data-field="delivered"]').textContent()).toMatch(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC$/);
		// The failing webhook's delivery is flagged: retrying, its last answer 500 in view.
		const badRow = delivery(deliveries.bad.id);
		expect(await badRow.getAttribute("data-state")).toBe("retrying");
		expect(await badRow.locator('td[data-field="status"]').getAttribute("class")).toBe("warn");
		expect(await badRow.locator('td[data-field="last"]').textContent()).toBe("500");
		expect(Number(await badRow.locator('td[data-field="attempts"]').textContent())).toBeGreaterThanOrEqual(1);
		await page.screenshot({ path: `${SHOTS}alerts-1400x900.png` });
		// Filters: by status, and by an event none of them is.
		await page.locator("#alerts-status").selectOption("delivered");
		await poll(() => page.locator("#alerts-table tbody tr").count()).toBe(1);
		expect(await okRow.count()).toBe(1);
		await page.locator("#alerts-status").selectOption("");
		await page.locator("#alerts-event").selectOption("exhausted");
		await poll(() => page.locator("#alerts-empty").isVisible()).toBe(true);
		await page.locator("#alerts-event").selectOption("");
		await page.locator("#alerts-key").fill("");

		// From the key: its own deliveries, in its edit dialog.
		await page.getByRole("button", { name: "Keys", exact: true }).click();
		await keyRow.getByRole("button", { name: `Edit ${alertName}` }).click();
		await poll(() => page.locator("#key-alerts-table tbody tr").count()).toBe(2);
		expect(await page.locator(`#key-alerts-table tr[data-delivery-id="${deliveries.bad.id}"]`).getAttribute("data-state")).toBe(
			"retrying",
		);
		expect(await rules.count()).toBe(2);
		await page.getByRole("button", { name: "Cancel" }).click();
		await page.locator("#scopes-dialog").waitFor({ state: "hidden" });
	});

	it("reloads the view on screen every interval while auto-refresh is on", async () => {
		const [ctx, p] = await newPage({ width: 1400, height: 900 });
		try {
			// The page's timers under a clock the test moves: no waiting out the interval.
			await p.clock.install();
			await signIn(p, inject("adminToken"));
			await p.locator("#keys-view").waitFor({ state: "visible" });
			await p.getByRole("button", { name: "Refused", exact: true }).click();
			await p.locator("#refused-table tbody tr").first().waitFor();
			await p.locator("#auto-interval").selectOption("10");
			await p.locator("#auto-refresh").check();
			const res = await fetch(`${gatewayUrl()}/v1/chat/completions`, {
				method: "POST",
				headers: { authorization: "Bearer vk-console-refresh-not-a-key-0123456789", "content-type": "application/json" },
				body: "{}",
			});
			await res.text();
			const fresh = p.locator(`#refused-table tr[data-request-id="${res.headers.get("x-request-id")}"]`);
			// The refusal is written under waitUntil: each interval's reload looks again.
			await poll(async () => {
				await p.clock.fastForward(10_000);
				return fresh.count();
			}).toBe(1);
			await p.locator("#auto-refresh").uncheck();
		} finally {
			await ctx.close();
		}
	});

	it("shows a node that just failed as failing or cooling with its last error in view, and drains and re-enables it", async () => {
		await page.getByRole("button", { name: "Nodes", exact: true }).click();
		const downRows = page.locator('#nodes-table tbody tr[data-model="test/all-down"]');
		await poll(() => downRows.count()).toBe(2);
		const states = await downRows.evaluateAll((rows) => rows.map((r) => (r as HTMLElement).dataset.state));
		for (const state of states) expect(["failing", "cooling", "unhealthy"]).toContain(state);
		const failed = downRows.filter({ hasText: "status 500" });
		expect(await failed.count()).toBe(1);
		// The error is in view at 1400 px: its cell lies within the window, no scrolling needed.
		const box = await failed.locator('td[data-field="last-error"]').boundingBox();
		expect(box).not.toBeNull();
		expect((box?.x ?? 0) + (box?.width ?? 0)).toBeLessThanOrEqual(1400);
		await page.screenshot({ path: `${SHOTS}nodes-1400x900.png` });

		// Drain the node that answered 500 (only for test/all-down), then re-enable it.
		const url = (await failed.getAttribute("data-url")) as string;
		const node = () => page.locator(`#nodes-table tbody tr[data-model="test/all-down"][data-url="${url}"]`);
		await node()
			.getByRole("button", { name: `Drain test/all-down on ${url}` })
			.click();
		await poll(() => node().getAttribute("data-state")).toBe("drained");
		const listed = await adminCall<{ data: { model: string; url: string; drained: boolean }[] }>("/nodes");
		expect(listed.data.find((n) => n.model === "test/all-down" && n.url === url)?.drained).toBe(true);
		await node()
			.getByRole("button", { name: `Re-enable test/all-down on ${url}` })
			.click();
		await poll(() => node().getAttribute("data-state")).toBe("healthy");
		const after = await adminCall<{ data: { model: string; url: string; drained: boolean }[] }>("/nodes");
		expect(after.data.find((n) => n.model === "test/all-down" && n.url === url)?.drained).toBe(false);
	});

	it("fits a phone's width: only tables scroll sideways, inside their frame", async () => {
		const [phone, p] = await newPage({ width: 390, height: 844 });
		try {
			await signIn(p, inject("adminToken"));
			await p.locator("#keys-view").waitFor({ state: "visible" });
			await p.locator("#key-name").fill(name);
			await poll(() => p.locator("#keys-table tbody tr").count()).toBe(1);
			const overflow = () => p.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
			expect(await overflow()).toBeLessThanOrEqual(0);
			await p.screenshot({ path: `${SHOTS}keys-390x844.png`, fullPage: true });
			await p
				.locator(`#keys-table tr[data-key-id="${key.id}"]`)
				.getByRole("button", { name: `Usage of ${name}` })
				.click();
			await p.locator("#usage-chart svg").waitFor();
			expect(await overflow()).toBeLessThanOrEqual(0);
			await p.screenshot({ path: `${SHOTS}usage-390x844.png`, fullPage: true });
			const views: [string, string][] = [
				["Nodes", "#nodes-table"],
				["Refused", "#refused-table"],
				["Alerts", "#alerts-table"],
			];
			for (const [tab, table] of views) {
				await p.getByRole("button", { name: tab, exact: true }).click();
				await p.locator(`${table} tbody tr`).first().waitFor();
				expect(await overflow()).toBeLessThanOrEqual(0);
				// The table is wider than the phone and scrolls inside its frame.
				const frame = await p.locator(table).evaluate((t) => {
					const wrap = t.parentElement as HTMLElement;
					return { scroll: wrap.scrollWidth, client: wrap.clientWidth, overflowX: getComputedStyle(wrap).overflowX };
				});
				expect(frame.scroll).toBeGreaterThan(frame.client);
				expect(frame.overflowX).toBe("auto");
				await p.screenshot({ path: `${SHOTS}${tab.toLowerCase()}-390x844.png`, fullPage: true });
			}
			// The edit dialog's alert rules fit the phone: no sideways scroll in the dialog.
			await p.getByRole("button", { name: "Keys", exact: true }).click();
			await p
				.locator(`#keys-table tr[data-key-id="${key.id}"]`)
				.getByRole("button", { name: `Edit ${name}` })
				.click();
			await p.getByRole("button", { name: "Add rule" }).click();
			// Nothing sticks out of the dialog (what scrolls inside a table's frame is clipped by it).
			const sticking = await p.locator("#scopes-dialog").evaluate((d) => {
				const box = d.getBoundingClientRect();
				const out: string[] = [];
				for (const el of d.querySelectorAll("*")) {
					if (el.closest(".table-wrap") && !el.classList.contains("table-wrap")) continue;
					const r = el.getBoundingClientRect();
					if (r.width > 0 && (r.right > box.right + 0.5 || r.left < box.left - 0.5)) {
						out.push(`${el.tagName.toLowerCase()}#${el.id}.${el.className} ${Math.round(r.left)}-${Math.round(r.right)}`);
					}
				}
				return { out, right: box.right, scroll: d.scrollWidth, client: d.clientWidth };
			});
			expect(sticking.out).toEqual([]);
			expect(sticking.scroll).toBeLessThanOrEqual(sticking.client);
			expect(sticking.right).toBeLessThanOrEqual(390);
			await p.screenshot({ path: `${SHOTS}edit-alerts-390x844.png` });
			await p.getByRole("button", { name: "Cancel" }).click();
		} finally {
			await phone.close();
		}
	});

	it("logs out and forgets the token", async () => {
		await page.getByRole("button", { name: "Log out" }).click();
		await page.locator("#login-view").waitFor({ state: "visible" });
		expect(await page.evaluate(() => sessionStorage.length)).toBe(0);
		expect(await page.locator("main tbody tr").count()).toBe(0);
		await page.reload();
		expect(await page.locator("#login-view").isVisible()).toBe(true);
	});

	it("ran without page errors or Content-Security-Policy violations", () => {
		// The wrong token's 401 and the refused alert rule's 400 are the console errors a browser logs
		// for a failed fetch; the 400 once only.
		const unexpected = problems.filter((p) => !/401 \(Unauthorized\)/.test(p));
		const refusedRule = unexpected.findIndex((p) => /400 \(Bad Request\)/.test(p));
		if (refusedRule >= 0) unexpected.splice(refusedRule, 1);
		expect(unexpected).toEqual([]);
	});
});
