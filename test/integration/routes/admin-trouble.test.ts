/**
 * What the console shows of trouble, through the admin API: refused requests recorded with their
 * reason (bounded per isolate a minute, pruned by the maintenance run), a key's last use and
 * requests today, a node that just failed shown as failing or cooling with its last error, and
 * the node actions (drain, weight, re-enable).
 */
import { env } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { fleetConfig, gatewayWith, marker, model, type NodeRow, nodeUrl, rowsOf, setNode } from "../../support/fleet";
import { admin, type CreatedKey, chat, createKey, waitFor } from "../../support/gateway";

interface Refusal {
	request_id: string;
	created_at: number;
	status: number;
	code: string | null;
	message: string | null;
	lane: string;
	key_id: string | null;
	key_name: string | null;
	model: string | null;
	suppressed: number;
}

type TroubleRow = NodeRow & { state: string; last_error_at: number | null; failures: number };

async function refusals(q = ""): Promise<Refusal[]> {
	const res = await admin(`/refusals${q}`);
	expect(res.status).toBe(200);
	return ((await res.json()) as { data: Refusal[] }).data;
}

const hi = { model: "test/ok", messages: [{ role: "user", content: "hi" }] };

beforeAll(() => {
	// Request lines and warnings stay out of the test output.
	vi.spyOn(console, "log").mockImplementation(() => {});
});
afterAll(() => vi.restoreAllMocks());

describe("refused requests", () => {
	let broke: CreatedKey;
	const ids: Record<number, string> = {};

	beforeAll(async () => {
		broke = await createKey({ name: "trouble-broke", balance_usd: 0 });
		const limited = await createKey({ name: "trouble-limited", balance_usd: 1, rpm: 1 });
		const answers = [
			await chat("vk-not-a-real-key-0123456789abcdef", hi),
			await chat(broke.key, hi),
			await chat(broke.key, { model: "test/ok", messages: [] }),
			await chat(limited.key, hi),
			await chat(limited.key, hi),
		];
		for (const res of answers) {
			await res.text();
			ids[res.status] = res.headers.get("x-request-id") as string;
		}
		expect(answers.map((r) => r.status)).toEqual([401, 402, 400, 200, 429]);
	});

	it("lists each refusal with its status, reason, lane, model and key name", async () => {
		const rows = await waitFor(async () => {
			const all = await refusals("?limit=200");
			const mine = [401, 402, 400, 429].map((s) => all.find((r) => r.request_id === ids[s]));
			return mine.every(Boolean) ? (mine as Refusal[]) : null;
		});
		const [r401, r402, r400, r429] = rows;
		expect(r401).toMatchObject({ status: 401, code: "invalid_api_key", key_id: null, key_name: null, lane: "chat" });
		expect(r402).toMatchObject({ status: 402, code: "insufficient_balance", key_id: broke.id, key_name: "trouble-broke" });
		expect(r402?.model).toBe("test/ok");
		expect(r400?.status).toBe(400);
		expect(r400?.message).toBeTruthy();
		expect(r429).toMatchObject({ status: 429, code: "rate_limit_exceeded", key_name: "trouble-limited" });
		// The request that was served is not a refusal.
		expect((await refusals("?limit=200")).some((r) => r.request_id === ids[200])).toBe(false);
	});

	it("filters by status, code and key", async () => {
		const by402 = await refusals("?status=402&limit=200");
		expect(by402.length).toBeGreaterThan(0);
		expect(by402.every((r) => r.status === 402)).toBe(true);
		const byCode = await refusals("?code=rate_limit_exceeded&limit=200");
		expect(byCode.every((r) => r.code === "rate_limit_exceeded")).toBe(true);
		expect(byCode.some((r) => r.request_id === ids[429])).toBe(true);
		const byKey = await refusals(`?key_id=${broke.id}`);
		expect(byKey.map((r) => r.request_id).sort()).toEqual([ids[402], ids[400]].sort());
		expect((await admin("/refusals?status=200")).status).toBe(400);
	});

	it("records at most 30 a minute per isolate however many come, counting the rest", async () => {
		const flood = await Promise.all(
			Array.from({ length: 45 }, () => chat("vk-flood-not-a-key-0123456789abcdef", hi).then((r) => r.text())),
		);
		expect(flood).toHaveLength(45);
		const since = Math.floor(Date.now() / 1000) - 120;
		// Every refusal of this file is a bad key's 401 or one of the five above: count per minute.
		const rows = await refusals(`?status=401&since=${since}&limit=200`);
		const perMinute = new Map<number, number>();
		for (const r of rows) perMinute.set(Math.floor(r.created_at / 60), (perMinute.get(Math.floor(r.created_at / 60)) ?? 0) + 1);
		for (const n of perMinute.values()) expect(n).toBeLessThanOrEqual(30);
		expect(rows.length).toBeLessThan(46);
	});

	it("is pruned by the maintenance run after 7 days", async () => {
		const old = Date.now() - 8 * 86_400_000;
		await env.DB.prepare(
			"INSERT INTO refused_requests (request_id, created_at, status, code, message, lane, key_id, model, suppressed) VALUES (?, ?, 401, 'invalid_api_key', 'old', 'chat', NULL, NULL, 0)",
		)
			.bind("req_trouble_old", old)
			.run();
		const res = await admin("/maintenance/run", { method: "POST" });
		const body = (await res.json()) as { refused_requests: { deleted: number } };
		expect(body.refused_requests.deleted).toBeGreaterThanOrEqual(1);
		const left = await env.DB.prepare("SELECT COUNT(*) AS n FROM refused_requests WHERE request_id = ?")
			.bind("req_trouble_old")
			.first();
		expect(left?.n).toBe(0);
		// Today's stay.
		expect((await refusals(`?key_id=${broke.id}`)).length).toBe(2);
	});
});

describe("a key's use", () => {
	it("shows when it was last used, its requests today, and whether it is overdrawn", async () => {
		const k = await createKey({ name: "trouble-use", balance_usd: 1 });
		const before = (await (await admin(`/keys/${k.id}`)).json()) as Record<string, unknown>;
		expect(before).toMatchObject({ last_used_at: null, requests_today: 0, overdrawn: false });
		for (let i = 0; i < 2; i++) await (await chat(k.key, hi)).text();
		const after = await waitFor(async () => {
			const row = (await (await admin(`/keys/${k.id}`)).json()) as Record<string, unknown>;
			return row.requests_today === 2 ? row : null;
		});
		expect(after.last_used_at).toBeGreaterThanOrEqual(Math.floor(Date.now() / 1000) - 60);
		const listed = (await (await admin("/keys?name=trouble-use")).json()) as { data: Record<string, unknown>[] };
		expect(listed.data[0]).toMatchObject({ id: k.id, requests_today: 2, overdrawn: false });
	});
});

describe("a node in trouble, and the node actions", () => {
	const t = marker("tr");
	const a = nodeUrl(`${t}a`);
	const b = nodeUrl(`${t}b`);
	const gw = gatewayWith(fleetConfig([model("trouble", [a, b])]), {}, { ownNodeHealth: true });
	let key: CreatedKey;
	const row = async (url: string) => rowsOf(await gw.admin("/nodes")).find((r) => r.url === url) as TroubleRow;
	const patch = (body: Record<string, unknown>) =>
		gw.admin("/nodes", { method: "PATCH", body: JSON.stringify({ url: a, ...body }) });

	beforeAll(async () => {
		key = await createKey({ balance_usd: 5 });
	});

	it("shows a node whose request just failed as failing, its last error in the row", async () => {
		await setNode(`${t}a`, { scenario: "fail500" });
		// Until one lands on a, which answers 500 (b serves it).
		await waitFor(async () => {
			const res = await gw.chat(key.key, { model: "trouble", messages: [{ role: "user", content: marker() }] });
			expect(res.res.status).toBe(200);
			return (await row(a)).last_error !== null ? true : null;
		});
		const failing = await row(a);
		// Failing at once; a probe round that ran meanwhile (its /health answers 500 too) may have marked it unhealthy.
		expect(["failing", "unhealthy"]).toContain(failing.state);
		expect(failing.last_error).toBe("status 500");
		expect(failing.last_error_at).toBeGreaterThanOrEqual(Math.floor(Date.now() / 1000) - 60);
		expect((await row(b)).state).toBe("healthy");
	});

	it("shows a node that drops connections as out (cooling, unhealthy or failing), and re-enables it", async () => {
		await setNode(`${t}a`, { scenario: "drop" });
		let last: TroubleRow | undefined;
		const troubled = await waitFor(async () => {
			const res = await gw.chat(key.key, { model: "trouble", messages: [{ role: "user", content: marker() }] });
			expect(res.res.status).toBe(200);
			const r = await row(a);
			last = r;
			return r.state !== "healthy" && r.last_error !== null && r.last_error !== "status 500" ? r : null;
		}).catch((err) => {
			throw new Error(`${err}: last ${JSON.stringify(last)}`);
		});
		// A connection it dropped cools it; its failing health probe (the probe is dropped too) marks it
		// unhealthy; a passing probe after a failure ends the cooldown, and it reads failing.
		expect(["cooling", "unhealthy", "failing"]).toContain(troubled.state);
		expect(troubled.last_error_at).not.toBeNull();
		await setNode(`${t}a`, { reset: true });
		const res = await patch({ reenable: true });
		expect(res.res.status).toBe(200);
		expect(rowsOf(res)[0]).toMatchObject({ state: "healthy", cooling_until: null, failures: 0, drained: false });
	});

	it("shows a node another isolate saw fail, from the shared view's reports", async () => {
		// A node this isolate never sent a request: only another isolate's report can say it failed.
		const c = nodeUrl(`${t}c`);
		const shared = gatewayWith(fleetConfig([model("elsewhere", [c])]));
		expect((await shared.admin("/nodes")).res.status).toBe(200);
		const other = env.NODE_HEALTH.get(env.NODE_HEALTH.idFromName("fleet"));
		const at = Date.now();
		await other.view([{ url: c }], 300, {
			[c]: { error: "connection failed", error_at: at, success_at: 0, cooling_until: at + 60_000 },
		});
		const seen = rowsOf(await shared.admin("/nodes")).find((r) => r.url === c) as TroubleRow;
		// Cooling, or failing once a passing probe after the failure ended the cooldown.
		expect(["cooling", "failing"]).toContain(seen.state);
		expect(seen).toMatchObject({ last_error: "connection failed", last_error_at: Math.ceil(at / 1000) });
		expect(seen.failures).toBe(0);
		// Re-enabled on this isolate, the shared view hears of it: no isolate's report keeps it out.
		const back = await shared.admin("/nodes", { method: "PATCH", body: JSON.stringify({ url: c, reenable: true }) });
		expect((rowsOf(back)[0] as TroubleRow).state).toBe("healthy");
		const after = await other.view([{ url: c }], 300);
		expect(after.reports?.[c]?.success_at).toBeGreaterThanOrEqual(at);
	});

	it("drains, weighs and re-enables a node", async () => {
		const drained = await patch({ drain: true });
		expect(rowsOf(drained)[0]).toMatchObject({ state: "drained", drained: true });
		const weighed = await patch({ weight: 3 });
		expect(rowsOf(weighed)[0]).toMatchObject({ state: "drained", weight: 0, override: { weight: 3, drained: true } });
		const back = await patch({ reenable: true });
		expect(rowsOf(back)[0]).toMatchObject({ state: "healthy", drained: false, weight: 3 });
		expect((await patch({ reenable: true, drain: true })).res.status).toBe(400);
		await patch({ clear: true });
	});
});
